"""``periodic_close.neighbourhood_plan``: the periodic MIP near the LP's reduced costs.

Checked against enumeration (``_best_periodic``, no shared code with the LP): with an
incumbent so far above the bound that no variable's reduced cost reaches the neighbourhood's
edge, the MIP is over every option with every node integral, so its plan is the cheapest
periodic plan; with the incumbent at the exhaustive optimum its plan, when it finds one, is a
plan of the whole problem, so it costs at least that optimum.
"""

from __future__ import annotations

import numpy as np
import pytest

from solver.backends.lp import solve_lp
from solver.exact import exhaustive
from solver.periodic import aggregate, expand, find_chain, periodic_lp
from solver.periodic_close import (
    close_gap,
    kept_after_fixing,
    neighbourhood_plan,
    support_plan,
    threshold_keeping,
)
from tests.solver.test_periodic import chain_problem
from tests.solver.test_periodic_caps import _best_periodic

SEEDS = (16, 17, 21, 37, 73, 78, 3, 5)


def _lp(seed: int):
    problem = chain_problem(seed, layers=4, per_block=2, options=3, rest=2)
    chain = find_chain(problem)
    assert chain is not None
    agg = aggregate(problem, chain)
    lp = periodic_lp(agg)
    return problem, chain, agg, lp, solve_lp(lp.form, None)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_wide_neighbourhood_finds_the_best_periodic_plan(seed) -> None:
    problem, chain, agg, lp, answer = _lp(seed)
    assert answer.duals is not None
    far = answer.bound + 1e9
    x = neighbourhood_plan(lp, agg, answer.duals, far, None, 0.0)
    assert x is not None
    plan = expand(chain, agg, lp.lift(x), problem.num_nodes)
    assert problem.evaluate(plan) == pytest.approx(_best_periodic(problem, chain), abs=1e-9)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_narrow_neighbourhood_gives_a_plan_no_cheaper_than_the_optimum(seed) -> None:
    problem, chain, agg, lp, answer = _lp(seed)
    _, best = exhaustive(problem)
    assert answer.bound <= best + 1e-9
    x = neighbourhood_plan(lp, agg, answer.duals, best, None, 0.0)
    if x is None:
        return  # nothing near enough: no plan, which is allowed
    plan = expand(chain, agg, lp.lift(x), problem.num_nodes)
    assert np.isfinite(problem.evaluate(plan))
    assert problem.evaluate(plan) >= best - 1e-9


@pytest.mark.parametrize("seed", SEEDS)
def test_the_partial_mip_below_a_lower_threshold_still_bounds_the_optimum(seed) -> None:
    """Fixing against a threshold ``T`` below the plan's cost keeps at most the budget, and
    ``close_gap`` given ``T`` proves ``min(T, MIP bound)``: never above the exhaustive
    optimum, whatever the LP's duals (the LP's, then perturbed ones), over every budget."""
    problem, _, agg, lp, answer = _lp(seed)
    _, best = exhaustive(problem)
    rng = np.random.default_rng(seed)
    below = 0
    for duals in (answer.duals, answer.duals + rng.normal(scale=0.3, size=answer.duals.size)):
        for budget in range(lp.form.num_vars, 0, -3):
            threshold = threshold_keeping(lp, agg, duals, best, budget)
            if threshold is None:
                continue
            assert threshold <= best
            assert kept_after_fixing(lp, agg, duals, threshold) <= budget
            closed = close_gap(lp, agg, duals, threshold, None, 0.0)
            assert closed.bound <= best + 1e-9
            assert closed.bound <= threshold + 1e-9
            below += threshold < best
    assert below > 0  # some budget made the threshold bite


def test_the_support_plan_gives_up_at_its_deadline(monkeypatch) -> None:
    """Routing a wide support costs minutes on a 3-axis LP: past its time the support plan
    returns no plan rather than running on (here with no time at all)."""
    _, _, agg, lp, _ = _lp(SEEDS[0])
    values = np.full(lp.form.num_vars, 0.5)
    assert support_plan(lp, agg, values, None, 0.0) is not None
    assert support_plan(lp, agg, values, -1.0, 0.0) is None
