"""The bound-only periodic LP (``solver.periodic_bound``), checked against exhaustive search.

Small random chains go through both roads of ``chain_bound``: the dual simplex (their size)
and PDLP with adaptive restarts (forced by lowering the size PDLP starts at), the road of
llama3.1-405b's priced LPs. The bound must never exceed the true optimum (``solver.exact``
shares no code with it), and on memory-priced chains the Lagrangian bound ``bound(λ) − λ·B``
must never exceed the constrained optimum.
"""

from __future__ import annotations

import math

import pytest

from solver import ChoiceProblem, periodic_bound
from solver.clock import Clock
from solver.exact import exhaustive
from solver.memory_price import _PriceSearch, priced_row
from solver.periodic import find_chain
from solver.periodic_bound import chain_bound
from tests.solver.test_memory_price import small_optimum, with_peak_rows
from tests.solver.test_periodic import chain_problem

CASES = [(seed, layers, per_block) for seed in range(8) for layers, per_block in
         ((5, 1), (7, 1), (6, 2))]


@pytest.mark.parametrize("pdlp", [False, True])
@pytest.mark.parametrize(("seed", "layers", "per_block"), CASES)
def test_bounds_never_exceed_the_optimum(seed, layers, per_block, pdlp, monkeypatch) -> None:
    if pdlp:
        monkeypatch.setattr(periodic_bound, "PDLP_MIN_VARS", 0)
    problem = chain_problem(seed, layers, per_block, options=3, rest=1)
    chain = find_chain(problem)
    assert chain is not None
    _, best = exhaustive(problem)
    found = chain_bound(problem, chain, Clock(None), 1e-6)
    assert math.isfinite(found.bound)
    assert found.bound <= best + 1e-9
    assert (found.iterations > 0) == pdlp


def test_pdlp_stops_at_the_target_and_its_cap(monkeypatch) -> None:
    monkeypatch.setattr(periodic_bound, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(periodic_bound, "LEG_ITERATIONS", 64)
    problem = chain_problem(7, 6, 2, options=3, rest=1)
    chain = find_chain(problem)
    assert chain is not None
    assert chain_bound(problem, chain, Clock(None), 1e-9, target=-math.inf).iterations == 0
    capped = chain_bound(problem, chain, Clock(None), 1e-9, max_iterations=100)
    assert 0 < capped.iterations <= 100


@pytest.mark.parametrize("price", [0.0, 0.1, 0.5, 2.0])
@pytest.mark.parametrize("slack", [0.0, 2.0, 5.0])
@pytest.mark.parametrize("seed", range(6))
def test_priced_bounds_minus_the_price_of_the_limit_bound_the_constrained_optimum(
        seed, slack, price, monkeypatch) -> None:
    monkeypatch.setattr(periodic_bound, "PDLP_MIN_VARS", 0)
    problem = with_peak_rows(chain_problem(seed, 5 + seed % 2, 1 + seed % 2, options=3,
                                           rest=1), seed, slack)
    best = small_optimum(problem, 300_000)
    if best is None:
        return
    chain = find_chain(ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                                     blocks=problem.blocks))
    assert chain is not None
    row = priced_row(problem, chain)
    assert row is not None
    search = _PriceSearch(problem, chain, row, Clock(None), 1e-6, None)
    found = chain_bound(search.priced(price), chain, Clock(None), 1e-6)
    assert math.isfinite(found.bound)
    assert found.bound - price * problem.memory_limit <= best + 1e-9
