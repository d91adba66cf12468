"""``swiglu`` (x [..., 2·f]) → [..., f]: silu(gate) · up with gate and up interleaved in the
last dim (x[..., 2i] is gate i, x[..., 2i + 1] up i), and its backward.

Why a kind of its own: a gated MLP whose gate and up projections are one matmul producing both
(Megatron-Core's ``fc1`` with ``gated_linear_unit``, its grouped expert GEMMs; Hugging Face's
packed ``gate_up_proj`` of recent Mixtral/Qwen-MoE experts) feeds this op, so the tokens entering
the experts are read by one matmul instead of two. The halves are interleaved, the dim is the
merged ``(f two)`` with f major, so sharding the width f (tensor parallelism) keeps every
device's gate and up units together in one contiguous block; a permutation of the packed
weight's columns, so it changes no cost (Megatron-Core splits its fc1 per tensor-parallel rank
for the same reason).

Signature ``"... (f two) -> ... f"`` with ``two`` (size 2) BLOCKED, every other dim parallel.
``swiglu_bwd`` (x [..., 2·f], dy [..., f]) → dx [..., 2·f] with d gate = dy·up·silu'(gate)
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
    if not x.shape or x.shape[-1] % 2 or not x.dtype.is_float:
        raise ShapeError(f"{kind}: x must be a float tensor [..., 2·f] (gate and up "
                         f"interleaved), got {list(x.shape)} {x.dtype.value}")


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    (x,) = ins
    _need_pair(x, "swiglu")
    return (TensorSpec((*x.shape[:-1], x.shape[-1] // 2), x.dtype),)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    lead = dim_names(len(ins[0].shape) - 1)
    text = signature_text([[*lead, ("f", "two")]], [[*lead, "f"]])
    return bind_signature(text, [ins[0].shape], [outs[0].shape], blocked=["two"],
                          sizes={"two": 2})


def _halves(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pairs = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2)
    return pairs[..., 0], pairs[..., 1]


def _reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = arrays[0]
    gate, up = _halves(x)
    return ((gate * _sigmoid(gate) * up).astype(x.dtype),)


def swiglu_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: frozenset[int]) -> Grads:
    return aligned(op, needed, {0: grads.emit("swiglu_bwd", [grads.value(op.inputs[0]),
                                                               dys[0]])})


def _infer_bwd(ins: Specs, attrs: Attrs) -> Specs:
    x, dy = ins
    _need_pair(x, "swiglu_bwd")
    if dy.shape != (*x.shape[:-1], x.shape[-1] // 2) or dy.dtype is not x.dtype:
        raise ShapeError(f"swiglu_bwd: dy {list(dy.shape)} must be x {list(x.shape)} with its "
                         "last dim halved, in the same dtype")
    return (x,)


def _signature_bwd(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    lead = dim_names(len(ins[0].shape) - 1)
    text = signature_text([[*lead, ("f", "two")], [*lead, "f"]], [[*lead, ("f", "two")]])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=["two"],
                          sizes={"two": 2})


def _reference_bwd(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x, dy = arrays
    gate, up = _halves(x)
    sig = _sigmoid(gate)
    dgate = dy * up * sig * (1.0 + gate * (1.0 - sig))
    dup = dy * gate * sig
    return (np.stack([dgate, dup], axis=-1).reshape(x.shape).astype(x.dtype),)


register_op(OpDef(kind="swiglu", infer=_infer, signature=_signature, reference=_reference,
                  flops=numel_flops(5), num_inputs=1, vjp=swiglu_vjp,
                  doc="silu(gate) * up of interleaved halves [..., 2·f]."))
register_op(OpDef(kind="swiglu_bwd", infer=_infer_bwd, signature=_signature_bwd,
                  reference=_reference_bwd, flops=numel_flops(8),
                  partial_inputs=(frozenset({1}),), num_inputs=2,
                  doc="Gradient of swiglu with respect to its packed halves."))
