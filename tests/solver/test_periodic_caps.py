"""The periodic LP's last-tied-block rows (``x_after_copy ≤ w·x_I``) against exhaustive search.

Every plan of the whole problem maps onto a point of the periodic LP that satisfies the rows
(the block after the tied run copies one tied block's choice), so the LP with them must stay
a lower bound of the true optimum (``solver.exact`` enumerates the whole problem and shares no
code with the aggregation); and they must cut something off, or they are dead weight.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.backends.lp import solve_lp
from solver.exact import exhaustive
from solver.periodic import aggregate, find_chain, periodic_lp
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
