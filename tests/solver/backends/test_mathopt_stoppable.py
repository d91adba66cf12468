"""``mathopt.run_stoppable``: the barrier in a forked child, killed at its deadline."""

from __future__ import annotations

import time

import pytest

from solver.backends import mathopt, simplex
from solver.backends.formulation import build
from solver.compact import build_work, index_work
from solver.exact import exhaustive
from tests.solver.backends.test_lp_bound import small_problem


def test_a_solve_that_ignores_its_limit_is_stopped_at_it(monkeypatch):
    """A solver that never returns (as HiGHS' barrier, which checks no limit): the call
    returns ``None`` at the limit plus the grace, not when the solver would have ended."""
    monkeypatch.setattr(mathopt, "run", lambda *a: time.sleep(30.0))
    monkeypatch.setattr(mathopt, "KILL_GRACE_S", 0.2)
    start = time.perf_counter()
    assert mathopt.run_stoppable(None, "HIGHS", None, None, 0.3) is None
    assert time.perf_counter() - start < 10.0


def test_a_child_that_dies_without_an_answer_gives_none(monkeypatch):
    def die(*args):
        raise SystemExit(3)

    monkeypatch.setattr(mathopt, "run", die)
    assert mathopt.run_stoppable(None, "HIGHS", None, None, 30.0) is None


@pytest.mark.parametrize("seed", range(3))
def test_the_stoppable_barrier_gives_the_lp_optimum_below_the_exhaustive_one(seed):
    """In the child, the barrier's answer comes back whole: its bound is the dual simplex's
    LP optimum (to its tolerances) and at most the exhaustive optimum."""
    problem = small_problem(seed)
    form = build(index_work(build_work(problem)), flow=True)
    _, best = exhaustive(problem)
    dual = simplex.solve_highs_lp(form, None, barrier=False)
    barrier = simplex.solve_highs_lp(form, 60.0, barrier=True)  # a limit: the forked road
    assert barrier.x is not None
    assert barrier.bound == pytest.approx(dual.bound, rel=1e-6, abs=1e-6)
    assert barrier.bound <= best + 1e-9
