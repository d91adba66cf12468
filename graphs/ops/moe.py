"""Mixture-of-experts op kinds: routing, token dispatch and combine, and their gradients.

A routed MoE layer (Shazeer et al. 2017; GShard, Lepikhin et al. 2020; Switch, Fedus et al.
2021) in the IR, with the routing arithmetic of :mod:`graphs.ops.moe_routing`:

* ``moe_topk`` (scores [..., E]) {k, normalize=False, scale=1.0} → (gates [..., k] float,
  experts [..., k] int64). The score function (softmax, sigmoid) is the ordinary kind before it.
* ``moe_dispatch`` (x [g, t, h], experts [g, t, k], weights [g, t, k]?) {experts=E,
  capacity=c} → buffer [g, E, c, h]: every kept routed copy in its expert's slot (times its
  weight when a third input is given; the backward of a weighted combine is one).
* ``moe_combine`` (y [g, E, c, h], experts [g, t, k], weights [g, t, k]?) → [g, t, h]: per
  token the (weighted) sum of its copies' rows; the backward of a dispatch is an unweighted one.
* ``moe_gate_grad`` (y [g, E, c, h], experts [g, t, k], d [g, t, h]) → [g, t, k]: the
  gradient of a weighted combine (or dispatch) with respect to its weights.
* ``moe_topk_bwd`` (scores, experts, dgates) {normalize, scale} → dscores.
* ``expert_counts`` (experts [...]) {experts=E, dtype} → [E]: routed copies per expert (the
  load-balancing loss's f_i·T; no gradient).

The experts' MLP is ordinary ``einsum`` with an expert dim (``gech,ehf->gecf``), so sharding the
expert factor E of its weights and of the buffer is an ordinary strategy; moving the buffer
from group-sharded (dispatch, where tokens live) to expert-sharded (the expert matmuls) on one
mesh axis is an all-to-all reshard. That is expert parallelism, found by the search.

Signatures: routing needs every token of a group and every expert, so t, k, E and c are
BLOCKED; the group g and the hidden h are PARALLEL (sharding g is data parallelism within the
layer, sharding h tensor parallelism of the buffer); ``expert_counts`` and ``moe_gate_grad``
contract what they sum (Partial outputs). Dispatch, combine and the gate gradient are linear in
their float inputs (partial_inputs).

FLOPs: a weighted dispatch or combine multiplies (and combine adds) per routed element:
g·t·k·h (+ g·t·k·h adds for combine); an unweighted dispatch moves data only (0 FLOPs, its
bytes are the operands); gate_grad 2·g·t·k·h; top-k k·E comparisons per token (an estimate);
its backward and the counts one per element.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from graphs.errors import AttrError, ShapeError
from graphs.ir import DType, Op
from graphs.ops import moe_routing as routing
from graphs.ops._common import dim_names, need_inputs, need_int, need_rank, signature_text
from graphs.ops._vjp import GradBuilder, Grads, aligned
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature

ROUTING_BLOCKED = ("t", "k", "e", "c")


def _need_weights(ins: Specs, kind: str, dtype: DType) -> None:
    if len(ins) == 3 and (ins[2].shape != ins[1].shape or ins[2].dtype is not dtype):
        msg = (f"{kind}: weights {list(ins[2].shape)} {ins[2].dtype.value} must be shaped like "
               f"the experts {list(ins[1].shape)} in the data's dtype {dtype.value}")
        raise ShapeError(msg)


def _need_routing(kind: str, experts: TensorSpec, groups: int, num_experts: int) -> None:
    need_rank(experts, 3, kind, "experts [g, t, k]")
    need_int(experts, kind, "experts")
    if experts.shape[0] != groups:
        raise ShapeError(f"{kind}: experts {list(experts.shape)} and the data disagree on the "
                         f"group count {groups}")
    if experts.shape[2] > num_experts:
        raise ShapeError(f"{kind}: each token picks {experts.shape[2]} distinct experts but "
                         f"there are only {num_experts}; top-k must not exceed the experts")


# ---- moe_topk ---------------------------------------------------------------------------------
def _infer_topk(ins: Specs, attrs: Attrs) -> Specs:
    (scores,) = ins
    k, num_experts = int(attrs["k"]), scores.shape[-1] if scores.shape else 0
    if not scores.dtype.is_float or not scores.shape:
        raise ShapeError(f"moe_topk: scores must be a floating tensor [..., experts], got "
                         f"{list(scores.shape)} {scores.dtype.value}")
    if not 1 <= k <= num_experts:
        raise AttrError(f"moe_topk: top-k {k} is not between 1 and the {num_experts} experts of "
                        f"the scores; choose k ≤ {num_experts}")
    shape = (*scores.shape[:-1], k)
    return TensorSpec(shape, scores.dtype), TensorSpec(shape, DType.INT64)


def _signature_topk(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    lead = dim_names(len(ins[0].shape) - 1)
    text = signature_text([[*lead, "e"]], [[*lead, "k"], [*lead, "k"]])
    return bind_signature(text, [ins[0].shape], [o.shape for o in outs], blocked=["e", "k"])


def _topk(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    gates, experts = routing.top_k(arrays[0], int(attrs["k"]), bool(attrs.get("normalize")),
                                   float(attrs.get("scale", 1.0)))
    return gates.astype(arrays[0].dtype), experts


def _topk_flops(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return float(ins[0].numel * int(attrs["k"]))


def topk_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: frozenset[int]) -> Grads:
    """Only the gates carry a gradient (the expert indices are integers)."""
    attrs = grads.attrs(op)
    if dys[0] is None:
        return aligned(op, needed, {})
    dscores = grads.emit("moe_topk_bwd", [grads.value(op.inputs[0]), grads.value(op.outputs[1]),
                                          dys[0]],
                         normalize=bool(attrs["normalize"]), scale=float(attrs["scale"]))
    return aligned(op, needed, {0: dscores})


# ---- moe_topk_bwd -----------------------------------------------------------------------------
def _infer_topk_bwd(ins: Specs, attrs: Attrs) -> Specs:
    scores, experts, dgates = ins
    need_int(experts, "moe_topk_bwd", "experts")
    if experts.shape != dgates.shape or scores.shape[:-1] != experts.shape[:-1]:
        raise ShapeError(f"moe_topk_bwd: scores {list(scores.shape)}, experts "
                         f"{list(experts.shape)} and dgates {list(dgates.shape)} do not fit "
                         "[..., E], [..., k], [..., k]")
    return (TensorSpec(scores.shape, scores.dtype),)


def _signature_topk_bwd(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    lead = dim_names(len(ins[0].shape) - 1)
    text = signature_text([[*lead, "e"], [*lead, "k"], [*lead, "k"]], [[*lead, "e"]])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=["e", "k"])


def _topk_bwd(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    scores, experts, dgates = arrays
    grad = routing.top_k_grad(scores, experts, dgates, bool(attrs.get("normalize")),
                              float(attrs.get("scale", 1.0)))
    return (grad.astype(scores.dtype),)


# ---- moe_dispatch -----------------------------------------------------------------------------
def _infer_dispatch(ins: Specs, attrs: Attrs) -> Specs:
    need_inputs(ins, (2, 3), "moe_dispatch")
    x, experts = ins[0], ins[1]
    need_rank(x, 3, "moe_dispatch", "x [g, t, h]")
    num_experts, capacity = int(attrs["experts"]), int(attrs["capacity"])
    if num_experts < 1 or capacity < 1:
        raise AttrError(f"moe_dispatch: experts {num_experts} and capacity {capacity} must be "
                        "positive")
    _need_routing("moe_dispatch", experts, x.shape[0], num_experts)
    if experts.shape[1] != x.shape[1]:
        raise ShapeError(f"moe_dispatch: x {list(x.shape)} and experts {list(experts.shape)} "
                         "disagree on the tokens per group")
    _need_weights(ins, "moe_dispatch", x.dtype)
    return (TensorSpec((x.shape[0], num_experts, capacity, x.shape[2]), x.dtype),)


def _signature_dispatch(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    routes = [["g", "t", "k"]] * (len(ins) - 1)
    text = signature_text([["g", "t", "h"], *routes], [["g", "e", "c", "h"]])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=ROUTING_BLOCKED)


def _dispatch(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    weights = arrays[2] if len(arrays) == 3 else None
    return (routing.dispatch(arrays[0], arrays[1], weights, int(attrs["experts"]),
                             int(attrs["capacity"])),)


def _routed_flops(per_element: int, weighted_only: bool):
    def flops(ins: Specs, outs: Specs, attrs: Attrs) -> float:
        if weighted_only and len(ins) < 3:
            return 0.0
        hidden = ins[0].shape[-1] if ins[0].shape[-1] else 0
        return float(per_element * math.prod(ins[1].shape) * hidden)
    return flops


def dispatch_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: frozenset[int]) -> Grads:
    """dx: the unweighted (or equally weighted) combine of d buffer; dweights: gate_grad."""
    (dbuf,) = dys
    experts = grads.value(op.inputs[1])
    weights = [grads.value(op.inputs[2])] if len(op.inputs) == 3 else []
    out: dict[int, str | None] = {}
    if 0 in needed:
        out[0] = grads.emit("moe_combine", [dbuf, experts, *weights])
    if 2 in needed:
        out[2] = grads.emit("moe_gate_grad", [dbuf, experts, grads.value(op.inputs[0])])
    return aligned(op, needed, out)


# ---- moe_combine ------------------------------------------------------------------------------
def _infer_combine(ins: Specs, attrs: Attrs) -> Specs:
    need_inputs(ins, (2, 3), "moe_combine")
    y, experts = ins[0], ins[1]
    need_rank(y, 4, "moe_combine", "y [g, E, c, h]")
    _need_routing("moe_combine", experts, y.shape[0], y.shape[1])
    _need_weights(ins, "moe_combine", y.dtype)
    return (TensorSpec((y.shape[0], experts.shape[1], y.shape[3]), y.dtype),)


def _signature_combine(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    routes = [["g", "t", "k"]] * (len(ins) - 1)
    text = signature_text([["g", "e", "c", "h"], *routes], [["g", "t", "h"]])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=ROUTING_BLOCKED)


def _combine(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    weights = arrays[2] if len(arrays) == 3 else None
    return (routing.combine(arrays[0], arrays[1], weights),)


def combine_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: frozenset[int]) -> Grads:
    """dy: the (equally weighted) dispatch of d out; dweights: gate_grad(y, experts, d out)."""
    (dout,) = dys
    experts = grads.value(op.inputs[1])
    weights = [grads.value(op.inputs[2])] if len(op.inputs) == 3 else []
    y_shape = grads.spec(op.inputs[0]).shape
    out: dict[int, str | None] = {}
    if 0 in needed:
        out[0] = grads.emit("moe_dispatch", [dout, experts, *weights], experts=y_shape[1],
                            capacity=y_shape[2])
    if 2 in needed:
        out[2] = grads.emit("moe_gate_grad", [grads.value(op.inputs[0]), experts, dout])
    return aligned(op, needed, out)


# ---- moe_gate_grad ----------------------------------------------------------------------------
def _infer_gate_grad(ins: Specs, attrs: Attrs) -> Specs:
    y, experts, d = ins
    need_rank(y, 4, "moe_gate_grad", "y [g, E, c, h]")
    _need_routing("moe_gate_grad", experts, y.shape[0], y.shape[1])
    if d.shape != (*experts.shape[:2], y.shape[3]) or d.dtype is not y.dtype:
        raise ShapeError(f"moe_gate_grad: d {list(d.shape)} must be [g, t, h] = "
                         f"{[*experts.shape[:2], y.shape[3]]} in {y.dtype.value}")
    return (TensorSpec(experts.shape, y.dtype),)


def _signature_gate_grad(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    text = "g e c h, g t k, g t h -> g t k"
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=ROUTING_BLOCKED)


def _gate_grad(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    y, experts, d = arrays
    return (routing.gate_grad(y, experts, d).astype(y.dtype),)


# ---- expert_counts ----------------------------------------------------------------------------
def _infer_counts(ins: Specs, attrs: Attrs) -> Specs:
    (experts,) = ins
    need_int(experts, "expert_counts", "experts")
    num_experts = int(attrs["experts"])
    if num_experts < 1:
        raise AttrError(f"expert_counts: experts {num_experts} must be positive")
    dtype = DType.parse(str(attrs.get("dtype", "f32")))
    return (TensorSpec((num_experts,), dtype),)


def _signature_counts(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = dim_names(len(ins[0].shape))
    return bind_signature(signature_text([names], [["e"]]), [ins[0].shape], [outs[0].shape],
                          blocked=["e"])


def _counts(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    dtype = DType.parse(str(attrs.get("dtype", "f32"))).numpy
    return (routing.expert_counts(arrays[0], int(attrs["experts"])).astype(dtype),)


def _per_input_element(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return float(ins[0].numel)


_LINEAR = (frozenset({0}), frozenset({2}))

register_op(OpDef(kind="moe_topk", infer=_infer_topk, signature=_signature_topk,
                  reference=_topk, flops=_topk_flops, num_inputs=1, num_outputs=2,
                  vjp=topk_vjp, required_attrs={"k": int},
                  optional_attrs={"normalize": False, "scale": 1.0},
                  doc="Top-k routing: (gates, expert indices); see graphs.ops.moe."))
register_op(OpDef(kind="moe_topk_bwd", infer=_infer_topk_bwd, signature=_signature_topk_bwd,
                  reference=_topk_bwd, flops=_per_input_element,
                  partial_inputs=(frozenset({2}),), num_inputs=3,
                  optional_attrs={"normalize": False, "scale": 1.0},
                  doc="Gradient of moe_topk with respect to its scores."))
register_op(OpDef(kind="moe_dispatch", infer=_infer_dispatch, signature=_signature_dispatch,
                  reference=_dispatch, flops=_routed_flops(1, weighted_only=True),
                  partial_inputs=_LINEAR, num_inputs=None, vjp=dispatch_vjp,
                  required_attrs={"experts": int, "capacity": int},
                  doc="Tokens into [g, E, capacity, h] expert buffers (GShard slots)."))
register_op(OpDef(kind="moe_combine", infer=_infer_combine, signature=_signature_combine,
                  reference=_combine, flops=_routed_flops(2, weighted_only=False),
                  partial_inputs=_LINEAR, num_inputs=None, vjp=combine_vjp,
                  doc="Expert buffers back to tokens, weighted by the gates."))
register_op(OpDef(kind="moe_gate_grad", infer=_infer_gate_grad, signature=_signature_gate_grad,
                  reference=_gate_grad, flops=_routed_flops(2, weighted_only=False),
                  partial_inputs=_LINEAR, num_inputs=3,
                  doc="Gradient of a weighted combine/dispatch with respect to the weights."))
register_op(OpDef(kind="expert_counts", infer=_infer_counts, signature=_signature_counts,
                  reference=_counts, flops=_per_input_element, num_inputs=1,
                  required_attrs={"experts": int}, optional_attrs={"dtype": "f32"},
                  doc="Routed copies per expert (no gradient)."))
