"""The solver's numbers for a step under the chosen overlap model, and the step's seconds
recomputed from the decoded records (the planner checks that the two agree)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from autoshard.planning.edge_costs import Edge
from autoshard.planning.node_costs import NodeTerms
from autoshard.planning.overlap_layer import layer_problem, layer_seconds
from autoshard.planning.overlap_op import edge_matrix
from autoshard.planning.record import OpRecord, ReshardRecord
from autoshard.planning.shared_reshards import find_shares
from autoshard.planning.step import (
    LOCAL_KINDS,
    Overlap,
    StepOptions,
    StepProblem,
    axis_seconds,
    edge_roles,
    node_counts,
)
from autoshard.sharding.links import MeshLinks
from autoshard.strategies.derive import Strategy
from graphs import Op, OpGraph


def step_problem(graph: OpGraph, ops: list[Op], strategies: list[tuple[Strategy, ...]],
                 nodes: list[NodeTerms], edges: list[Edge], loops: list[Edge],
                 links: MeshLinks, hbm_bw: float | None, options: StepOptions,
                 shares: bool = True) -> StepProblem:
    """Node costs, edges (and, for the layer model, windows) of one step; with ``shares``
    also the reshards its exposed consumers could share (:mod:`.shared_reshards`), which only
    a planner that prices shares needs (Mixtral 8x7B on dp=2,ep=4,tp=8: ~1 s to find)."""
    m = options.micro_batches
    counts = node_counts(ops, m)
    roles = edge_roles(graph, ops, edges, loops, options)
    if options.overlap is Overlap.LAYER:
        step = layer_problem(graph, ops, strategies, nodes, edges, loops, roles, links,
                             hbm_bw, m, counts)
        return _shared(step, ops, strategies, edges) if shares else step
    # identical layers share their reshard matrices and node terms (cached per structure),
    # so their step matrices are computed once and shared too
    cache: dict[tuple, np.ndarray] = {}
    objective = []
    for edge, role in zip((*edges, *loops), roles, strict=True):
        u, v, matrix, _ = edge
        hider = None if role.hider is None else (role.hider == v, id(nodes[role.hider]))
        key = (id(matrix), role.traffic, role.count, hider, role.cover)
        step_matrix = cache.get(key)
        if step_matrix is None:
            step_matrix = edge_matrix(edge, role, strategies, nodes, graph, links, hbm_bw, m)
            step_matrix.setflags(write=False)
            cache[key] = step_matrix
        objective.append((u, v, step_matrix))
    costs: list[np.ndarray] = [count * node.cost for node, count in zip(nodes, counts,
                                                                        strict=True)]
    step = StepProblem(node_costs=costs, edges=objective, windows=(), node_counts=counts,
                       roles=roles)
    return _shared(step, ops, strategies, edges) if shares else step


def _shared(step: StepProblem, ops: list[Op], strategies: list[tuple[Strategy, ...]],
            edges: list[Edge]) -> StepProblem:
    """``step`` with the shares its exposed consumers could have (:mod:`.shared_reshards`);
    the edges are still priced per edge (the planner prices the shares)."""
    shares = find_shares(ops, strategies, edges, step.roles, step.edges)
    return dataclasses.replace(step, shares=shares) if shares else step


def step_seconds(ops: list[Op], op_records: dict[str, OpRecord],
                 reshards: list[ReshardRecord], options: StepOptions) -> float:
    """A step's seconds recomputed from the decoded records alone: every op and exposed
    collective times its count, each collective hidden behind an op (``op ...``) by what that
    op's compute does not cover, and per window (``layer ...``) its busiest stream. Built from
    the records, not the cost matrices the solver saw: when the two agree, the collectives
    recorded are the ones that were priced, and where they were priced."""
    total = sum(r.count * (r.compute_s + r.comm_s) for r in op_records.values())
    layered = []
    for record in reshards:
        if record.overlap.startswith("layer "):
            layered.append(record)
            continue
        total += record.count * exposed_seconds(record, op_records)
    if layered:
        total += layer_seconds(ops, op_records, layered, options.micro_batches)
    return total


def exposed_seconds(record: ReshardRecord, op_records: Mapping[str, OpRecord]) -> float:
    """Seconds of one run of ``record`` on the critical path: all of it when exposed, what
    its share of the hiding op's compute (``record.cover``) does not cover when overlapped
    behind one op (``op ...``); a collective pooled in a layer window (``layer ...``) is
    counted in full here."""
    if not record.overlap.startswith("op "):
        return record.seconds
    hider = op_records[record.overlap.removeprefix("op ")]
    local = sum(c.seconds for c in record.collectives if c.kind in LOCAL_KINDS)
    busiest = max(axis_seconds(record).values(), default=0.0)
    return local + max(0.0, busiest - record.cover * hider.compute_s)
