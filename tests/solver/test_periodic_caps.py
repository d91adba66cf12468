"""The periodic LP's last-tied-block rows (``x_after_copy ≤ w·x_I``) against exhaustive search.

Every plan of the whole problem maps onto a point of the periodic LP that satisfies the rows
(the block after the tied run copies one tied block's choice), so the LP with them must stay
a lower bound of the true optimum (``solver.exact`` enumerates the whole problem and shares no
code with the aggregation); and they must cut something off, or they are dead weight.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.backends.lp import solve_lp
from solver.exact import exhaustive
from solver.periodic import aggregate, expand, find_chain, periodic_lp
from solver.periodic_close import support_plan
from tests.solver.test_periodic import chain_problem


def _bounds(problem) -> tuple[float, float]:
    """(LP bound with the rows, LP bound without them), one distinct block at each end."""
    chain = find_chain(problem)
    assert chain is not None
    agg = aggregate(problem, chain)
    with_caps = solve_lp(periodic_lp(agg).form, None).bound
    without = solve_lp(periodic_lp(dataclasses.replace(agg, caps=())).form, None).bound
    return with_caps, without


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 6), per_block=st.integers(1, 2),
       options=st.integers(2, 3), rest=st.integers(1, 2), own_last_link=st.booleans())
def test_capped_lp_is_a_bound_of_the_whole_problem(seed, layers, per_block, options, rest,
                                                   own_last_link) -> None:
    problem = chain_problem(seed, layers, per_block, options, rest,
                            own_last_link=own_last_link)
    if np.prod(problem.sizes, dtype=float) > 600_000:
        return
    _, best = exhaustive(problem)
    with_caps, without = _bounds(problem)
    assert with_caps <= best + 1e-9
    assert with_caps >= without - 1e-9  # rows only added


def test_caps_close_a_gap_the_shared_link_leaves_open() -> None:
    # found by a search over seeds: without the rows the LP prices the first layer's
    # change of strategy at no layer boundary; with them its bound is the true optimum
    closed = 0
    for seed, layers in ((37, 4), (78, 4), (78, 5)):
        problem = chain_problem(seed, layers, per_block=2, options=3, rest=2)
        _, best = exhaustive(problem)
        with_caps, without = _bounds(problem)
        assert without < best - 0.5
        closed += abs(with_caps - best) < 1e-9
    assert closed == 3


def _best_periodic(problem, chain) -> float:
    """The cheapest plan whose interior blocks all take the same choices, by enumeration."""
    interior = chain.blocks[1:-1]
    free = [*chain.rest, *chain.blocks[0], *chain.blocks[-1], *interior[0]]
    best = np.inf
    for picked in itertools.product(*(range(problem.sizes[i]) for i in free)):
        plan = [0] * problem.num_nodes
        for node, option in zip(free, picked, strict=True):
            plan[node] = option
        for block in interior[1:]:
            for r, node in enumerate(block):
                plan[node] = plan[interior[0][r]]
        best = min(best, problem.evaluate(tuple(plan)))
    return best


@pytest.mark.parametrize("seed", (16, 17, 21, 37, 73, 78))  # where the rows cut (above)
def test_support_mip_on_every_option_is_the_best_periodic_plan(seed) -> None:
    """With every option on the support, the MIP with the representative integral prices a
    periodic plan exactly (the rows force the copy after the run to the representative's
    choice), so its plan is the cheapest periodic plan, found here by enumeration."""
    problem = chain_problem(seed, layers=4, per_block=2, options=3, rest=2)
    chain = find_chain(problem)
    agg = aggregate(problem, chain)
    lp = periodic_lp(agg)
    values = np.zeros(lp.form.num_vars)
    for a, b in zip(lp.form.offsets[:-1], lp.form.offsets[1:], strict=True):
        values[a:b] = 1.0 / (b - a)
    x = support_plan(lp, agg, values, None, 0.0)
    assert x is not None
    plan = expand(chain, agg, lp.lift(x), problem.num_nodes)
    assert problem.evaluate(plan) == pytest.approx(_best_periodic(problem, chain), abs=1e-9)
