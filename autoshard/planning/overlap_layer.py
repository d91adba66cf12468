"""The layer overlap model: per layer and phase, compute and each link's traffic side by side.

Per (phase, layer) slot, one :class:`solver.Window`: the phase's compute on one stream and each
mesh axis's overlapped collectives on their own (a collective over several axes holds every
one of its axes), so the phase lasts as long as the busiest. Gathers belong to the slot of the
op they feed, gradient reductions to the slot of the op that produced them, next-step
gathers to the forward of the parameter's layer (which the next step prefetches them for).
With ``m`` micro-batches a slot has two windows: ``m - 1`` ordinary ones and one holding the
once-per-step traffic. Local steps of an overlapped reshard (slices) stay exposed.

Stated approximation: a layer's gradient reduction overlaps that layer's own backward (a
framework overlaps it with the next layer's in backward order; in a stack of identical layers
the sum is the same; the first layer's is optimistic by one layer's reduction).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import solver
from autoshard.planning.edge_costs import Edge
from autoshard.planning.node_costs import NodeTerms
from autoshard.planning.record import OpRecord, ReshardRecord
from autoshard.planning.step import (
    LOCAL_KINDS,
    REST,
    EdgeRole,
    Phase,
    StepProblem,
    Traffic,
    axis_seconds,
    once_per_step,
    slot_label,
    slot_of,
)
from autoshard.reshard.find import reshard_axis_matrices
from autoshard.sharding.links import MeshLinks
from autoshard.strategies.derive import Strategy
from graphs import Op, OpGraph

Slot = tuple[Phase, int]


@dataclass(slots=True)
class _Slot:
    """What one phase of one layer holds, as it is gathered."""

    compute: list[tuple[int, np.ndarray]] = field(default_factory=list)
    # (mesh axis, producer, consumer, seconds on that axis), per micro-batch and per step
    every: list[tuple[int, int, int, np.ndarray]] = field(default_factory=list)
    once: list[tuple[int, int, int, np.ndarray]] = field(default_factory=list)

    def windowed(self, m: int) -> int:
        """How many of the phase's ``m`` runs its windows stand for."""
        if self.every:
            return m
        return 1 if self.once else 0


def layer_problem(graph: OpGraph, ops: list[Op], strategies: list[tuple[Strategy, ...]],
                  nodes: list[NodeTerms], edges: list[Edge], loops: list[Edge],
                  roles: tuple[EdgeRole, ...], links: MeshLinks, hbm_bw: float | None,
                  m: int, counts: tuple[int, ...]) -> StepProblem:
    """Node costs, edges and windows of the step under the layer model."""
    slots: dict[Slot, _Slot] = {}
    objective = []
    for edge, role in zip((*edges, *loops), roles, strict=True):
        u, v, _, _ = edge
        if role.slot is None:
            objective.append((u, v, _exposed(edge, role, strategies, graph, m)))
            continue
        objective.append((u, v, _add(slots.setdefault(role.slot, _Slot()), edge, role,
                                     strategies, graph, links, hbm_bw, m)))
    costs = []
    for index, (node, count) in enumerate(zip(nodes, counts, strict=True)):
        slot = slots.get(slot_of(ops[index]))
        windowed = 0 if slot is None else slot.windowed(m)
        if windowed:
            slot.compute.append((index, node.compute))
        costs.append(count * (node.comm + node.fixup) + (count - windowed) * node.compute)
    windows = tuple(w for key in sorted(slots, key=_order) for w in _windows(slots[key], m, key))
    return StepProblem(node_costs=costs, edges=objective, windows=windows, node_counts=counts,
                       roles=roles)


def _order(key: Slot) -> tuple[int, int]:
    return (list(Phase).index(key[0]), key[1])


def _exposed(edge: Edge, role: EdgeRole, strategies: list[tuple[Strategy, ...]],
             graph: OpGraph, m: int) -> np.ndarray:
    u, v, matrix, (name, j, i) = edge
    if role.traffic is Traffic.SYNC and m > 1:
        srcs = tuple(s.outputs[j] for s in strategies[u])
        dsts = tuple(s.inputs[i] for s in strategies[v])
        once = once_per_step(role, srcs, dsts, graph.tensors[name].shape)
        return np.where(np.isfinite(matrix), matrix * np.where(once, 1, m), np.inf)
    return role.count * matrix if role.count != 1 else matrix


def _add(slot: _Slot, edge: Edge, role: EdgeRole, strategies: list[tuple[Strategy, ...]],
         graph: OpGraph, links: MeshLinks, hbm_bw: float | None, m: int) -> np.ndarray:
    """Put the edge's per-axis seconds into ``slot``; return its objective matrix: the local
    steps (slices), ``inf`` where no reshard exists."""
    u, v, matrix, (name, j, i) = edge
    srcs = tuple(s.outputs[j] for s in strategies[u])
    dsts = tuple(s.outputs[0] for s in strategies[v]) if i < 0 else tuple(
        s.inputs[i] for s in strategies[v])
    tensor = graph.tensors[name]
    parts = reshard_axis_matrices(srcs, dsts, tensor.shape, tensor.dtype.itemsize, links,
                                  hbm_bw)
    finite = np.isfinite(matrix)
    local = np.where(finite, parts[..., -1], np.inf)
    axes = [(a, parts[..., a] * finite) for a in range(parts.shape[-1] - 1)]
    axes = [(a, seconds) for a, seconds in axes if np.any(seconds)]
    if role.traffic is Traffic.SYNC:
        once = once_per_step(role, srcs, dsts, tensor.shape)
        slot.every.extend((a, u, v, seconds * ~once) for a, seconds in axes)
        slot.once.extend((a, u, v, seconds * once) for a, seconds in axes)
        return np.where(finite, local * np.where(once, 1, m), np.inf)
    target = slot.once if role.traffic is Traffic.NEXT_STEP else slot.every
    target.extend((a, u, v, seconds) for a, seconds in axes)
    return local * role.count if role.count != 1 else local


def _windows(slot: _Slot, m: int, key: Slot) -> list[solver.Window]:
    """The slot's windows, compute stream first (the solver tries it as the binding one
    first); the layers' windows of one kind form a group (they are alike)."""
    phase, layer = key
    where = "rest" if layer == REST else "layer"
    compute = solver.Stream(nodes=tuple(slot.compute))
    out = []
    if m > 1 and slot.every:
        out.append(solver.Window(streams=(compute, *_axis_streams(slot.every)),
                                 weight=float(m - 1), group=(phase.value, where, "every")))
    if slot.every or slot.once:
        out.append(solver.Window(streams=(compute, *_axis_streams(slot.every + slot.once)),
                                 weight=1.0, group=(phase.value, where, "last")))
    return out


def _axis_streams(terms: list[tuple[int, int, int, np.ndarray]]) -> tuple[solver.Stream, ...]:
    by_axis: dict[int, list[tuple[int, int, np.ndarray]]] = {}
    for axis, u, v, seconds in terms:
        if np.any(seconds):
            by_axis.setdefault(axis, []).append((u, v, seconds))
    return tuple(solver.Stream(edges=tuple(by_axis[a])) for a in sorted(by_axis))


def layer_seconds(ops: list[Op], op_records: dict[str, OpRecord],
                  records: list[ReshardRecord], m: int) -> float:
    """What the layer model's windows add beyond every op's compute and intra-op traffic
    (which the caller counted): per slot named by the records' ``overlap``, the longest of
    its compute and each axis's collectives, less the compute the caller already counted,
    plus the records' local steps."""
    streams: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
    total = 0.0
    for record in records:
        every, once = streams.setdefault(record.overlap, ({}, {}))
        target = every if record.count == m else once
        for axis, seconds in axis_seconds(record).items():
            target[axis] = target.get(axis, 0.0) + seconds
        total += record.count * sum(c.seconds for c in record.collectives
                                    if c.kind in LOCAL_KINDS)
    compute: dict[str, float] = dict.fromkeys(streams, 0.0)
    for op in ops:
        label = slot_label(slot_of(op))
        record = op_records[op.name]
        if label in compute and record.count == m:
            compute[label] += record.compute_s
    for label, (every, once) in streams.items():
        both = {a: every.get(a, 0.0) + once.get(a, 0.0) for a in {*every, *once}}
        total += (m - 1) * max(compute[label], *every.values(), 0.0)
        total += max(compute[label], *both.values(), 0.0)
        total -= m * compute[label]  # the caller counted every run's compute already
    return total
