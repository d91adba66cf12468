"""Exhaustive search over every assignment: the tests' independent oracle.

It reads the user's ``ChoiceProblem`` directly (no reductions, no groups contraction) and
enumerates all assignments with NumPy, so it shares no logic with the real backends. Ties go to
the lexicographically smallest assignment. It refuses problems above ``MAX_ASSIGNMENTS``.
"""

from __future__ import annotations

import numpy as np

from solver.errors import Infeasible, NoFiniteOptionError, ProblemTooLargeError
from solver.problem import ChoiceProblem

MAX_ASSIGNMENTS = 2_000_000


def _all_assignments(problem: ChoiceProblem) -> np.ndarray:
    count = float(np.prod([float(k) for k in problem.sizes]))
    if count > MAX_ASSIGNMENTS:
        msg = (f"exhaustive search would try {count:.3g} assignments (limit "
               f"{MAX_ASSIGNMENTS:,}); use backend='auto' for problems this large")
        raise ProblemTooLargeError(msg, size=count, limit=MAX_ASSIGNMENTS)
    return np.indices(problem.sizes).reshape(problem.num_nodes, -1)


def _peaks(problem: ChoiceProblem, grid: np.ndarray) -> np.ndarray | None:
    rows = problem.memory_rows()
    if not rows:
        return None
    sums = [sum((vec[grid[n]] for n, vec in row), np.zeros(grid.shape[1])) for row in rows]
    return np.max(sums, axis=0)


def exhaustive(problem: ChoiceProblem) -> tuple[tuple[int, ...], float]:
    """Optimal choices and objective by enumeration.

    Raises:
        Infeasible: no assignment fits the memory limit (``min_peak`` is exact).
        NoFiniteOptionError: every assignment has infinite cost.
        ProblemTooLargeError: more than ``MAX_ASSIGNMENTS`` assignments.
    """
    grid = _all_assignments(problem)
    total = np.zeros(grid.shape[1])
    for n, costs in enumerate(problem.node_costs):
        total += costs[grid[n]]
    for u, v, matrix in problem.edges:
        total += matrix[grid[u], grid[v]]
    for window in problem.windows:
        longest = np.full(grid.shape[1], -np.inf)
        for stream in window.streams:
            value = np.full(grid.shape[1], stream.constant)
            for n, vec in stream.nodes:
                value += vec[grid[n]]
            for u, v, matrix in stream.edges:
                value += matrix[grid[u], grid[v]]
            longest = np.maximum(longest, value)
        total += window.weight * longest
    for group in problem.groups or ():
        for node in group[1:]:
            total[grid[node] != grid[group[0]]] = np.inf
    if not np.isfinite(total).any():
        msg = ("no assignment has finite cost (every combination hits an inf option, an inf "
               "edge entry or a group without a common finite option)")
        raise NoFiniteOptionError(msg)
    peaks = _peaks(problem, grid)
    if peaks is not None and problem.memory_limit is not None:
        fits = (peaks <= problem.memory_limit) & np.isfinite(total)
        if not fits.any():
            min_peak = float(peaks[np.isfinite(total)].min())
            raise Infeasible(min_peak=min_peak, limit=problem.memory_limit)
        total = np.where(fits, total, np.inf)
    best = int(np.argmin(total))
    return tuple(int(i) for i in grid[:, best]), float(total[best])
