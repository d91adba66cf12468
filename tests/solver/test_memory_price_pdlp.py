"""The memory price on the PDLP road, forced on small chains and checked by exhaustive search.

llama3.1-405b's priced LPs are PDLP's (``PDLP_MIN_VARS`` variables and up): its probes stop
after the LP with one distinct end block (``solve_periodic(probe=True)``) and its last look at
the bound is PDLP with adaptive restarts (``solver.periodic_bound``). Lowering the size PDLP
starts at sends small random chains down the same road, where ``solver.exact`` (no code shared)
says what is true: the bound never exceeds the optimum, the plan fits, and a plan called
optimal is the optimum.
"""

from __future__ import annotations

import pytest

from solver import periodic_bound, periodic_search
from solver.backends import lp
from tests.solver.test_memory_price import check_from_the_free_optimum, with_peak_rows
from tests.solver.test_periodic import chain_problem


@pytest.mark.parametrize("slack", [0.0, 2.0, 5.0])
@pytest.mark.parametrize("seed", range(10))
def test_priced_chain_on_the_pdlp_road_keeps_a_true_bound_and_fits(seed, slack, monkeypatch
                                                                   ) -> None:
    for module in (lp, periodic_search, periodic_bound):
        monkeypatch.setattr(module, "PDLP_MIN_VARS", 0)
    check_from_the_free_optimum(with_peak_rows(chain_problem(seed, 5 + seed % 3, 1 + seed % 2,
                                                             options=3, rest=1), seed, slack),
                                300_000)


@pytest.mark.parametrize("seed", range(40))
def test_exploring_probes_cap_pdlp_and_the_answer_stays_true(seed, monkeypatch) -> None:
    """The probes before the first cut (the ceiling and the growing prices) run PDLP to
    ``EXPLORE_PDLP_ITERATIONS`` at most, the cuts to PDLP's own cap; with the exploring cap
    cut to a few iterations (their LPs stop far from converged) the bound is still below the
    exhaustive optimum and the plan fits."""
    from solver import memory_price

    for module in (lp, periodic_search, periodic_bound):
        monkeypatch.setattr(module, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(memory_price, "EXPLORE_PDLP_ITERATIONS", 8)
    caps: list[tuple[float, int | None]] = []
    real_probe, real_answers = memory_price._PriceSearch.probe, periodic_search.lp_answers

    def probe(self, price, pdlp_iterations=None):
        caps.append((price, pdlp_iterations))
        return real_probe(self, price, pdlp_iterations)

    iterations: list[int | None] = []

    def answers(*args, max_iterations=None, **kwargs):
        iterations.append(max_iterations)
        return real_answers(*args, max_iterations=max_iterations, **kwargs)

    monkeypatch.setattr(memory_price._PriceSearch, "probe", probe)
    monkeypatch.setattr(periodic_search, "lp_answers", answers)
    check_from_the_free_optimum(with_peak_rows(chain_problem(seed, 5 + seed % 3, 1 + seed % 2,
                                                             options=3, rest=1), seed,
                                               (0.0, 2.0, 5.0)[seed % 3]),
                                300_000)
    if not caps:
        return  # skipped: too large for exhaustive search, or nothing fits
    assert caps[0][1] == 8  # the ceiling explores
    growing = [cap for _, cap in caps[1:]]
    # the growing prices explore until a plan fits; cuts (if any) come after, uncapped
    assert growing == sorted(growing, key=lambda cap: cap is None)
    assert set(iterations) <= {8, None} and (8 in iterations)
