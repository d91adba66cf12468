"""Backward-only kinds the VJPs emit: activation derivatives, ``pad``, ``broadcast_to``,
``max_bwd``, ``softmax_bwd`` and ``log_softmax_bwd``.

Why separate kinds: each is one fused elementwise or row-wise step with its own dimension
signature, so the planner shards the backward pass exactly like the forward one.

* ``gelu_bwd(x, dy)``, ``gelu_erf_bwd(x, dy)``, ``silu_bwd(x, dy)``, ``relu_bwd(x, dy)`` read
  the forward *input*;
  ``sigmoid_bwd(y, dy)``, ``tanh_bwd(y, dy)`` the forward *output* (what frameworks save).
  Signatures as the forward elementwise kinds (every factor parallel); linear in ``dy``.
  FLOPs: 2 per element (derivative and product; transcendentals not weighted, as forward).
* ``pad(x) {dim, before, after}``: zeros around ``x`` along ``dim`` (the VJP of ``slice``);
  that dim BLOCKED with distinct factors, as ``slice``'s.
* ``broadcast_to(x) {shape, dims}``: repeat ``x`` along output ``dims`` (the VJP of
  ``sum``/``mean``). ``x`` either lacks those dims (rank len(shape) − len(dims)) or has size 1
  there; the repeated dims are output-only PARALLEL factors, so sharding them leaves ``x``
  replicated. Like ``reshape`` it runs on local shards with the local output shape.
* ``max_bwd(x, y, dy) {dims, keepdim}``: ``dy`` routed to the maxima, split evenly among ties
  (``torch.amax``'s rule); reduced dims BLOCKED (ties are counted over the whole row).
* ``softmax_bwd(y, dy) {dim}`` = y·(dy − Σ dy·y), ``log_softmax_bwd(y, dy) {dim}`` =
  dy − exp(y)·Σ dy; the dim BLOCKED; linear in ``dy``. FLOPs: 4 per element.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from graphs.errors import ShapeError
from graphs.ir import Op
from graphs.ops._common import (
    DimText,
    dim_names,
    infer_padded,
    norm_dim,
    numel_flops,
    padded,
    signature_text,
)
from graphs.ops._vjp import GradBuilder, Grads, aligned
from graphs.ops.elementwise import broadcast_shape, broadcast_signature, sigmoid
from graphs.ops.reduce import reduced_dims
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature

GELU_C = np.sqrt(2.0 / np.pi)


def gelu_tanh_grad(x: np.ndarray) -> np.ndarray:
    """d/dx of :func:`gelu_tanh`."""
    inner = GELU_C * (x + 0.044715 * x**3)
    t = np.tanh(inner)
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C * (1.0 + 3 * 0.044715 * x * x)


def gelu_erf_grad(x: np.ndarray) -> np.ndarray:
    """d/dx of x·Φ(x): Φ(x) + x·φ(x), φ the standard normal density."""
    from scipy.special import erf

    return 0.5 * (1.0 + erf(x / np.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)


def _silu_grad(x: np.ndarray) -> np.ndarray:
    s = sigmoid(x)
    return s * (1.0 + x * (1.0 - s))


_DERIVATIVES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "gelu_bwd": gelu_tanh_grad,
    "gelu_erf_bwd": gelu_erf_grad,
    "silu_bwd": _silu_grad,
    "relu_bwd": lambda x: (x > 0).astype(x.dtype),
    "sigmoid_bwd": lambda y: y * (1.0 - y),
    "tanh_bwd": lambda y: 1.0 - y * y,
}


def _infer_pair(kind: str):
    def infer(ins: Specs, attrs: Attrs) -> Specs:
        if ins[0].dtype is not ins[1].dtype:
            msg = f"{kind}: operands must share one dtype, got {ins[0].dtype.value} and " \
                  f"{ins[1].dtype.value}"
            raise ShapeError(msg)
        return (TensorSpec(broadcast_shape([t.shape for t in ins], kind), ins[1].dtype),)

    return infer


def _elementwise_signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    return broadcast_signature(ins, outs)


def _derivative_reference(fn: Callable[[np.ndarray], np.ndarray]):
    def reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
        value, dy = arrays
        return (np.asarray(dy * fn(value)).astype(dy.dtype, copy=False),)

    return reference


for _kind, _fn in _DERIVATIVES.items():
    register_op(OpDef(kind=_kind, infer=_infer_pair(_kind), signature=_elementwise_signature,
                      reference=_derivative_reference(_fn), flops=numel_flops(2),
                      partial_inputs=(frozenset({1}),), num_inputs=2,
                      doc=f"Backward of {_kind[:-4]}: dy times its derivative."))


# ------------------------------------------------------------------------------------ pad
def _signature_pad(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    rank = len(ins[0].shape)
    dim = norm_dim(int(attrs["dim"]), rank, "pad")
    names: list[DimText] = list(dim_names(rank))
    text = signature_text([[*names[:dim], "c", *names[dim + 1:]]],
                          [[*names[:dim], "o", *names[dim + 1:]]])
    return bind_signature(text, [ins[0].shape], [outs[0].shape], blocked=["c", "o"])


def _pad(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (padded(arrays[0], attrs, "pad"),)


register_op(OpDef(kind="pad", infer=infer_padded("pad"), signature=_signature_pad, reference=_pad,
                  flops=numel_flops(0), partial_inputs=(frozenset({0}),), num_inputs=1,
                  required_attrs={"dim": int, "before": int, "after": int},
                  doc="Zero padding along attr dim (the VJP of slice)."))


# --------------------------------------------------------------------------- broadcast_to
def _broadcast_dims(ins: Specs, attrs: Attrs) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """(output shape, sorted broadcast dims, keepdim form) after checking ``x`` fits."""
    shape = tuple(int(d) for d in attrs["shape"])
    dims = tuple(sorted(norm_dim(int(d), len(shape), "broadcast_to", "dims")
                        for d in attrs["dims"]))
    x = ins[0].shape
    keep = len(x) == len(shape) and len(dims) > 0
    want = tuple((1 if i in dims else size) for i, size in enumerate(shape)
                 if keep or i not in dims)
    if len(set(dims)) != len(dims) or x != want:
        msg = (f"broadcast_to: input {list(x)} does not become {list(shape)} by repeating "
               f"dims {list(dims)}")
        raise ShapeError(msg)
    return shape, dims, keep


def _infer_broadcast(ins: Specs, attrs: Attrs) -> Specs:
    return (TensorSpec(_broadcast_dims(ins, attrs)[0], ins[0].dtype),)


def _signature_broadcast(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    shape, dims, keep = _broadcast_dims(ins, attrs)
    names = dim_names(len(shape))
    operand: list[DimText] = [("1" if i in dims else n) for i, n in enumerate(names)
                              if keep or i not in dims]
    return bind_signature(signature_text([operand], [names]), [ins[0].shape], [outs[0].shape])


def _broadcast(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x, shape = arrays[0], tuple(int(d) for d in attrs["shape"])
    dims = sorted(int(d) % len(shape) for d in attrs["dims"])
    if x.ndim < len(shape):
        x = np.expand_dims(x, tuple(dims))
    return (np.broadcast_to(x, shape).copy(),)


def _local_broadcast(attrs: Attrs, local_ins: Specs, local_outs: Specs) -> Attrs:
    return {**attrs, "shape": list(local_outs[0].shape)}


def broadcast_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: frozenset[int]) -> Grads:
    """dx = dy summed over the repeated dims (kept as size 1 when x has them): imported
    models use ``broadcast_to`` in the forward pass (``expand``), so it is differentiable."""
    attrs = grads.attrs(op)
    _shape, dims, keep = _broadcast_dims((grads.spec(op.inputs[0]),), attrs)
    if not dims:
        return aligned(op, needed, {0: dys[0]})
    return aligned(op, needed, {0: grads.emit("sum", [dys[0]], dims=list(dims), keepdim=keep)})


register_op(OpDef(kind="broadcast_to", infer=_infer_broadcast, signature=_signature_broadcast,
                  reference=_broadcast, flops=numel_flops(0), partial_inputs=(frozenset({0}),),
                  num_inputs=1, required_attrs={"shape": list, "dims": list},
                  local_attrs=_local_broadcast, vjp=broadcast_vjp,
                  doc="Repeat along attr dims up to attr shape (the VJP of sum/mean)."))


# -------------------------------------------------------------------------------- max_bwd
def _infer_max_bwd(ins: Specs, attrs: Attrs) -> Specs:
    x, y, dy = ins
    dims = reduced_dims("max_bwd", attrs, len(x.shape))
    keep = bool(attrs.get("keepdim", False))
    reduced = tuple(1 if i in dims else s for i, s in enumerate(x.shape) if keep or i not in dims)
    if y.shape != reduced or dy.shape != reduced:
        msg = (f"max_bwd: y {list(y.shape)} and dy {list(dy.shape)} must be x {list(x.shape)} "
               f"reduced over {list(dims)}, i.e. {list(reduced)}")
        raise ShapeError(msg)
    return (TensorSpec(x.shape, dy.dtype),)


def _signature_max_bwd(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = dim_names(len(ins[0].shape))
    dims = reduced_dims("max_bwd", attrs, len(names))
    keep = bool(attrs.get("keepdim", False))
    reduced: list[DimText] = [("1" if i in dims else n) for i, n in enumerate(names)
                              if keep or i not in dims]
    text = signature_text([names, reduced, reduced], [names])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape],
                          blocked=[names[d] for d in dims])


def _max_bwd(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x, y, dy = arrays
    dims = tuple(sorted(int(d) % x.ndim for d in attrs["dims"])) if x.ndim else ()
    if not bool(attrs.get("keepdim", False)):
        y, dy = np.expand_dims(y, dims), np.expand_dims(dy, dims)
    mask = (x == y).astype(dy.dtype)
    ties = np.maximum(mask.sum(axis=dims, keepdims=True), 1)   # a y that is no max: all zero
    return ((dy * mask / ties).astype(dy.dtype, copy=False),)


register_op(OpDef(kind="max_bwd", infer=_infer_max_bwd, signature=_signature_max_bwd,
                  reference=_max_bwd, flops=numel_flops(3), partial_inputs=(frozenset({2}),),
                  num_inputs=3, required_attrs={"dims": list}, optional_attrs={"keepdim": False},
                  doc="Backward of max: dy to the maxima, ties sharing evenly."))


# ---------------------------------------------------------------------------- softmax_bwd
def _infer_softmax_bwd(ins: Specs, attrs: Attrs) -> Specs:
    y, dy = ins
    norm_dim(int(attrs.get("dim", -1)), len(y.shape), "softmax_bwd")
    if y != dy:
        raise ShapeError(f"softmax_bwd: y {list(y.shape)} and dy {list(dy.shape)} must match")
    return (dy,)


def _signature_softmax_bwd(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = dim_names(len(ins[0].shape))
    dim = norm_dim(int(attrs.get("dim", -1)), len(names), "softmax_bwd")
    return bind_signature(signature_text([names, names], [names]), [t.shape for t in ins],
                          [outs[0].shape], blocked=[names[dim]])


def _softmax_bwd(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    y, dy = arrays
    dim = int(attrs.get("dim", -1))
    return (y * (dy - np.sum(dy * y, axis=dim, keepdims=True)),)


def _log_softmax_bwd(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    y, dy = arrays
    dim = int(attrs.get("dim", -1))
    return (dy - np.exp(y) * np.sum(dy, axis=dim, keepdims=True),)


for _kind, _ref in (("softmax_bwd", _softmax_bwd), ("log_softmax_bwd", _log_softmax_bwd)):
    register_op(OpDef(kind=_kind, infer=_infer_softmax_bwd, signature=_signature_softmax_bwd,
                      reference=_ref, flops=numel_flops(4), partial_inputs=(frozenset({1}),),
                      num_inputs=2, optional_attrs={"dim": -1},
                      doc=f"Backward of {_kind[:-4]} from its output y; dim blocked."))
