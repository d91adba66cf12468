"""Which nodes the polish of a periodic plan may change, and that problem with the rest fixed.

A periodic LP's plan that misses the bound is polished: its tied blocks stay as the LP chose
them and the rest is solved exactly (``solver.api``). Solving *all* the rest is a MIP the size
of a few blocks (a 3-axis llama3-8b polish: 15 k options, 8–18 s, most of it HiGHS' root LP).
But the LP usually decided almost all of the rest already: its x is 0/1 there, and the plan
misses the bound only around the nodes the LP split between options. So the polish first
frees just those nodes and their neighbours (a relaxation-induced neighbourhood, as in the
RINS heuristic of MIP solvers), fixing every other node to the LP's choice. Measured on the
64-device llama3-8b sweep at gap 1e-3: dp=2,fsdp=8,tp=4 frees 127 of 3,230 nodes and lands
within 4.5e-6 of the full polish in 1.4 s instead of 10.9 s; dp=2,fsdp=16,tp=2 in 1.3 s
instead of 18 s (2.1e-4 above the full polish, inside the gap). Only when that plan is still
short of the gap does the full polish run.

Either polish is solved over its free nodes only (:func:`free_part`): the fixed nodes' edges
become costs of their free neighbours, and the thousands of fixed nodes of a long model are
never built (llama3-70b on dp=8,tp=8 under measured-curve prices: 0.3 s instead of 0.9 s).
"""

from __future__ import annotations

import numpy as np

from solver.periodic import Aggregated, Chain
from solver.problem import ChoiceProblem

DECIDED = 0.99  # an LP x at least this on the chosen option: the LP did not hesitate there


def tied_run(chain: Chain, ends: int, num_nodes: int) -> np.ndarray:
    """Mask of the nodes of the tied blocks (between the first and last ``ends`` blocks)."""
    mask = np.zeros(num_nodes, dtype=bool)
    for block in chain.blocks[ends:len(chain.blocks) - ends]:
        mask[list(block)] = True
    return mask


def decided_elsewhere(problem: ChoiceProblem, chain: Chain, agg: Aggregated, ends: int,
                      ids: tuple[int, ...], weight: np.ndarray) -> np.ndarray:
    """Mask of the nodes to fix for the small polish: the tied run, and every other node the
    LP decided (``weight`` ≥ ``DECIDED`` on its chosen option) unless it neighbours one it
    did not. ``ids`` names the aggregated node of each LP node (``weight`` is per LP node);
    nodes the reductions removed before the LP are never fixed: given their neighbours the
    reductions settle them again, exactly."""
    count = len(chain.blocks)
    outside = [*zip(chain.rest, agg.rest, strict=True)]
    for k in (*range(ends), *range(count - ends, count)):
        outside += zip(chain.blocks[k], agg.block_nodes[k], strict=True)
    weight_of = dict(zip(ids, weight.tolist(), strict=True))
    tied = tied_run(chain, ends, problem.num_nodes)
    fixed, undecided = tied.copy(), np.zeros(problem.num_nodes, dtype=bool)
    for node, agg_node in outside:
        share = weight_of.get(agg_node)
        if share is not None:
            fixed[node] = share >= DECIDED
            undecided[node] = share < DECIDED
    pairs = np.array([(u, v) for u, v, _ in problem.edges], dtype=np.int64).reshape(-1, 2)
    near = undecided.copy()
    near[pairs[undecided[pairs[:, 1]], 0]] = True
    near[pairs[undecided[pairs[:, 0]], 1]] = True
    return fixed & (tied | ~near)


def fix(problem: ChoiceProblem, fixed: np.ndarray, choices: tuple[int, ...]) -> ChoiceProblem:
    """``problem`` with every ``fixed`` node held at ``choices`` (its other options priced
    ``inf``, which the reductions fold away): what is left to solve is the rest."""
    costs = []
    for node, vec in enumerate(problem.node_costs):
        if fixed[node]:
            only = np.full(vec.size, np.inf)
            only[choices[node]] = vec[choices[node]]
            vec = only
        costs.append(vec)
    return ChoiceProblem(node_costs=costs, edges=problem.edges, windows=problem.windows)


def free_part(problem: ChoiceProblem, fixed: np.ndarray, choices: tuple[int, ...]
              ) -> tuple[ChoiceProblem, np.ndarray] | None:
    """``(sub, free)``: the problem :func:`fix` leaves, written over its ``free`` nodes only
    (the node ids, in order; ``sub``'s node ``i`` is ``free[i]``). An edge to a fixed node
    becomes the column (or row) of its matrix at that node's choice, added to the free node's
    costs: what the reductions' singleton folding makes of :func:`fix`'s problem, without
    building and folding the thousands of fixed nodes first (llama3-70b on dp=8,tp=8: 8,030
    nodes, of which the polish frees a few hundred). For every assignment of the free nodes,
    its cost in ``sub`` plus the fixed nodes' constant part is its cost with the fixed nodes
    at ``choices``, so the optimum of ``sub`` lifts to the optimum of :func:`fix`'s problem.
    ``None`` when no node is free, or when the problem has windows (their maxima do not
    split per node: :func:`fix` handles them)."""
    if problem.windows:
        return None
    free = np.flatnonzero(~np.asarray(fixed, dtype=bool))
    if free.size == 0:
        return None
    index = np.full(problem.num_nodes, -1, dtype=np.int64)
    index[free] = np.arange(free.size)
    costs = [problem.node_costs[node].copy() for node in free.tolist()]
    edges = []
    for u, v, matrix in problem.edges:
        iu, iv = int(index[u]), int(index[v])
        if iu >= 0 and iv >= 0:
            edges.append((iu, iv, matrix))
        elif iu >= 0:
            costs[iu] += matrix[:, choices[v]]
        elif iv >= 0:
            costs[iv] += matrix[choices[u], :]
    return ChoiceProblem(node_costs=costs, edges=edges), free
