"""``layer_norm`` (x, weight[, bias]) {eps = 1e-5} and ``rms_norm`` (x, weight) {eps = 1e-6},
both over the last dim, which is BLOCKED (the statistics need the whole row); the weight's
and bias's only dim is that same factor. FLOPs: 8 (layer_norm) and 5 (rms_norm) per element,
documented estimates (mean, centre, square, sum, rsqrt, scale, shift)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import ShapeError
from graphs.ops import vjps
from graphs.ops._common import dim_names, need_inputs, numel_flops, same_dtype, signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, register_op
from graphs.signature import DimSignature, bind_signature


def _infer(kind: str, counts: tuple[int, ...]):
    def infer(ins: Specs, attrs: Attrs) -> Specs:
        need_inputs(ins, counts, kind)
        x = ins[0]
        if not x.shape:
            raise ShapeError(f"{kind}: input must have at least one dim")
        for spec in ins[1:]:
            if spec.shape != (x.shape[-1],):
                msg = (f"{kind}: weight/bias shape {list(spec.shape)} must be "
                       f"[{x.shape[-1]}] (the last dim of {list(x.shape)})")
                raise ShapeError(msg)
        same_dtype(ins, kind)
        return (x,)

    return infer


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = [*dim_names(len(ins[0].shape) - 1), "h"]
    text = signature_text([names] + [["h"]] * (len(ins) - 1), [names])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=["h"])


def _layer_norm(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = arrays[0]
    centred = x - x.mean(axis=-1, keepdims=True)
    variance = (centred**2).mean(axis=-1, keepdims=True)
    out = centred / np.sqrt(variance + float(attrs.get("eps", 1e-5))) * arrays[1]
    return (out + arrays[2] if len(arrays) == 3 else out,)


def _rms_norm(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = arrays[0]
    mean_square = (x**2).mean(axis=-1, keepdims=True)
    return (x / np.sqrt(mean_square + float(attrs.get("eps", 1e-6))) * arrays[1],)


register_op(OpDef(kind="layer_norm", infer=_infer("layer_norm", (2, 3)), signature=_signature,
                  reference=_layer_norm, flops=numel_flops(8), num_inputs=None,
                  optional_attrs={"eps": 1e-5}, vjp=vjps.norm_vjp("layer_norm"),
                  doc="LayerNorm over the last dim."))
register_op(OpDef(kind="rms_norm", infer=_infer("rms_norm", (2,)), signature=_signature,
                  reference=_rms_norm, flops=numel_flops(5), num_inputs=2,
                  optional_attrs={"eps": 1e-6}, vjp=vjps.norm_vjp("rms_norm"),
                  doc="RMSNorm over the last dim."))
