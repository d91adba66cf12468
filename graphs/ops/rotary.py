"""``rotary`` (x [b, s, n, d], cos [s, d/2], sin [s, d/2]) → [b, s, n, d]: rotary position
embedding in the rotate-half convention of Hugging Face Llama::

    x1, x2 = x[..., :d/2], x[..., d/2:]
    out = concat(x1·cos − x2·sin, x2·cos + x1·sin)

d is BLOCKED (it pairs i with i + d/2), as is cos/sin's half dim; s is shared with cos and sin,
so sequence sharding stays correct (each shard gets its positions' angles). Linear in x, so
partial_inputs is {0}. FLOPs: 3 per element of x (two products and a sum).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import ShapeError
from graphs.ops import vjps
from graphs.ops._common import need_rank, numel_flops, same_dtype
from graphs.ops.registry import Attrs, OpDef, Specs, register_op
from graphs.signature import DimSignature, bind_signature

SIGNATURE = "b s n d, s r, s r -> b s n d"


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    x, cos, sin = ins
    need_rank(x, 4, "rotary", "x [b, s, n, d]")
    _b, s, _n, d = x.shape
    if d % 2 or cos.shape != (s, d // 2) or sin.shape != (s, d // 2):
        msg = (f"rotary: x {list(x.shape)} needs an even head dim and cos/sin of shape "
               f"[{s}, {d // 2}], got {list(cos.shape)} and {list(sin.shape)}")
        raise ShapeError(msg)
    same_dtype(ins, "rotary")
    return (x,)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    return bind_signature(SIGNATURE, [t.shape for t in ins], [outs[0].shape],
                          blocked=["d", "r"])


def _reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x, cos, sin = arrays
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return (np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1),)


register_op(OpDef(kind="rotary", infer=_infer, signature=_signature, reference=_reference,
                  flops=numel_flops(3), partial_inputs=(frozenset({0}),), num_inputs=3,
                  vjp=vjps.rotary_vjp,
                  doc="Rotary embedding, rotate-half (HF Llama) convention."))
