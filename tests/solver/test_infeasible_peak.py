"""The least peak an infeasible problem reports (``graph_search._infeasible``): exact (CP-SAT's
min-max program) on small problems, a proven lower bound on large ones, whose exact program
alone could outlast any time limit. Oracle: exhaustive search over every plan's peak."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from solver import ChoiceProblem, graph_search, solve
from solver.errors import Infeasible


def _problem(seed: int) -> ChoiceProblem:
    """Three overlapping liveness rows over five nodes; the limit is below every plan's peak."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 4, size=5)
    costs = [rng.uniform(0, 1, size=s) for s in sizes]
    weight = [rng.uniform(1, 5, size=s) for s in sizes]
    rows = [[(i, weight[i]) for i in nodes] for nodes in ((0, 1, 2), (1, 2, 3), (2, 3, 4))]
    return ChoiceProblem(node_costs=costs, edges=[], liveness=rows, memory_limit=1.0)


def _least_peak(problem: ChoiceProblem) -> float:
    return min(problem.peak_memory(plan)
               for plan in itertools.product(*(range(len(c)) for c in problem.node_costs)))


@pytest.mark.parametrize("seed", range(8))
def test_small_problems_report_the_exact_least_peak(seed: int) -> None:
    problem = _problem(seed)
    with pytest.raises(Infeasible) as caught:
        solve(problem, backend="auto")
    assert caught.value.exact
    assert caught.value.min_peak == pytest.approx(_least_peak(problem), rel=1e-9)


@pytest.mark.parametrize("seed", range(8))
def test_large_problems_report_a_proven_lower_bound(seed: int, monkeypatch) -> None:
    monkeypatch.setattr(graph_search, "EXACT_PEAK_TERMS", 0)
    monkeypatch.setattr(graph_search, "min_peak", lambda ix: pytest.fail("exact peak built"))
    problem = _problem(seed)
    with pytest.raises(Infeasible) as caught:
        solve(problem, backend="auto", time_limit=5.0)
    assert not caught.value.exact
    assert "needs at least" in str(caught.value)
    assert 1.0 < caught.value.min_peak <= _least_peak(problem) + 1e-9


def test_a_memory_bound_chain_is_refused_before_its_whole_problem_is_built() -> None:
    """``periodic_search._unless_clearly_too_small``: the whole problem of a chain whose tied
    plan does not fit is built only when some plan might fit and there is time to look."""
    from solver.clock import Clock
    from solver.errors import NoSolutionError
    from solver.periodic_search import _unless_clearly_too_small

    problem = _problem(3)
    rows = problem.liveness
    least = max(sum(float(vec.min()) for _, vec in row) for row in rows)  # by hand
    with pytest.raises(Infeasible) as caught:
        _unless_clearly_too_small(problem, Clock(60.0))
    assert not caught.value.exact
    assert caught.value.min_peak == pytest.approx(least, rel=1e-12)
    roomy = ChoiceProblem(node_costs=problem.node_costs, edges=[], liveness=rows,
                          memory_limit=least)
    assert _unless_clearly_too_small(roomy, Clock(60.0)) is None  # time left: search
    with pytest.raises(NoSolutionError):
        _unless_clearly_too_small(roomy, Clock(0.0))  # deadline passed: no build
