"""The restricted exact search that spends the time a skipped model leaves
(``solver.neighbourhood``).

Oracles: exhaustive search (``solver.exact``) of small problems with binding memory rows: the
restriction's optimum, mapped back, is the best plan among the kept options (checked by
enumerating them), and a neighbourhood that keeps every option finds the true optimum; the
search never returns a plan dearer than it started from, nor one that does not fit.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from solver import graph_search, solve
from solver.backends import highs
from solver.clock import Clock
from solver.descent import descend
from solver.exact import exhaustive
from solver.neighbourhood import around, improve, restricted
from tests.solver.test_descent import _indexed, _leanest, _random_problem


def _best_among(ix, keep) -> float:
    """Brute force over every plan whose options are in ``keep``."""
    best = np.inf
    for choice in itertools.product(*keep):
        x = np.array(choice)
        if ix.fits(x):
            best = min(best, ix.evaluate(x))
    return best


@pytest.mark.parametrize("seed", range(16))
def test_the_restriction_prices_plans_as_the_problem_does(seed: int) -> None:
    ix = _indexed(_random_problem(seed, nodes=7))
    start = descend(ix, _leanest(ix))
    keep = around(ix, start, 2)
    assert all(start[i] in k for i, k in enumerate(keep))
    sub = restricted(ix, keep)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        local = np.array([rng.integers(len(k)) for k in keep])
        mapped = np.array([k[o] for k, o in zip(keep, local, strict=True)])
        assert sub.evaluate(local) == pytest.approx(ix.evaluate(mapped), rel=1e-12)
        assert sub.fits(local) == ix.fits(mapped)


@pytest.mark.parametrize("seed", range(16))
def test_the_search_never_loses_and_reaches_the_restricted_optimum(seed: int) -> None:
    ix = _indexed(_random_problem(seed, nodes=7))
    start = descend(ix, _leanest(ix))
    found = improve(ix, start, Clock(60.0), 1e-9)
    assert ix.fits(found)
    assert ix.evaluate(found) <= ix.evaluate(start)
    # the first neighbourhood's optimum (exhaustive over its options) bounds what it found
    assert ix.evaluate(found) <= _best_among(ix, around(ix, start, 3)) + 1e-9


@pytest.mark.parametrize("seed", range(10))
def test_a_neighbourhood_of_every_option_is_the_optimum(seed: int, monkeypatch) -> None:
    problem = _random_problem(seed, nodes=7)
    ix = _indexed(problem)
    monkeypatch.setattr("solver.neighbourhood.NEIGHBOURHOODS", (max(c.size for c in ix.costs),))
    found = improve(ix, _leanest(ix), Clock(60.0), 1e-9)
    _, optimum = exhaustive(problem)
    assert ix.evaluate(found) == pytest.approx(optimum, rel=1e-9)


def test_no_time_left_no_search(monkeypatch) -> None:
    ix = _indexed(_random_problem(0, nodes=7))
    start = descend(ix, _leanest(ix))

    def no_model(*args, **kwargs):
        raise AssertionError("a restricted model was solved with no time left")

    monkeypatch.setattr("solver.neighbourhood.solve_highs", no_model)
    assert np.array_equal(improve(ix, start, Clock(0.5), 1e-9), start)
    assert np.array_equal(improve(ix, start, Clock(None), 1e-9), start)


@pytest.mark.parametrize("seed", range(8))
def test_a_search_whose_model_was_skipped_spends_the_time_left(seed: int, monkeypatch) -> None:
    """The whole model is too large for the time left (its build estimate says so) but a
    restricted one is not: the answer is at least as good as the descended plan and, the
    neighbourhoods being small problems here, the optimum among the first one's options."""
    problem = _random_problem(seed, nodes=7, rows=0)
    whole_columns = highs._columns_at_most(_indexed(problem))
    real = highs.least_build_seconds

    def slow_whole(ix):  # the whole problem "takes" 100 s to build, any restriction 0
        return 100.0 if highs._columns_at_most(ix) >= whole_columns else real(ix)

    monkeypatch.setattr(highs, "least_build_seconds", slow_whole)
    monkeypatch.setattr(graph_search, "lagrange_dp", lambda ix, deadline: None)
    answer = solve(problem, time_limit=30.0, backend="auto", reductions=False)
    ix = _indexed(problem)
    cheapest = np.array([int(np.argmin(c)) for c in problem.node_costs])
    descended = descend(ix, cheapest)
    _, optimum = exhaustive(problem)
    assert optimum - 1e-9 <= answer.objective <= ix.evaluate(descended) + 1e-12
    assert answer.objective <= _best_among(ix, around(ix, descended, 3)) + 1e-9
