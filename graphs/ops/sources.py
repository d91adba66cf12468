"""Source kinds ``input``, ``param`` and ``state``: they produce graph inputs, parameters and
optimizer state (master weights, moments), so that every tensor in a graph has exactly one
producer. They compute nothing; their values are given."""

from __future__ import annotations

from graphs.errors import AttrError
from graphs.ir import DType
from graphs.ops._common import dim_names, no_reference, signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    try:
        dtype = DType.parse(str(attrs["dtype"]))
    except ValueError as error:
        raise AttrError(f"source op: {error}") from None
    shape = tuple(int(d) for d in attrs["shape"])
    if any(d < 0 for d in shape):
        raise AttrError(f"source op: negative dim in shape {list(shape)}")
    return (TensorSpec(shape, dtype),)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    shape = outs[0].shape
    return bind_signature(signature_text([], [dim_names(len(shape))]), [], [shape])


def _zero(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return 0.0


for _kind in ("input", "param", "state"):
    register_op(OpDef(kind=_kind, infer=_infer, signature=_signature, reference=no_reference,
                      flops=_zero, bytes_moved=_zero, num_inputs=0,
                      required_attrs={"shape": list, "dtype": str},
                      doc=f"Source of a graph {_kind}; one parallel factor per dim."))
