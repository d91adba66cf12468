"""``softmax`` and ``log_softmax`` {dim: int = -1}: the normalised dim is BLOCKED (every row
needs its whole extent), all others parallel. Computed max-subtracted for stability.
FLOPs: 5 per element (max, subtract, exp, sum, divide/log), a documented estimate."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.ops import vjps
from graphs.ops._common import dim_names, norm_dim, numel_flops, signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, register_op
from graphs.signature import DimSignature, bind_signature

FLOPS_PER_ELEMENT = 5


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    norm_dim(int(attrs.get("dim", -1)), len(ins[0].shape), "softmax")
    return (ins[0],)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = dim_names(len(ins[0].shape))
    dim = norm_dim(int(attrs.get("dim", -1)), len(names), "softmax")
    return bind_signature(signature_text([names], [names]), [ins[0].shape], [outs[0].shape],
                          blocked=[names[dim]])


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def _softmax(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (np.exp(log_softmax(arrays[0], int(attrs.get("dim", -1)))),)


def _log_softmax(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (log_softmax(arrays[0], int(attrs.get("dim", -1))),)


for _kind, _fn in (("softmax", _softmax), ("log_softmax", _log_softmax)):
    register_op(OpDef(kind=_kind, infer=_infer, signature=_signature, reference=_fn,
                      flops=numel_flops(FLOPS_PER_ELEMENT), num_inputs=1,
                      vjp=vjps.softmax_vjp(f"{_kind}_bwd"),
                      optional_attrs={"dim": -1}, doc=f"{_kind} over attr dim (blocked)."))
