"""``swiglu`` (x [..., 2, f]) → [..., f]: silu(x[..., 0, :]) · x[..., 1, :], and its backward.

Why a kind of its own: a gated MLP whose gate and up projections are one matmul producing both
halves (Megatron-Core's ``fc1`` with ``gated_linear_unit``, its grouped expert GEMMs; Hugging
Face's packed ``gate_up_proj`` of recent Mixtral/Qwen-MoE experts) feeds this op, so the
tokens entering the experts are read by one matmul instead of two. The halves sit in a size-2
dim (``two``) so that sharding the width f (tensor parallelism) keeps each device's gate and up
halves together.

Signature ``"... two f -> ... f"`` with ``two`` BLOCKED, every other dim parallel.
``swiglu_bwd`` (x [..., 2, f], dy [..., f]) → dx [..., 2, f] with d gate = dy·up·silu'(gate)
and d up = dy·silu(gate) (silu' = σ(g)(1 + g(1 − σ(g)))), linear in dy. FLOPs: 5 per output
element forward (sigmoid, two multiplies), 8 backward (documented estimates).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import ShapeError
from graphs.ir import Op
from graphs.ops._common import dim_names, numel_flops, signature_text
from graphs.ops._vjp import GradBuilder, Grads, aligned
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _need_pair(x: TensorSpec, kind: str) -> None:
    if len(x.shape) < 2 or x.shape[-2] != 2 or not x.dtype.is_float:
        raise ShapeError(f"{kind}: x must be a float tensor [..., 2, f] (gate and up halves), "
                         f"got {list(x.shape)} {x.dtype.value}")


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    (x,) = ins
    _need_pair(x, "swiglu")
    return (TensorSpec((*x.shape[:-2], x.shape[-1]), x.dtype),)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    lead = dim_names(len(ins[0].shape) - 2)
    text = signature_text([[*lead, "two", "f"]], [[*lead, "f"]])
    return bind_signature(text, [ins[0].shape], [outs[0].shape], blocked=["two"])


def _reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = arrays[0]
    gate, up = x[..., 0, :], x[..., 1, :]
    return ((gate * _sigmoid(gate) * up).astype(x.dtype),)


def swiglu_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: frozenset[int]) -> Grads:
    return aligned(op, needed, {0: grads.emit("swiglu_bwd", [grads.value(op.inputs[0]),
                                                               dys[0]])})


def _infer_bwd(ins: Specs, attrs: Attrs) -> Specs:
    x, dy = ins
    _need_pair(x, "swiglu_bwd")
    if dy.shape != (*x.shape[:-2], x.shape[-1]) or dy.dtype is not x.dtype:
        raise ShapeError(f"swiglu_bwd: dy {list(dy.shape)} must be x {list(x.shape)} without "
                         "its halves dim, in the same dtype")
    return (x,)


def _signature_bwd(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    lead = dim_names(len(ins[0].shape) - 2)
    text = signature_text([[*lead, "two", "f"], [*lead, "f"]], [[*lead, "two", "f"]])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=["two"])


def _reference_bwd(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x, dy = arrays
    gate, up = x[..., 0, :], x[..., 1, :]
    sig = _sigmoid(gate)
    dgate = dy * up * sig * (1.0 + gate * (1.0 - sig))
    dup = dy * gate * sig
    return (np.stack([dgate, dup], axis=-2).astype(x.dtype),)


register_op(OpDef(kind="swiglu", infer=_infer, signature=_signature, reference=_reference,
                  flops=numel_flops(5), num_inputs=1, vjp=swiglu_vjp,
                  doc="silu(gate) * up of packed halves [..., 2, f]."))
register_op(OpDef(kind="swiglu_bwd", infer=_infer_bwd, signature=_signature_bwd,
                  reference=_reference_bwd, flops=numel_flops(8),
                  partial_inputs=(frozenset({1}),), num_inputs=2,
                  doc="Gradient of swiglu with respect to its packed halves."))
