"""``solve(..., incumbent=)``: a plan the caller already has is never beaten by a dearer
answer, and once the time is up it is the answer instead of a first plan found late.

Checked against exhaustive search of the whole problem (``solver.exact``, which shares no
code with the roads under test) on every road: a plain graph, a chain of identical layers
(periodic), a chain with windows (windowed rounds of the periodic road) and a memory-bound
chain (the memory price). A slow solve is made by its clock (``tests.solver.test_clock``):
nothing here is timed.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import solver.api as api
import solver.periodic_search as periodic_search
from solver import ChoiceProblem, solve
from solver.errors import Infeasible
from solver.exact import exhaustive
from solver.solution import SolveStatus
from tests.solver.test_clock import _Expired
from tests.solver.test_periodic import chain_problem
from tests.solver.test_periodic_close import overlap_chain


def _problems(seed: int) -> dict[str, ChoiceProblem]:
    rng = np.random.default_rng(seed)
    graph = ChoiceProblem(
        node_costs=[rng.integers(0, 9, size=3).astype(float) for _ in range(5)],
        edges=[(u, v, rng.integers(0, 9, size=(3, 3)).astype(float))
               for u, v in itertools.combinations(range(5), 2) if rng.random() < 0.5])
    return {"graph": graph, "chain": chain_problem(seed, 5, 2, 3, 2),
            "windows": overlap_chain(seed, 5, 2),
            "memory": chain_problem(seed, 5, 1, 3, 2, memory=True)}


def _plans(problem: ChoiceProblem, seed: int) -> list[tuple[int, ...]]:
    """Up to 200 random plans that fit and cost something finite, dearest first."""
    rng = np.random.default_rng(seed)
    found = set()
    for _ in range(200):
        plan = tuple(int(rng.integers(n)) for n in problem.sizes)
        peak = problem.peak_memory(plan)
        if np.isfinite(problem.evaluate(plan)) and (
                problem.memory_limit is None or peak is None or peak <= problem.memory_limit):
            found.add(plan)
    if not found:
        pytest.skip("no random plan fits this instance")  # the generator's, not the solver's
    return sorted(found, key=lambda plan: (-problem.evaluate(plan), plan))


ROADS = ["graph", "chain", "windows", "memory"]


@pytest.mark.parametrize("road", ROADS)
@pytest.mark.parametrize("seed", range(6))
def test_given_a_dear_plan_the_search_still_finds_the_optimum(road, seed) -> None:
    """The incumbent does not stop the search: with time, the answer is no dearer than a
    solve without it, and optimal wherever that one is."""
    problem = _problems(seed)[road]
    try:
        _, best = exhaustive(problem)
    except Infeasible:
        pytest.skip("no plan fits this instance")  # the generator's, not the solver's
    answer, without = solve(problem, incumbent=_plans(problem, seed)[0]), solve(problem)
    assert best - 1e-9 <= answer.objective <= without.objective + 1e-9
    assert answer.bound <= best + 1e-9
    if without.optimal:  # the memory and window roads leave a gap on some of these toys
        assert answer.optimal and answer.objective == pytest.approx(best, abs=1e-9)


@pytest.mark.parametrize("road", ROADS)
@pytest.mark.parametrize("seed", range(6))
def test_out_of_time_the_answer_is_never_dearer_than_the_incumbent(road, seed,
                                                                   monkeypatch) -> None:
    """No time at all: no LP, price search or tied search starts late, and the answer is
    the incumbent or a cheaper plan, with a bound that holds."""
    problem = _problems(seed)[road]
    try:
        _, best = exhaustive(problem)
    except Infeasible:
        pytest.skip("no plan fits this instance")
    plans = _plans(problem, seed)
    incumbent = plans[len(plans) // 2]  # a middling plan
    monkeypatch.setattr(api, "Clock", _Expired)

    def no_late_search(*args, **kwargs):
        raise AssertionError("the tied search started after the deadline")

    monkeypatch.setattr(periodic_search, "solve_restricted", no_late_search)
    monkeypatch.setattr(api, "solve_restricted", no_late_search)
    answer = solve(problem, time_limit=3600.0, incumbent=incumbent)
    assert answer.objective <= problem.evaluate(incumbent) + 1e-12
    assert answer.objective == pytest.approx(problem.evaluate(answer.choices))
    assert answer.bound <= best + 1e-9
    peak = problem.peak_memory(answer.choices)
    assert problem.memory_limit is None or peak is None or peak <= problem.memory_limit
    if not answer.optimal:
        assert answer.status in (SolveStatus.TIME_LIMIT, SolveStatus.FEASIBLE)
    if road != "graph":  # a chain's search, out of time, starts nothing: nothing ran
        assert [name for name, _ in answer.stats.seconds
                if name.startswith(("periodic_", "priced_", "restricted_"))] == []


def test_a_plan_that_is_not_one_is_refused_with_what_is_wrong() -> None:
    problem = ChoiceProblem(node_costs=[[1.0, np.inf], [0.0, 1.0]],
                            edges=[(0, 1, np.zeros((2, 2)))],
                            node_memory=[[1.0, 1.0], [1.0, 5.0]], memory_limit=3.0)
    with pytest.raises(ValueError, match="2 nodes"):
        solve(problem, incumbent=(0,))
    with pytest.raises(ValueError, match="out of its range"):
        solve(problem, incumbent=(0, 2))
    with pytest.raises(ValueError, match="costs inf"):
        solve(problem, incumbent=(1, 0))
    with pytest.raises(ValueError, match="above the memory limit"):
        solve(problem, incumbent=(0, 1))
    assert solve(problem, incumbent=(0, 0)).choices == (0, 0)


@pytest.mark.parametrize("seed", range(6))
def test_a_memory_price_probe_out_of_time_starts_from_the_callers_plan(seed,
                                                                      monkeypatch) -> None:
    """Every probe of the memory price search gets no time at all, and its LP no answer
    (as PDLP stopped at 0 iterations): without a plan of its own, each takes the caller's
    incumbent (or the last probe's plan) instead of running the tied search late for a
    first plan, and the answer still holds against exhaustive search."""
    import solver.memory_price as memory_price
    from solver.backends.lp_answer import LPAnswer

    problem = _problems(seed)["memory"]
    try:
        _, best = exhaustive(problem)
    except Infeasible:
        pytest.skip("no plan fits this instance")
    plans = _plans(problem, seed)
    incumbent = plans[len(plans) // 2]

    def no_late_search(*args, **kwargs):
        raise AssertionError("a probe ran the tied search after its deadline")

    monkeypatch.setattr(memory_price, "Clock", _Expired)
    monkeypatch.setattr(periodic_search, "lp_answers",
                        lambda *args, **kwargs: iter([LPAnswer(None, -math.inf)]))
    monkeypatch.setattr(periodic_search, "solve_restricted", no_late_search)
    answer = solve(problem, incumbent=incumbent)
    assert answer.objective <= problem.evaluate(incumbent) + 1e-12
    assert best - 1e-9 <= answer.objective and answer.bound <= best + 1e-9
    assert problem.peak_memory(answer.choices) <= problem.memory_limit

