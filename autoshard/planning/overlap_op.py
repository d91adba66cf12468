"""The op overlap model: each overlapped collective hides behind the compute of one op.

A parameter gather hides behind the op it feeds (the prefetch runs while that op's
predecessors compute, about as long as it does); a gradient reduction behind the op that
produced the gradient. Per run it costs what its cover does not,
``max(0, longest per-axis time − cover)`` (collectives on different mesh axes run side by
side, each axis one stream), plus its local steps (slices); the cover is the op's compute, or
the edge's share of it when several edges hide behind one op (``EdgeRole.cover``), so that
one op's compute hides no more than itself. Both the collective and the hiding
op are ends of the same edge, so the cost is an edge matrix: the problem stays pairwise.
"""

from __future__ import annotations

import numpy as np

from autoshard.planning.edge_costs import Edge
from autoshard.planning.node_costs import NodeTerms
from autoshard.planning.step import EdgeRole, Traffic, once_per_step
from autoshard.reshard.find import reshard_axis_matrices
from autoshard.sharding.links import MeshLinks
from autoshard.strategies.derive import Strategy
from graphs import OpGraph


def edge_matrix(edge: Edge, role: EdgeRole, strategies: list[tuple[Strategy, ...]],
                nodes: list[NodeTerms], graph: OpGraph, links: MeshLinks,
                hbm_bw: float | None, micro_batches: int) -> np.ndarray:
    """The edge's objective matrix for one step (runs per step included)."""
    u, v, matrix, (name, j, i) = edge
    m = micro_batches
    srcs = tuple(s.outputs[j] for s in strategies[u])
    dsts = tuple(s.outputs[0] for s in strategies[v]) if i < 0 else tuple(
        s.inputs[i] for s in strategies[v])
    runs = _runs(role, srcs, dsts, graph.tensors[name].shape, m)
    if role.hider is None:
        return np.where(np.isfinite(matrix), matrix * runs, np.inf)
    tensor = graph.tensors[name]
    parts = reshard_axis_matrices(srcs, dsts, tensor.shape, tensor.dtype.itemsize, links,
                                  hbm_bw)
    busiest = parts[..., :-1].max(axis=-1)
    compute = role.cover * nodes[role.hider].compute
    cover = compute[None, :] if role.hider == v else compute[:, None]
    exposed = parts[..., -1] + np.maximum(busiest - cover, 0.0)
    return np.where(np.isfinite(matrix), exposed * runs, np.inf)


def _runs(role: EdgeRole, srcs: tuple, dsts: tuple, shape: tuple[int, ...], m: int
          ) -> np.ndarray | int:
    """Runs per step: the role's count, or for a gradient reduction by pair (once when the
    gradient accumulates unreduced: :func:`~autoshard.planning.step.once_per_step`, else every
    micro-batch)."""
    if role.traffic is Traffic.SYNC and m > 1:
        return np.where(once_per_step(role, srcs, dsts, shape), 1, m)
    return role.count
