"""Among plans of equal step time, the one that computes least.

When an op waits for a collective hidden behind it (the op model of :mod:`.step`), a strategy
that computes more costs no time: the collective takes as long either way. The solver cannot
tell such ties apart and may pick the busier strategy; so after it answers, each op moves to
the strategy with the same input and output layouts (so the same memory and the same
reshards) that computes least, whenever that keeps the plan's time. Deterministic, and the
plan it gives is optimal whenever the solver's was.
"""

from __future__ import annotations

import numpy as np

import solver
from autoshard.planning.node_costs import NodeTerms
from autoshard.strategies.derive import Strategy

TIE = 1e-12  # relative to the plan's time: a swap may cost at most this


def prefer_less_compute(problem: solver.ChoiceProblem, choices: tuple[int, ...],
                        strategies: list[tuple[Strategy, ...]],
                        nodes: list[NodeTerms]) -> tuple[int, ...]:
    """``choices`` with each op's strategy replaced as the module docstring says (unchanged
    when the problem has windows, whose ties are not local)."""
    if problem.windows:
        return choices
    x = list(choices)
    incident: list[list[tuple[int, np.ndarray]]] = [[] for _ in x]
    for u, v, matrix in problem.edges:
        incident[u].append((v, matrix))
        incident[v].append((u, matrix.T))
    slack = TIE * max(abs(problem.evaluate(x)), 1e-300)
    # identical layers share their strategy tuples: compare layouts once per (tuple, choice)
    # (Mixtral's 3,811 ops compared 426 k strategy pairs); keyed by id while ``strategies``
    # holds every tuple
    twins: dict[tuple[int, int], list[int]] = {}
    for i, options in enumerate(strategies):
        key = (id(options), x[i])
        if key not in twins:
            chosen = options[x[i]]
            twins[key] = [j for j, s in enumerate(options) if j != x[i]
                          and s.inputs == chosen.inputs and s.outputs == chosen.outputs]
        same = [j for j in twins[key] if np.isfinite(problem.node_costs[i][j])]
        if not same:
            continue

        def local(j: int, i: int = i) -> float:
            return float(problem.node_costs[i][j]) + sum(float(m[j, x[o]])
                                                         for o, m in incident[i])

        here, best = local(x[i]), x[i]
        for j in same:
            if nodes[i].compute[j] < nodes[i].compute[best] and local(j) <= here + slack:
                best = j
        x[i] = best
    return tuple(x)
