"""The LP bound computed from duals: valid for any multipliers, tight at the optimal ones.

Independent truths: exhaustive search of the whole problem (the bound may never exceed its
optimum) and the dual simplex's own optimum (the crossover-free barrier's bound must match it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from solver import ChoiceProblem, solve
from solver.backends import highs
from solver.backends.formulation import build
from solver.compact import build_work, index_work
from solver.exact import exhaustive


def small_problem(seed: int) -> ChoiceProblem:
    rng = np.random.default_rng(seed)
    costs = [rng.integers(0, 9, size=3).astype(float) for _ in range(6)]
    edges = [(a, b, rng.integers(0, 9, size=(3, 3)).astype(float))
             for a in range(6) for b in range(a + 1, 6) if rng.random() < 0.5]
    return ChoiceProblem(node_costs=costs, edges=edges)


@pytest.mark.parametrize("seed", range(6))
def test_any_multipliers_give_a_bound_below_the_optimum(seed):
    problem = small_problem(seed)
    _, best = exhaustive(problem)
    form = build(index_work(build_work(problem)))
    rng = np.random.default_rng(seed)
    for scale in (0.0, 1.0, 10.0):
        duals = rng.normal(scale=scale, size=form.row_lo.size)
        assert highs.dual_bound(form, duals, 1.0) <= best + 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_barrier_without_crossover_matches_dual_simplex(seed, monkeypatch):
    problem = small_problem(seed)
    ix = index_work(build_work(problem))
    form = build(ix, flow=True)
    _, simplex_bound = highs.solve_lp(ix, form, None)
    monkeypatch.setattr(highs, "BARRIER_MIN_VARS", 0)
    x, barrier_bound = highs.solve_lp(ix, form, None)
    assert math.isfinite(simplex_bound)
    assert barrier_bound == pytest.approx(simplex_bound, rel=1e-6, abs=1e-6)
    assert barrier_bound <= simplex_bound + 1e-9 * max(1.0, abs(simplex_bound))
    assert x is not None and ix.evaluate(x) >= barrier_bound - 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_solve_through_the_barrier_is_exact(seed, monkeypatch):
    monkeypatch.setattr(highs, "BARRIER_MIN_VARS", 0)
    problem = small_problem(seed)
    _, best = exhaustive(problem)
    answer = solve(problem, backend="highs")
    assert answer.bound <= best + 1e-9
    assert answer.objective >= best - 1e-9
    if answer.optimal:
        assert answer.objective == pytest.approx(best, abs=1e-9)
