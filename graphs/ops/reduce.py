"""Reductions ``sum``, ``mean``, ``max`` {dims: list[int], keepdim: bool = False}.

Reduced dims are CONTRACTED factors with reduction "sum", "avg" and "max": a mean of local
means over equal shards is the global mean, a max of local maxima the global max. ``keepdim``
turns each reduced dim into a factor-less size-1 dim ("1"). FLOPs: one per input element.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import AttrError
from graphs.ops import vjps
from graphs.ops._common import DimText, dim_names, norm_dim, signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature

_REDUCTION = {"sum": "sum", "mean": "avg", "max": "max"}
_NUMPY = {"sum": np.sum, "mean": np.mean, "max": np.max}


def reduced_dims(kind: str, attrs: Attrs, rank: int) -> tuple[int, ...]:
    dims = tuple(sorted(norm_dim(int(d), rank, kind, "dims") for d in attrs["dims"]))
    if len(set(dims)) != len(dims):
        raise AttrError(f'{kind}: attr "dims" {list(attrs["dims"])} repeats a dim')
    return dims


def _infer(kind: str):
    def infer(ins: Specs, attrs: Attrs) -> Specs:
        shape = ins[0].shape
        dims = reduced_dims(kind, attrs, len(shape))
        keep = bool(attrs.get("keepdim", False))
        out = tuple(1 if i in dims else s for i, s in enumerate(shape) if keep or i not in dims)
        return (TensorSpec(out, ins[0].dtype),)

    return infer


def _signature(kind: str):
    def signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
        names = dim_names(len(ins[0].shape))
        dims = reduced_dims(kind, attrs, len(names))
        keep = bool(attrs.get("keepdim", False))
        out: list[DimText] = [("1" if i in dims else n) for i, n in enumerate(names)
                              if keep or i not in dims]
        reductions = {names[d]: _REDUCTION[kind] for d in dims}
        return bind_signature(signature_text([names], [out]), [ins[0].shape],
                              [outs[0].shape], reductions=reductions)

    return signature


def _reference(kind: str):
    def reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        x = arrays[0]
        dims = tuple(int(d) % x.ndim for d in attrs["dims"]) if x.ndim else ()
        keep = bool(attrs.get("keepdim", False))
        return (np.asarray(_NUMPY[kind](x, axis=dims, keepdims=keep)),)

    return reference


def _flops(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return float(ins[0].numel)


_VJPS = {"sum": vjps.sum_vjp, "mean": vjps.mean_vjp, "max": vjps.max_vjp}

for _kind, _partial in (("sum", (frozenset({0}),)), ("mean", (frozenset({0}),)), ("max", ())):
    register_op(OpDef(kind=_kind, infer=_infer(_kind), signature=_signature(_kind),
                      reference=_reference(_kind), flops=_flops, partial_inputs=_partial,
                      vjp=_VJPS[_kind],
                      num_inputs=1, required_attrs={"dims": list},
                      optional_attrs={"keepdim": False},
                      doc=f"{_kind} over attr dims; reduced factors contracted "
                          f'("{_REDUCTION[_kind]}")."'))
