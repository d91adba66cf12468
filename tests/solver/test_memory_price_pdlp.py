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
