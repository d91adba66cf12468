"""Problems with windows, solved as a short series of window-free problems (Lagrangian).

A window costs ``weight · max_s stream_s``. For any weights ``λ_s ≥ 0`` summing to one,
``Σ λ_s·stream_s ≤ max_s stream_s``, so the problem with every window replaced by that weighted
sum is a window-free problem (node and edge costs only) whose optimum is a lower bound of the
windowed one; and its plan, priced with the real windows, is a plan. Window-free problems are
what the rest of the solver is fast at (exact reductions, the tree DP, the periodic LP of a
chain of layers, whose LP relaxation is integral on the planner's problems), while the MIP
with one time variable per window is not: its relaxation averages the streams over
fractional options (on a 6-layer Llama block, dual simplex 27 s against 1.1 s without
windows, and a 5 % weaker bound).

The weights start on each window's first stream (the planner puts the compute there: most
windows of a training step are compute-bound, and then the first answer is already optimal)
and move toward the streams that bind at the last plan (a subgradient step of the dual, with
a shrinking rate), at most ``MAX_ROUNDS`` times or until the plan meets the bound. Windows that
share a ``group`` share their weights: the layers of a model keep identical costs, so the
window-free problems stay periodic. If a gap is left and the problem is small, the exact MIP
with the windows' time variables closes it (``EXACT_MAX_OPTIONS``), within what is left of the
time limit or, without one, within ``EXACT_DEFAULT_S``; otherwise the plan says its gap.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Hashable

import numpy as np

from solver.clock import Clock
from solver.graph_search import Sizes, closed, finish, sizes_of, solve_graph
from solver.problem import ChoiceProblem, Window
from solver.solution import Solution, SolveStatus

logger = logging.getLogger(__name__)

MAX_ROUNDS = 8
EXACT_MAX_OPTIONS = 5_000  # options of the whole problem up to which the exact MIP may close it
EXACT_DEFAULT_S = 30.0
"""Without a time limit, the seconds the exact MIP may spend closing the rounds' gap; cut
short, the answer is the best plan with its gap, status ``TIME_LIMIT``. Why bounded: on GPT-2
(2 layers, dp=2,tp=2, training, ``--overlap layer``: 8 rounds left a 13 % gap) the MIP ran
over 600 s without closing it, so a plan with no time limit never came back."""

Solver = Callable[[ChoiceProblem, float | None], Solution]


def solve_windowed(problem: ChoiceProblem, clock: Clock, gap: float, before: Sizes,
                   solve_plain: Solver, incumbent: tuple[int, ...] | None = None) -> Solution:
    """The windowed problem by Lagrangian rounds of ``solve_plain`` (module docstring),
    starting from the caller's ``incumbent`` plan when given."""
    groups = _groups(problem.windows)
    weights = {key: _first(problem.windows[members[0]]) for key, members in groups.items()}
    best, best_value, bound = None, math.inf, -math.inf
    cut_short = False  # the exact MIP stopped at its own limit (EXACT_DEFAULT_S or the rest)
    if incumbent is not None:
        best, best_value = incumbent, problem.evaluate(incumbent)
    for round_ in range(MAX_ROUNDS):
        answer = solve_plain(_weighted(problem, groups, weights), clock.remaining())
        clock.lap("window_round")
        bound = max(bound, answer.bound)
        value = problem.evaluate(answer.choices)
        if value < best_value:
            best, best_value = answer.choices, value
        logger.info("window round %d: bound %.6g, plan %.6g", round_, bound, best_value)
        if closed(best_value, bound, gap) or _out_of_time(clock):
            break
        moved = _step(problem, groups, weights, answer.choices, rate=1.0 / (round_ + 1))
        if not moved:
            break
    assert best is not None
    if not closed(best_value, bound, gap) and sum(problem.sizes) <= EXACT_MAX_OPTIONS \
            and not _out_of_time(clock):
        left = clock.remaining()
        exact = solve_graph(problem, Clock(EXACT_DEFAULT_S if left is None else left), "auto",
                            True, gap, bound, sizes_of(problem))
        cut_short = exact.status is SolveStatus.TIME_LIMIT
        bound = max(bound, exact.bound)  # a bound of this problem whichever plan is better
        if exact.objective <= best_value:
            best, best_value = exact.choices, exact.objective
    timed_out = (_out_of_time(clock) or cut_short) and not closed(best_value, bound, gap)
    return finish(problem, best, bound, timed_out, clock, "windowed", before, before)


def _out_of_time(clock: Clock) -> bool:
    remaining = clock.remaining()
    return remaining is not None and remaining <= 0.0


def _groups(windows: tuple[Window, ...]) -> dict[Hashable, list[int]]:
    """Window indices by ``group`` (a window without one is a group of its own)."""
    groups: dict[Hashable, list[int]] = {}
    for index, window in enumerate(windows):
        key = ("window", index) if window.group is None else ("group", window.group)
        groups.setdefault(key, []).append(index)
    return groups


def _first(window: Window) -> np.ndarray:
    weights = np.zeros(len(window.streams))
    weights[0] = 1.0
    return weights


def _weighted(problem: ChoiceProblem, groups: dict[Hashable, list[int]],
              weights: dict[Hashable, np.ndarray]) -> ChoiceProblem:
    """``problem`` with every window replaced by its streams weighted by ``weight · λ``."""
    costs = [c.copy() for c in problem.node_costs]
    edges = list(problem.edges)
    constant = 0.0
    for key, members in groups.items():
        for index in members:
            window = problem.windows[index]
            for stream, share in zip(window.streams, weights[key], strict=True):
                scale = window.weight * float(share)
                if scale == 0.0:
                    continue
                constant += scale * stream.constant
                for node, vec in stream.nodes:
                    costs[node] = costs[node] + scale * vec
                edges += [(u, v, scale * matrix) for u, v, matrix in stream.edges]
    if constant:
        costs[0] = costs[0] + constant
    return dataclasses.replace(problem, node_costs=tuple(costs), edges=tuple(edges), windows=())


def _step(problem: ChoiceProblem, groups: dict[Hashable, list[int]],
          weights: dict[Hashable, np.ndarray], choices: tuple[int, ...], rate: float) -> bool:
    """Move each group's weights toward the streams that bind at ``choices`` (the share of
    its windows' weight each stream is the longest in); whether any weight changed."""
    moved = False
    for key, members in groups.items():
        busiest = np.zeros_like(weights[key])
        for index in members:
            window = problem.windows[index]
            values = [stream.value(choices) for stream in window.streams]
            busiest[int(np.argmax(values))] += window.weight
        total = busiest.sum()
        if total <= 0:
            continue
        target = (1 - rate) * weights[key] + rate * busiest / total
        if not np.allclose(target, weights[key], rtol=0, atol=1e-12):
            weights[key] = target
            moved = True
    return moved


__all__ = ["MAX_ROUNDS", "SolveStatus", "solve_windowed"]
