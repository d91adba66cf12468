"""A small exact search around a plan: what the time left buys after a cut-short search.

Why: the descent (:mod:`solver.descent`) stops where no *single* node's change helps, but
most better plans change several nodes together (a layer's activations and the matmuls that
read them). When the time limit stopped the search before its model was built (or the model
was skipped as too large to build in time), seconds are left; they are spent on the whole
problem restricted to a few options per node, solved exactly by the MIP backend, then
descended again: large neighbourhood search (Shaw 1998, "Using constraint programming and
local search methods to solve vehicle routing problems", CP'98), with the neighbourhood of
each node its current option and the ``k`` options cheapest against its neighbours' current
ones. gpt2 training (2 layers) on dp=2,tp=2,cp=2,ep=2, 174 nodes and 84,217 options after
the reductions: descended 4.185 ms; restricted to 3 options per node (2,457 edge columns,
0.45 s) 3.879 ms; no restriction up to 32 options per node (700,337 columns, 44 s) found a
cheaper plan.

The restricted problem keeps every memory row, so its plans fit whenever they fit there, and
its optimum is never dearer than the plan it starts from (that plan is among its options).
"""

from __future__ import annotations

import time

import numpy as np

from solver.backends.highs import solve_highs
from solver.clock import Clock
from solver.compact import Indexed
from solver.descent import descend, local_costs, neighbours_of

NEIGHBOURHOODS = (3, 4, 6, 8)  # options per node, tried in turn while one improves nothing
MIN_SECONDS = 1.0  # below this much time left, no restricted model is built
DESCENT_SECONDS = 1.0


def restricted(ix: Indexed, keep: list[np.ndarray]) -> Indexed:
    """``ix`` with node i's options cut to ``keep[i]`` (its option numbers, ascending);
    option k of the result is option ``keep[i][k]`` of ``ix``."""
    return Indexed(
        ids=ix.ids, costs=tuple(c[k] for c, k in zip(ix.costs, keep, strict=True)),
        edges=tuple((u, v, m[np.ix_(keep[u], keep[v])]) for u, v, m in ix.edges),
        rows=tuple(tuple((i, vec[keep[i]]) for i, vec in row) for row in ix.rows),
        limit=ix.limit)


def around(ix: Indexed, x: np.ndarray, k: int) -> list[np.ndarray]:
    """Per node: its option in ``x`` and the ``k`` options cheapest with every other node
    held at ``x`` (ties by option number)."""
    neighbours = neighbours_of(ix.n, ix.edges)
    keep = []
    for i in range(ix.n):
        order = np.argsort(local_costs(ix.costs[i], neighbours[i], x), kind="stable")[:k]
        keep.append(np.union1d(order, [x[i]]).astype(np.intp))
    return keep


def improve(ix: Indexed, x: np.ndarray, clock: Clock, gap: float) -> np.ndarray:
    """``x`` or a cheaper plan that fits, found in restricted exact searches while the clock
    leaves at least ``MIN_SECONDS``; each neighbourhood size is kept while it improves."""
    if ix.windows or ix.n == 0 or clock.deadline is None:
        return x
    best, value = x, ix.evaluate(x)
    sizes = list(NEIGHBOURHOODS)
    while sizes and (clock.remaining() or 0.0) >= MIN_SECONDS:
        keep = around(ix, best, sizes[0])
        hint = np.array([int(np.searchsorted(k, best[i])) for i, k in enumerate(keep)])
        answer = solve_highs(restricted(ix, keep), hint, clock.remaining(), gap,
                             lp_first=False)
        if answer.x is None:
            break
        found = np.array([k[o] for k, o in zip(keep, answer.x, strict=True)], dtype=np.intp)
        found = descend(ix, found, time.perf_counter() + DESCENT_SECONDS)
        if ix.fits(found) and ix.evaluate(found) < value - 1e-12 * abs(value):
            best, value = found, ix.evaluate(found)
        else:
            sizes.pop(0)
    return best
