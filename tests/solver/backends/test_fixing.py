"""Reduced-cost fixing and the support plan (``solver.backends.fixing``) against exhaustive
search: ``solver.exact`` enumerates every assignment and shares no code with the LP or the
MIP, so a bound above the true optimum, or a plan below it, would show."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import ChoiceProblem, solve
from solver.backends.fixing import fix_and_solve, neighbourhood_plan, support_plan
from solver.backends.formulation import build
from solver.backends.lp import solve_lp
from solver.compact import build_work, index_work
from solver.exact import exhaustive


def frustrated(seed: int, nodes: int, options: int) -> ChoiceProblem:
    """Random node costs and a dense graph of random "differ"-leaning edges (cheaper when the
    ends take different options), on which the local-polytope LP is often fractional."""
    rng = np.random.default_rng(seed)
    costs = [rng.integers(0, 4, size=options).astype(float) for _ in range(nodes)]
    edges = []
    for u in range(nodes):
        for v in range(u + 1, nodes):
            if rng.random() < 0.7:
                same = np.eye(options) * rng.integers(2, 9)
                edges.append((u, v, same + rng.integers(0, 3, size=(options, options))))
    return ChoiceProblem(node_costs=costs, edges=edges)


def _lp(problem: ChoiceProblem):
    ix = index_work(build_work(problem))  # no reductions: the whole problem
    form = build(ix, flow=True)
    return ix, form, solve_lp(form, None)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), nodes=st.integers(4, 7), options=st.integers(2, 3),
       slack=st.sampled_from([0, 1, 3]))
def test_fixing_bound_never_exceeds_the_optimum(seed, nodes, options, slack) -> None:
    problem = frustrated(seed, nodes, options)
    choices, best = exhaustive(problem)
    ix, form, answer = _lp(problem)
    assert answer.duals is not None and answer.values is not None
    # an incumbent at or above the optimum: the optimum itself, or a worse plan
    rng = np.random.default_rng(seed)
    incumbent = np.array(choices) if slack == 0 else rng.integers(0, options, size=nodes)
    fixed = fix_and_solve(ix, form, answer.duals, incumbent, None, 0.0)
    assert fixed.bound <= best + 1e-9
    assert fixed.x is not None and ix.evaluate(fixed.x) >= best - 1e-9
    if fixed.optimal:  # proven: the plan it returns is an optimum
        assert ix.evaluate(fixed.x) == pytest.approx(best, abs=1e-9)
        assert fixed.bound == pytest.approx(best, abs=1e-6)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), nodes=st.integers(4, 7), options=st.integers(2, 3))
def test_support_plan_is_a_plan(seed, nodes, options) -> None:
    problem = frustrated(seed, nodes, options)
    _, best = exhaustive(problem)
    ix, form, answer = _lp(problem)
    plan = support_plan(ix, form, answer.values, [answer.x], None, 0.0)
    assert plan is not None
    assert ix.evaluate(plan) >= best - 1e-9
    assert ix.evaluate(plan) <= ix.evaluate(answer.x) + 1e-9  # it may keep the rounding


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), nodes=st.integers(4, 7), options=st.integers(2, 3))
def test_neighbourhood_plan_is_a_plan_no_worse(seed, nodes, options) -> None:
    problem = frustrated(seed, nodes, options)
    _, best = exhaustive(problem)
    ix, form, answer = _lp(problem)
    worse = np.random.default_rng(seed).integers(0, options, size=nodes)
    plan = neighbourhood_plan(ix, form, answer.duals, worse, None, 0.0)
    assert best - 1e-9 <= ix.evaluate(plan) <= ix.evaluate(worse) + 1e-9


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), nodes=st.integers(4, 7), options=st.integers(2, 3))
def test_highs_with_fixing_is_exact(seed, nodes, options) -> None:
    problem = frustrated(seed, nodes, options)
    _, best = exhaustive(problem)
    answer = solve(problem, backend="highs", reductions=False)
    assert answer.bound <= best + 1e-9
    assert answer.optimal
    assert answer.objective == pytest.approx(best, abs=1e-9)


def test_the_generator_makes_fractional_lps() -> None:
    """The checks above exercise fixing only where the LP is fractional: most of these are."""
    fractional = 0
    for seed in range(20):
        problem = frustrated(seed, 6, 3)
        _, best = exhaustive(problem)
        _, _, answer = _lp(problem)
        fractional += answer.bound < best - 1e-6
    assert fractional >= 5
