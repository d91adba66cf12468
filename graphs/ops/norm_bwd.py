"""Backward kinds of the norms, split so that each output has the right signature.

* ``layer_norm_bwd_x(x, w, dy) {eps}`` and ``rms_norm_bwd_x(x, w, dy) {eps}`` → dx: the
  normalized (last) dim h BLOCKED (the statistics need the whole row), every other factor
  PARALLEL; linear in dy. The bias never enters dx.
* ``layer_norm_bwd_w(x, dy) {eps}`` and ``rms_norm_bwd_w(x, dy) {eps}`` → dw [h] = Σ dy·x̂ over
  every leading position: h BLOCKED, the leading factors CONTRACTED (sum), so under data or
  sequence parallelism the weight gradient comes out Partial(sum), like an einsum's. (The
  bias gradient is a plain ``sum`` of dy.) Linear in dy.

With x̂ = (x − μ)/σ (layer norm) or x·r, r = 1/√(mean x² + eps) (rms norm) and g = dy·w:
layer norm dx = (g − mean(g) − x̂·mean(g·x̂))/σ; rms norm dx = r·(g − x̂·mean(g·x̂)).
FLOPs: 10 (dx) and 7 (dw) per element of x, documented estimates like the forward's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import ShapeError
from graphs.ops._common import dim_names, numel_flops, signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature

DEFAULT_EPS = {"layer_norm": 1e-5, "rms_norm": 1e-6}


def normalized(kind: str, x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(x̂, 1/σ) over the last dim for ``kind`` "layer_norm" or "rms_norm"."""
    if kind == "layer_norm":
        centred = x - x.mean(axis=-1, keepdims=True)
        inv = 1.0 / np.sqrt((centred**2).mean(axis=-1, keepdims=True) + eps)
        return centred * inv, inv
    inv = 1.0 / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps)
    return x * inv, inv


def _check(kind: str, x: TensorSpec, dy: TensorSpec, w: TensorSpec | None = None) -> None:
    bad = not x.shape or dy != x or (w is not None and w != TensorSpec(x.shape[-1:], x.dtype))
    if bad:
        got = [list(t.shape) for t in (x, w, dy) if t is not None]
        raise ShapeError(f"{kind}: operands {got} must be x [..., h], (w [h],) dy like x, "
                         "all of one dtype")


def _infer_x(kind: str):
    def infer(ins: Specs, attrs: Attrs) -> Specs:
        x, w, dy = ins
        _check(kind, x, dy, w)
        return (x,)

    return infer


def _infer_w(kind: str):
    def infer(ins: Specs, attrs: Attrs) -> Specs:
        x, dy = ins
        _check(kind, x, dy)
        return (TensorSpec(x.shape[-1:], x.dtype),)

    return infer


def _signature_x(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = [*dim_names(len(ins[0].shape) - 1), "h"]
    text = signature_text([names, ["h"], names], [names])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=["h"])


def _signature_w(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = [*dim_names(len(ins[0].shape) - 1), "h"]
    text = signature_text([names, names], [["h"]])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=["h"])


def _reference_x(kind: str):
    def reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        x, w, dy = arrays
        xhat, inv = normalized(kind, x, float(attrs.get("eps", DEFAULT_EPS[kind])))
        g = dy * w
        proj = (g * xhat).mean(axis=-1, keepdims=True)
        if kind == "layer_norm":
            return ((g - g.mean(axis=-1, keepdims=True) - xhat * proj) * inv,)
        return ((g - xhat * proj) * inv,)

    return reference


def _reference_w(kind: str):
    def reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        x, dy = arrays
        xhat, _ = normalized(kind, x, float(attrs.get("eps", DEFAULT_EPS[kind])))
        prod = dy * xhat
        return (prod.reshape(-1, x.shape[-1]).sum(axis=0),)

    return reference


def _flops_w(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return float(7 * ins[0].numel)


for _norm, _eps in DEFAULT_EPS.items():
    register_op(OpDef(kind=f"{_norm}_bwd_x", infer=_infer_x(f"{_norm}_bwd_x"),
                      signature=_signature_x, reference=_reference_x(_norm),
                      flops=numel_flops(10), partial_inputs=(frozenset({2}),), num_inputs=3,
                      optional_attrs={"eps": _eps}, doc=f"d{_norm}/dx; h blocked."))
    register_op(OpDef(kind=f"{_norm}_bwd_w", infer=_infer_w(f"{_norm}_bwd_w"),
                      signature=_signature_w, reference=_reference_w(_norm), flops=_flops_w,
                      partial_inputs=(frozenset({1}),), num_inputs=2,
                      optional_attrs={"eps": _eps},
                      doc=f"d{_norm}/dweight; leading factors contracted."))
