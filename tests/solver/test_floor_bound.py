"""``solver.api.floor_bound``: each node's, edge's and window's cheapest entry, a bound of
every plan that needs no search, and the bound a solve cut short before any LP keeps.

Checked against exhaustive search (``solver.exact``) on every road; the clock expires before
the solve starts (``tests.solver.test_clock``), nothing is timed.
"""

from __future__ import annotations

import pytest

import solver.api as api
from solver import solve
from solver.errors import Infeasible
from solver.exact import exhaustive
from tests.solver.test_clock import _Expired
from tests.solver.test_incumbent import ROADS, _problems


@pytest.mark.parametrize("road", ROADS)
@pytest.mark.parametrize("seed", range(6))
def test_the_floor_bounds_every_plan_and_lifts_a_bound_cut_short(road, seed,
                                                                 monkeypatch) -> None:
    """``floor_bound`` (each node's, edge's and window's cheapest) is below the exhaustive
    optimum; a solve cut short before any LP keeps at least it as its bound."""
    problem = _problems(seed)[road]
    try:
        _, best = exhaustive(problem)
    except Infeasible:
        pytest.skip("no plan fits this instance")
    floor = api.floor_bound(problem)
    assert floor <= best + 1e-9
    monkeypatch.setattr(api, "Clock", _Expired)
    answer = solve(problem, time_limit=3600.0)
    assert answer.bound <= best + 1e-9
    if not answer.optimal:
        assert answer.bound >= min(floor, answer.objective) - 1e-9
