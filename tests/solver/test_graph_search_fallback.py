"""The last resort of a graph search that found no plan in its time (``graph_search.
_fallback``): the leanest plan when it fits, else CP-SAT for any fitting plan, under a time
limit of its own when the caller gave one (it had none before: a hard memory-bound problem
could run on past any ``--time-limit``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from solver import ChoiceProblem, graph_search, solve
from solver.backends.result import BackendResult


def _two_rows() -> ChoiceProblem:
    """Two nodes, each with an option light in row 1 and one light in row 2. The leanest plan
    (least memory summed over the rows, per node: option 0 twice) puts 10 in row 1, over the
    limit of 6; taking one of each fits."""
    first = np.array([5.0, 0.0])  # row 1: option 0 heavy there, option 1 free
    second = np.array([0.0, 6.0])
    return ChoiceProblem(node_costs=[[1.0, 2.0], [1.0, 2.0]], edges=[],
                         liveness=[[(0, first), (1, first)], [(0, second), (1, second)]],
                         memory_limit=6.0)


@pytest.mark.parametrize("time_limit", [None, 0.5])
def test_no_plan_from_the_backend_falls_back_to_cp_sat_within_a_limit(time_limit, monkeypatch):
    problem = _two_rows()
    assert problem.peak_memory((0, 0)) == 10.0  # the leanest plan does not fit
    limits = []
    real = graph_search.solve_cpsat

    def recorded(ix, hint, limit, gap):
        limits.append(limit)
        return real(ix, hint, limit, gap)

    monkeypatch.setattr(graph_search, "solve_highs", lambda *a, **k: BackendResult(
        x=None, bound=-math.inf, timed_out=True))
    monkeypatch.setattr(graph_search, "solve_cpsat", recorded)
    answer = solve(problem, time_limit=time_limit, backend="highs", reductions=False)
    peak = problem.peak_memory(answer.choices)
    assert peak is not None and peak <= 6.0
    assert sorted(answer.choices) == [0, 1]  # the only fitting plans: one of each
    assert len(limits) == 1
    if time_limit is None:
        assert limits[0] is None
    else:
        assert limits[0] is not None and math.isfinite(limits[0])
        assert limits[0] >= graph_search.FALLBACK_SECONDS
