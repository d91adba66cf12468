"""The least peak an infeasible problem reports (``solver.peak.least_peak`` through
``solve``): exact (CP-SAT's min-max program) when there is time to prove it; otherwise a proven
lower bound and the peak of a plan found, returned within the time limit. And a chain whose
tied plan does not fit is answered without its whole problem being built when there is no
time for that (``solver.untied``).

Oracle: exhaustive search over every plan's peak (``ChoiceProblem.peak_memory``), and by hand
each row's leanest sum.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time

import numpy as np
import pytest

from solver import ChoiceProblem, NoSolutionError, graph_search, periodic_search, solve, untied
from solver.clock import Clock
from solver.errors import Infeasible
from solver.peak import least_peak
from solver.solution import SolveStatus
from solver.untied import solve_untied
from tests.solver.test_periodic import chain_problem
from tests.solver.test_tied_plan import chain_of


def _problem(seed: int, *, integral: bool = False) -> ChoiceProblem:
    """Four overlapping liveness rows over six nodes, each node's bytes their own in each row
    (a tensor saved in one step, another in the next); the limit is below every plan's
    peak."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 4, size=6)
    costs = [rng.uniform(0, 1, size=s) for s in sizes]
    rows = []
    for nodes in ((0, 1, 2), (1, 2, 3), (2, 3, 4), (3, 4, 5, 0)):
        weight = [rng.uniform(1, 5, size=sizes[i]) for i in nodes]
        if integral:
            weight = [np.round(w * 100) for w in weight]
        rows.append(list(zip(nodes, weight, strict=True)))
    return ChoiceProblem(node_costs=costs, edges=[], liveness=rows, memory_limit=1.0)


def _peaks(problem: ChoiceProblem) -> list[float]:
    """Every plan's peak (brute force)."""
    return [problem.peak_memory(plan)
            for plan in itertools.product(*(range(len(c)) for c in problem.node_costs))]


def _least_row_sum(problem: ChoiceProblem) -> float:
    return max(sum(float(np.min(vec)) for _, vec in row) for row in problem.liveness)


@pytest.mark.parametrize("integral", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_with_time_the_least_peak_is_exact(seed: int, integral: bool) -> None:
    problem = _problem(seed, integral=integral)
    with pytest.raises(Infeasible) as caught:
        solve(problem, backend="auto")
    assert caught.value.exact
    assert caught.value.min_peak == pytest.approx(min(_peaks(problem)), rel=1e-9)
    assert caught.value.found_peak == caught.value.min_peak
    assert "needs at least" not in str(caught.value)


@pytest.mark.parametrize("seed", range(12))
def test_out_of_time_the_verdict_brackets_the_least_peak(seed: int) -> None:
    """No time at all: the verdict comes at once, its lower bound every row's leanest sum at
    most the least peak, its upper bound the peak of a plan that exists."""
    problem = _problem(seed)
    started = time.perf_counter()
    with pytest.raises(Infeasible) as caught:
        solve(problem, backend="auto", time_limit=0.0)
    assert time.perf_counter() - started < 2.0
    verdict, peaks = caught.value, _peaks(problem)
    assert verdict.min_peak == pytest.approx(_least_row_sum(problem), rel=1e-12)
    assert verdict.min_peak <= min(peaks) + 1e-9
    assert verdict.found_peak is not None
    assert any(verdict.found_peak == pytest.approx(p, rel=1e-12) for p in peaks)
    assert verdict.exact == (verdict.min_peak >= verdict.found_peak)
    if not verdict.exact:
        assert "needs at least" in str(verdict) and "upper bound" in str(verdict)


def test_some_verdict_out_of_time_is_not_exact() -> None:
    """The cheap bounds do not always meet (else the test above proves nothing of them)."""
    inexact = []
    for seed in range(12):
        with pytest.raises(Infeasible) as caught:
            solve(_problem(seed), backend="auto", time_limit=0.0)
        inexact.append(not caught.value.exact)
    assert any(inexact)


def test_a_build_the_deadline_cuts_short_leaves_the_bounds(monkeypatch) -> None:
    """The deadline passes while CP-SAT's model is built (here: after its first row is
    read): no solve starts, and the cheap bounds stand."""
    problem = _problem(3)
    clock = Clock(60.0)
    rows = problem.memory_rows()

    def rows_then_late():
        for k, row in enumerate(rows):
            if k == 1:
                clock.deadline = time.perf_counter()
            yield row

    late = dataclasses.replace(problem)
    monkeypatch.setattr(ChoiceProblem, "memory_rows",
                        lambda self: rows_then_late() if self is late else rows)
    monkeypatch.setattr("ortools.sat.python.cp_model.CpSolver.solve",
                        lambda *a: pytest.fail("CP-SAT solved after the deadline"))
    bounds = least_peak(late, clock)
    peaks = _peaks(problem)
    assert bounds.lower == pytest.approx(_least_row_sum(problem), rel=1e-12)
    assert bounds.lower <= min(peaks) + 1e-9 <= bounds.upper + 2e-9
    assert any(bounds.upper == pytest.approx(p, rel=1e-12) for p in peaks)


def test_a_plan_that_needs_an_impossible_pair_is_not_an_upper_bound() -> None:
    """The leanest option of each node, together, is an inf edge: the found plan avoids it."""
    costs = [np.zeros(2), np.zeros(2)]
    rows = [[(0, np.array([1.0, 3.0])), (1, np.array([1.0, 2.0]))]]
    edges = [(0, 1, np.array([[math.inf, 0.0], [0.0, 0.0]]))]
    problem = ChoiceProblem(node_costs=costs, edges=edges, liveness=rows, memory_limit=0.5)
    with pytest.raises(Infeasible) as caught:
        solve(problem, backend="auto")
    assert caught.value.exact and caught.value.min_peak == 3.0  # (0, 1) or (1, 0): 3 and 4


def _tied_does_not_fit(seed: int, room: float) -> ChoiceProblem:
    """A 4-layer chain whose layers' rows make their tied plan too heavy; ``room`` above the
    whole problem's leanest row sum."""
    base = chain_problem(seed, layers=4, per_block=2, options=3, rest=1)
    sizes = base.sizes
    rows = []
    for k, block in enumerate(base.blocks):  # layer k heaviest at option k % 3
        vec = np.full(sizes[block[0]], 5.0)
        vec[k % 3] = 1.0
        rows.append((block[0], vec))
    liveness = [tuple(rows)]
    least = sum(float(vec.min()) for _, vec in rows)
    return ChoiceProblem(node_costs=base.node_costs, edges=base.edges, blocks=base.blocks,
                         liveness=liveness, memory_limit=least + room)


@pytest.mark.parametrize("seed", range(3))
def test_a_chain_out_of_time_is_answered_without_its_whole_problem(seed: int,
                                                                   monkeypatch) -> None:
    """Tied plans take one option for every interior layer, the leanest plan mixes them.
    With no time left: under a limit below every row's leanest sum, the verdict (bounds
    checked by brute force); above it, the leanest plan, which fits. Neither builds the whole
    problem's working form; with time left, it is built and searched."""
    chain = chain_of(_tied_does_not_fit(seed, 0.0))
    built = []
    real = graph_search.build_work
    monkeypatch.setattr(graph_search, "build_work",
                        lambda p, *a: built.append(p.groups) or real(p, *a))
    tight = _tied_does_not_fit(seed, -0.5)
    with pytest.raises(Infeasible) as caught:
        periodic_search.solve_restricted(tight, chain, Clock(0.0), 1e-6, (0, 0, 0), None)
    least = min(_peaks(tight))
    assert caught.value.min_peak <= least + 1e-9 <= caught.value.found_peak + 2e-9
    roomy = _tied_does_not_fit(seed, 0.5)
    answer = periodic_search.solve_restricted(roomy, chain, Clock(0.0), 1e-6, (0, 0, 0), None)
    assert answer.peak_memory <= roomy.memory_limit
    assert answer.status is SolveStatus.TIME_LIMIT
    assert all(groups is not None for groups in built)  # only the tied problems were built
    answer = periodic_search.solve_restricted(roomy, chain, Clock(60.0), 1e-6, (0, 0, 0), None)
    assert answer.peak_memory <= roomy.memory_limit
    assert any(groups is None for groups in built)  # with time left, the whole was searched


def test_no_time_to_build_and_a_leanest_plan_that_does_not_fit_is_no_plan(monkeypatch) -> None:
    """Every row's leanest sum fits but the leanest plan does not (each row wants another
    option of node 0): no proof either way, so no verdict, and no build without the time."""
    rows = [[(0, np.array([1.0, 5.0]))], [(0, np.array([5.0, 1.0]))]]
    whole = ChoiceProblem(node_costs=[np.zeros(2)], liveness=rows, memory_limit=3.0)
    tied = Infeasible(min_peak=5.0, limit=3.0)
    monkeypatch.setattr(graph_search, "build_work", lambda *a: pytest.fail("built"))
    with pytest.raises(NoSolutionError):
        solve_untied(whole, tied, Clock(0.0), 1e-6, (1, 2, 0), None)
    monkeypatch.setattr(untied, "BUILD_SECONDS_PER_TERM", 3600.0)  # an hour a term
    with pytest.raises(NoSolutionError):
        solve_untied(whole, tied, Clock(60.0), 1e-6, (1, 2, 0), None)
