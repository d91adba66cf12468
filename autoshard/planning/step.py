"""A training step as frameworks run it: micro-batches, and communication hidden behind compute.

The plain objective adds every op's compute and every collective as if nothing ran at the same
time and a step were one batch. Real frameworks do better, and differently for different
traffic: PyTorch DDP buckets gradients and all-reduces them during the backward of the later
layers, FSDP prefetches the next layer's parameters, Megatron's tensor-parallel collectives sit
on the critical path. The step here has:

* ``m`` micro-batches (gradient accumulation): forward and backward compute and activation
  traffic run ``m`` times, the optimizer step once. A gradient reduction that keeps the
  gradient's size (an all-reduce into a replicated gradient) runs once per step, after the last
  micro-batch (the gradient accumulates unreduced, at the size the memory model counts); one
  into a smaller, sharded gradient (a reduce-scatter) runs every micro-batch, because the
  accumulator is the sharded gradient. Parameter gathers run every micro-batch (FSDP gathers
  again for each).
* overlapped traffic (:class:`Traffic`): the collectives frameworks overlap with compute are
  parameter gathers into forward and backward ops (FSDP, ZeRO-3), gradient reductions into
  the optimizer (DDP, ZeRO, FSDP) and, in the layer model, the gathers of updated values for
  the next step (ZeRO-1/2). Everything else is exposed: activations (tensor and sequence
  parallel collectives), intra-op and graph-output reductions, the optimizer step.

How overlapped traffic hides (:class:`Overlap`): ``OP`` (the default) hides each collective
behind the compute of the op it feeds (a gather) or the op that produced it (a gradient
reduction): it costs ``max(0, longest per-axis time − its cover)`` per run, a cost of the two
ops it joins, so the problem keeps its pairwise form, its exact reductions and its tight LP,
and stays provably optimal at the old speed. The cover is that op's compute, split among the
collectives hidden behind the same op (a norm's weight and bias gathers, :func:`edge_roles`)
in proportion to their tensors' bytes, so one op's compute is never counted twice: the
communication hidden behind an op never exceeds its compute (pooling them, ``max(0, Σ −
compute)``, would join three ops and break the pairwise form; the split prices each at least
as high). On a transformer's matmuls this is
close to pooling a whole layer: a weight's gather and its matmul both grow with the weight,
so their ratio is the same for every weight of a layer. ``LAYER`` pools: per layer and phase
one :class:`solver.Window` runs the phase's compute on one stream and each mesh axis's
overlapped collectives on their own (:mod:`.overlap_layer`); more faithful, much slower to
prove (the LP relaxation of a maximum of sums averages over fractional options).
``NONE`` is the plain sum.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass

import numpy as np

from autoshard.planning.edge_costs import Edge
from autoshard.planning.layers import layer_of
from autoshard.planning.node_costs import SOURCE_KINDS
from autoshard.planning.record import ReshardRecord
from autoshard.sharding.tensor_sharding import TensorSharding
from graphs import Op, OpGraph, TensorRole, get_op

REST = -1  # the layer index of ops outside every layer
LOCAL_KINDS = ("all_slice", "replicated_to_partial")


@enum.unique
class Phase(enum.Enum):
    """FORWARD and BACKWARD run once per micro-batch; OPTIMIZER once per step; SOURCE ops
    (parameters, inputs, optimizer state) hold values and cost nothing."""

    FORWARD = "fwd"
    BACKWARD = "bwd"
    OPTIMIZER = "opt"
    SOURCE = "source"

    def __repr__(self) -> str:
        return f"Phase.{self.name}"


@enum.unique
class Traffic(enum.Enum):
    """How a producer→consumer reshard is scheduled.

    EXPOSED: on the critical path, once per micro-batch (activations) or per step (into and out
    of the optimizer). GATHER: a parameter gathered for a forward or backward op, every
    micro-batch. SYNC: a gradient reduced into the optimizer, once per step or every
    micro-batch (by layout). NEXT_STEP: an updated value moved back to its stored layout, once
    per step.
    """

    EXPOSED = "exposed"
    GATHER = "gather"
    SYNC = "sync"
    NEXT_STEP = "next_step"

    def __repr__(self) -> str:
        return f"Traffic.{self.name}"


@enum.unique
class Overlap(enum.Enum):
    """How overlapped traffic hides (module docstring): NONE (plain sum), OP (behind the op it
    feeds or that produced it; the default) or LAYER (pooled per layer and phase)."""

    NONE = "none"
    OP = "op"
    LAYER = "layer"

    def __repr__(self) -> str:
        return f"Overlap.{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepOptions:
    """``micro_batches`` per step and the :class:`Overlap` model."""

    micro_batches: int = 1
    overlap: Overlap = Overlap.OP
    # ZeRO-1 (``gradient_sync = "deferred"``): gradients accumulate whole over the micro-batches
    # and each is reduced once per step, whatever layout the optimizer reads it in
    whole_gradients: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeRole:
    """How one edge is scheduled: its traffic, how many runs a step has (a gradient
    reduction's depends on the pair: ``runs``), and what it hides behind: ``hider``, the op
    index (OP model), or ``slot``, the (phase, layer) window (LAYER model); both None when
    exposed."""

    traffic: Traffic
    count: int
    hider: int | None = None
    slot: tuple[Phase, int] | None = None
    whole: bool = False  # a SYNC whose gradient accumulates whole: once per step, every pair
    # the share of the hider's compute this edge may hide behind (the edges hidden behind one
    # op split it by their tensors' bytes; 1 when it hides alone)
    cover: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StepProblem:
    """The solver's numbers for a step: objective node costs and edges, and windows."""

    node_costs: list[np.ndarray]
    edges: list[tuple[int, int, np.ndarray]]
    windows: tuple
    node_counts: tuple[int, ...]
    roles: tuple[EdgeRole, ...]  # one per edge of ``edges + loops``, in that order
    # one 0/1 node per shared (tensor, layout), after the ops' nodes
    # (:mod:`autoshard.planning.shared_reshards`)
    shares: tuple = ()


def phase_of(op: Op) -> Phase:
    """The phase an op runs in, from its kind and name."""
    if op.kind in SOURCE_KINDS:
        return Phase.SOURCE
    if get_op(op.kind).updates:
        return Phase.OPTIMIZER
    return Phase.BACKWARD if op.name.startswith("bwd/") else Phase.FORWARD


def slot_of(op: Op) -> tuple[Phase, int]:
    """(phase, layer index or ``REST``) of an op."""
    found = layer_of(op.name)
    return phase_of(op), REST if found is None else found[0]


def edge_roles(graph: OpGraph, ops: list[Op], edges: list[Edge], loops: list[Edge],
               options: StepOptions) -> tuple[EdgeRole, ...]:
    """One role per edge of ``edges`` then ``loops``."""
    m, mode = options.micro_batches, options.overlap
    phases = [phase_of(op) for op in ops]
    roles = (_role(graph, ops, phases, edge, m, mode) for edge in edges)
    if options.whole_gradients:
        roles = (dataclasses.replace(r, whole=True) if r.traffic is Traffic.SYNC else r
                 for r in roles)
    return _split_covers(graph, edges, tuple(roles)) + tuple(
        _loop_role(ops, edge, mode) for edge in loops)


def _split_covers(graph: OpGraph, edges: list[Edge], roles: tuple[EdgeRole, ...]
                  ) -> tuple[EdgeRole, ...]:
    """Each op's compute split among the edges hidden behind it, by their tensors' bytes (a
    choice-free weight, so each edge's price stays a function of its two ends; a gather's time
    grows with its tensor, so the split follows the times when the layouts agree).

    Example: a LayerNorm's weight and bias, 768 elements each, hide behind the norm with half
    its compute each; a Linear's 768×3072 weight and 3072 bias, with 768/769 and 1/769."""
    weights: dict[int, float] = {}
    for edge, role in zip(edges, roles, strict=True):
        if role.hider is not None:
            weights[role.hider] = weights.get(role.hider, 0.0) + _edge_bytes(graph, edge)
    out = []
    for edge, role in zip(edges, roles, strict=True):
        total = weights.get(role.hider, 0.0) if role.hider is not None else 0.0
        share = _edge_bytes(graph, edge) / total if total > 0 else 1.0
        out.append(role if share == 1.0 else dataclasses.replace(role, cover=share))
    return tuple(out)


def _edge_bytes(graph: OpGraph, edge: Edge) -> float:
    tensor = graph.tensors[edge[3][0]]
    return float(math.prod(tensor.shape)) * tensor.dtype.itemsize


STORED_KINDS = ("param", "state")
"""Source kinds held across the step (not fed per micro-batch, unlike ``input``)."""


def node_counts(ops: list[Op], micro_batches: int) -> tuple[int, ...]:
    """Runs per step of each op: the optimizer steps once and parameters and optimizer state
    are stored once; inputs and everything computed run per micro-batch."""
    return tuple(1 if phase_of(op) is Phase.OPTIMIZER or op.kind in STORED_KINDS
                 else micro_batches for op in ops)


def _role(graph: OpGraph, ops: list[Op], phases: list[Phase], edge: Edge, m: int,
          mode: Overlap) -> EdgeRole:
    u, v, _, (name, _, _) = edge
    consumer, producer = phases[v], phases[u]
    if consumer is Phase.OPTIMIZER or producer is Phase.OPTIMIZER:
        tensor = graph.tensors[name]
        if tensor.role is TensorRole.GRAD and tensor.grad_of is not None \
                and producer is Phase.BACKWARD:
            return _overlapped(Traffic.SYNC, m, u, ops, mode)
        return EdgeRole(traffic=Traffic.EXPOSED, count=1)
    if ops[u].kind == "param" and consumer in (Phase.FORWARD, Phase.BACKWARD):
        return _overlapped(Traffic.GATHER, m, v, ops, mode)
    return EdgeRole(traffic=Traffic.EXPOSED, count=m)


def _overlapped(traffic: Traffic, m: int, hider: int, ops: list[Op], mode: Overlap
                ) -> EdgeRole:
    if mode is Overlap.OP:
        return EdgeRole(traffic=traffic, count=m, hider=hider)
    if mode is Overlap.LAYER:
        return EdgeRole(traffic=traffic, count=m, slot=slot_of(ops[hider]))
    return EdgeRole(traffic=traffic, count=m)


def _loop_role(ops: list[Op], edge: Edge, mode: Overlap) -> EdgeRole:
    """Next-step gathers: overlapped only by the layer model (with the parameter's forward,
    which the next step prefetches them for); the op model has no op beside them."""
    _, v, _, _ = edge
    slot = (Phase.FORWARD, slot_of(ops[v])[1]) if mode is Overlap.LAYER else None
    return EdgeRole(traffic=Traffic.NEXT_STEP, count=1, slot=slot)


def keeps_size(srcs: tuple, dsts: tuple, shape: tuple[int, ...]) -> np.ndarray:
    """Per (src, dst) pair: does the reshard leave each device as many bytes (an all-reduce
    into a replicated gradient), so the gradient may accumulate unreduced and move once?"""
    def size(sharding: TensorSharding) -> int:
        return math.prod(sharding.local_shape(shape, even=False))

    src_size = np.array([size(s) for s in srcs])
    dst_size = np.array([size(d) for d in dsts])
    return src_size[:, None] <= dst_size[None, :]


def once_per_step(role: EdgeRole, srcs: tuple, dsts: tuple, shape: tuple[int, ...]
                  ) -> np.ndarray:
    """Per (src, dst) pair of a gradient reduction (SYNC): does it run once per step? Yes
    when the gradient accumulates unreduced, which it does at its produced size when the
    reduction keeps that size (:func:`keeps_size`: DDP's all-reduce) or when the gradient is
    held whole anyway (``role.whole``: ZeRO-1 reduce-scatters the accumulated gradient once,
    where ZeRO-2's accumulator is the shard and every micro-batch reduces into it)."""
    if role.whole:
        return np.ones((len(srcs), len(dsts)), dtype=bool)
    return keeps_size(srcs, dsts, shape)


def runs(role: EdgeRole, src: TensorSharding, dst: TensorSharding, shape: tuple[int, ...],
         micro_batches: int) -> int:
    """How many times a step runs the reshard of one chosen (src, dst) pair."""
    if role.traffic is Traffic.SYNC:
        return 1 if bool(once_per_step(role, (src,), (dst,), shape)[0, 0]) else micro_batches
    return role.count


def overlap_label(role: EdgeRole, ops: list[Op]) -> str:
    """What a reshard record says it hides behind: ``"op bwd/layers.3.attn.q"`` or
    ``"layer bwd 3"``; ``""`` when exposed."""
    if role.hider is not None:
        return f"op {ops[role.hider].name}"
    if role.slot is not None:
        return slot_label(role.slot)
    return ""


def slot_label(slot: tuple[Phase, int]) -> str:
    """A (phase, layer) slot as records name its window: ``"layer bwd 3"``,
    ``"layer fwd rest"``."""
    phase, layer = slot
    return f"layer {phase.value} {'rest' if layer == REST else layer}"


def axis_seconds(record: ReshardRecord) -> dict[str, float]:
    """Seconds a reshard's collectives keep each mesh axis busy (a collective over several
    axes holds all of them); local steps excluded."""
    busy: dict[str, float] = {}
    for collective in record.collectives:
        if collective.kind in LOCAL_KINDS:
            continue
        for axis in collective.axes:
            busy[axis] = busy.get(axis, 0.0) + collective.seconds
    return busy


__all__ = ["Overlap", "Phase", "StepOptions", "StepProblem", "Traffic", "axis_seconds",
           "edge_roles", "keeps_size", "node_counts", "once_per_step", "overlap_label",
           "phase_of", "runs", "slot_label", "slot_of"]
