"""``attention`` (q [b, s, hq, d], k [b, t, hk, d], v [b, t, hk, e]) → [b, s, hq, e], the
flash-attention layout, with grouped-query heads (hq = hk·g; query head i uses kv head
i // g, so q's head dim is the merged factor ``(hk g)``, hk major).

Attrs: ``causal`` (default True) and ``scale`` (default None = 1/√d). The causal mask is
bottom-right aligned as in FlashAttention ≥ 2.1: query i sees key j iff j ≤ i + (t − s)
(the usual lower triangle when s = t); causal needs t ≥ s.

Signature ``"b s (hk g) d, b t hk d, b t hk e -> b s (hk g) e"``: t, d, e BLOCKED (softmax
over t; dot products over d), s BLOCKED when causal (the mask needs absolute positions),
PARALLEL otherwise; b, hk, g parallel. Linear in v: partial_inputs {2}.

FLOPs: 2·b·s·t·hq·(d + e) (= 4·b·s·t·hq·d when e = d), the dense count; causal does NOT
halve it (kernels skip about half the blocks, but we keep the conventional dense figure).
bytes_moved counts q, k, v and the output only: like flash attention, no s×t score tensor
is ever written to memory.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import ShapeError
from graphs.ops import vjps
from graphs.ops._common import need_rank, same_dtype
from graphs.ops.kernel_shape import AttentionShape
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature

SIGNATURE = "b s (hk g) d, b t hk d, b t hk e -> b s (hk g) e"


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    q, k, v = ins
    for spec, what in ((q, "q [b, s, hq, d]"), (k, "k [b, t, hk, d]"), (v, "v [b, t, hk, e]")):
        need_rank(spec, 4, "attention", what)
    b, s, hq, d = q.shape
    ok = (k.shape[0] == b and k.shape[3] == d and v.shape[:3] == k.shape[:3]
          and k.shape[2] > 0 and hq % k.shape[2] == 0)
    if not ok:
        msg = (f"attention: q {list(q.shape)}, k {list(k.shape)}, v {list(v.shape)} do not fit "
               f"[b, s, hq, d], [b, t, hk, d], [b, t, hk, e] with hk dividing hq")
        raise ShapeError(msg)
    if bool(attrs.get("causal", True)) and k.shape[1] < s:
        raise ShapeError(f"attention: causal needs t >= s, got s={s}, t={k.shape[1]}")
    return (TensorSpec((b, s, hq, v.shape[3]), same_dtype(ins, "attention")),)


infer_attention = _infer
"""Shape inference of ``attention`` (its backward kind checks its operands with it)."""


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    blocked = ["t", "d", "e"] + (["s"] if bool(attrs.get("causal", True)) else [])
    return bind_signature(SIGNATURE, [t.shape for t in ins], [outs[0].shape], blocked=blocked)


def _reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    q, k, v = arrays
    s, hq, d = q.shape[1], q.shape[2], q.shape[3]
    t, hk = k.shape[1], k.shape[2]
    scale = attrs.get("scale")
    scale = 1.0 / np.sqrt(d) if scale is None else float(scale)
    heads = np.arange(hq) // (hq // hk)
    scores = np.einsum("bshd,bthd->bhst", q, k[:, :, heads]) * scale
    if bool(attrs.get("causal", True)):
        visible = np.arange(t)[None, :] <= np.arange(s)[:, None] + (t - s)
        scores = np.where(visible, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return (np.einsum("bhst,bthe->bshe", weights, v[:, :, heads]).astype(q.dtype),)


def _flops(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    b, s, hq, d = ins[0].shape
    t, e = ins[1].shape[1], ins[2].shape[3]
    return 2.0 * b * s * t * hq * (d + e)


def attention_kernel(ins: Specs, outs: Specs, attrs: Attrs, backward: bool = False
                     ) -> AttentionShape:
    """The flash-attention call on these (local) q, k, v shapes."""
    b, s, hq, d = ins[0].shape
    return AttentionShape(batch=b, heads=hq, seq_q=s, seq_k=ins[1].shape[1], head_dim=d,
                          head_dim_v=ins[2].shape[3], causal=bool(attrs.get("causal", True)),
                          backward=backward)


register_op(OpDef(kind="attention", infer=_infer, signature=_signature, reference=_reference,
                  flops=_flops, partial_inputs=(frozenset({2}),), num_inputs=3,
                  vjp=vjps.attention_vjp, kernel=attention_kernel,
                  optional_attrs={"causal": True, "scale": None},
                  doc="Fused (flash) attention with GQA; see the module docstring."))
