"""Elementwise kinds with NumPy broadcasting (right-aligned, size-1 dims stretch).

Signature: the output has one factor per dim (``d0`` …); an input dim that is broadcast
(size 1 against a larger output dim) is the factor-less ``"1"`` dim, and missing leading dims
are simply absent, e.g. ``add`` of [4, 1, 8] and [3, 8] is ``"d0 1 d2, d1 d2 -> d0 d1 d2"``.
Every factor is PARALLEL, so any sharding of matching dims is correct on local shards.

``gelu`` is the tanh approximation (GPT-2/Megatron, PyTorch ``approximate="tanh"``);
``gelu_erf`` is the exact GELU, x·Φ(x) with the normal CDF Φ (PyTorch's default
``approximate="none"``, Hugging Face's ``"gelu"``; Hendrycks & Gimpel 2016, eq. 1).
FLOPs: one per output element for every kind (transcendentals are not weighted more);
``cast`` counts one per element too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from graphs.errors import AttrError, ShapeError
from graphs.ir import DType
from graphs.ops import vjps
from graphs.ops._common import DimText, dim_names, numel_flops, same_dtype, signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature

Fn = Callable[..., np.ndarray]


def broadcast_shape(shapes: Sequence[tuple[int, ...]], kind: str) -> tuple[int, ...]:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"{kind}: shapes {[list(s) for s in shapes]} do not broadcast") from None


def broadcast_signature(ins: Specs, outs: Specs) -> DimSignature:
    out_shape = outs[0].shape
    names = dim_names(len(out_shape))
    operands = []
    for spec in ins:
        offset = len(out_shape) - len(spec.shape)
        dims: list[DimText] = []
        for k, size in enumerate(spec.shape):
            full = out_shape[offset + k]
            dims.append("1" if size == 1 and full != 1 else names[offset + k])
        operands.append(dims)
    text = signature_text(operands, [names])
    return bind_signature(text, [t.shape for t in ins], [out_shape])


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    return broadcast_signature(ins, outs)


def _infer_same(kind: str) -> Callable[[Specs, Attrs], Specs]:
    def infer(ins: Specs, attrs: Attrs) -> Specs:
        shape = broadcast_shape([t.shape for t in ins], kind)
        return (TensorSpec(shape, same_dtype(ins, kind)),)

    return infer


def _reference(fn: Fn) -> Callable[[Sequence[np.ndarray], Attrs], tuple[np.ndarray, ...]]:
    def reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        return (np.asarray(fn(*arrays)),)

    return reference


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))."""
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def gelu_erf(x: np.ndarray) -> np.ndarray:
    """GELU, exact: x·Φ(x) = 0.5·x·(1 + erf(x/√2))."""
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


_BINARY: dict[str, tuple[Fn, tuple[frozenset[int], ...]]] = {
    "add": (np.add, (frozenset({0, 1}),)),
    "sub": (np.subtract, (frozenset({0, 1}),)),
    "mul": (np.multiply, (frozenset({0}), frozenset({1}))),
    "div": (np.divide, (frozenset({0}),)),
}
_UNARY: dict[str, tuple[Fn, tuple[frozenset[int], ...]]] = {
    "neg": (np.negative, (frozenset({0}),)),
    "exp": (np.exp, ()),
    "log": (np.log, ()),
    "tanh": (np.tanh, ()),
    "gelu": (gelu_tanh, ()),
    "gelu_erf": (gelu_erf, ()),
    "silu": (lambda x: x * sigmoid(x), ()),
    "relu": (lambda x: np.maximum(x, 0), ()),
    "sigmoid": (sigmoid, ()),
}

_VJPS = {
    "add": vjps.add_vjp, "sub": vjps.sub_vjp, "mul": vjps.mul_vjp, "div": vjps.div_vjp,
    "neg": vjps.neg_vjp, "exp": vjps.exp_vjp, "log": vjps.log_vjp,
    "tanh": vjps.derivative_vjp("tanh_bwd", reads_output=True),
    "gelu": vjps.derivative_vjp("gelu_bwd", reads_output=False),
    "gelu_erf": vjps.derivative_vjp("gelu_erf_bwd", reads_output=False),
    "silu": vjps.derivative_vjp("silu_bwd", reads_output=False),
    "relu": vjps.derivative_vjp("relu_bwd", reads_output=False),
    "sigmoid": vjps.derivative_vjp("sigmoid_bwd", reads_output=True),
}

for _kind, (_fn, _partial) in {**_BINARY, **_UNARY}.items():
    register_op(OpDef(kind=_kind, infer=_infer_same(_kind), signature=_signature,
                      reference=_reference(_fn), flops=numel_flops(1), vjp=_VJPS[_kind],
                      partial_inputs=_partial, num_inputs=2 if _kind in _BINARY else 1,
                      doc=f"Elementwise {_kind} with NumPy broadcasting."))


def _infer_cast(ins: Specs, attrs: Attrs) -> Specs:
    try:
        dtype = DType.parse(str(attrs["dtype"]))
    except ValueError as error:
        raise AttrError(f"cast: {error}") from None
    return (TensorSpec(ins[0].shape, dtype),)


def _cast(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (arrays[0].astype(DType.parse(str(attrs["dtype"])).numpy),)


def _scale(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = arrays[0]
    return ((x * float(attrs["factor"])).astype(x.dtype, copy=False),)


def _infer_where(ins: Specs, attrs: Attrs) -> Specs:
    if ins[0].dtype is not DType.BOOL:
        raise ShapeError(f"where: the condition must be bool, got {ins[0].dtype.value}")
    shape = broadcast_shape([t.shape for t in ins], "where")
    return (TensorSpec(shape, same_dtype(ins[1:], "where")),)


def _where(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (np.where(*arrays),)


register_op(OpDef(kind="cast", infer=_infer_cast, signature=_signature, reference=_cast,
                  flops=numel_flops(1), partial_inputs=(frozenset({0}),), num_inputs=1,
                  required_attrs={"dtype": str}, vjp=vjps.cast_vjp,
                  doc="Convert to attr dtype."))
register_op(OpDef(kind="scale", infer=_infer_same("scale"), signature=_signature,
                  reference=_scale, flops=numel_flops(1), partial_inputs=(frozenset({0}),),
                  num_inputs=1, required_attrs={"factor": float}, vjp=vjps.scale_vjp,
                  doc="Multiply by the constant attr factor."))
register_op(OpDef(kind="where", infer=_infer_where, signature=_signature, reference=_where,
                  flops=numel_flops(1), partial_inputs=(frozenset({1, 2}),), num_inputs=3,
                  vjp=vjps.where_vjp,
                  doc="where(cond, a, b) with broadcasting; cond is bool."))
