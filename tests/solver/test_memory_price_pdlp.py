"""The memory price on the PDLP road, forced on small chains and checked by exhaustive search.

llama3.1-405b's priced LPs are PDLP's (``PDLP_MIN_VARS`` variables and up): its probes stop
after the LP with one distinct end block (``solve_periodic(probe=True)``) and its last look at
the bound is PDLP with adaptive restarts (``solver.periodic_bound``). Lowering the size PDLP
starts at sends small random chains down the same road, where ``solver.exact`` (no code shared)
says what is true: the bound never exceeds the optimum, the plan fits, and a plan called
optimal is the optimum.
"""

from __future__ import annotations

import numpy as np
import pytest

from solver import ChoiceProblem, Infeasible, periodic_bound, periodic_search, solve
from solver.backends import lp
from solver.exact import exhaustive
from tests.solver.test_memory_price import with_peak_rows
from tests.solver.test_periodic import chain_problem


@pytest.mark.parametrize("slack", [0.0, 2.0, 5.0])
@pytest.mark.parametrize("seed", range(10))
def test_priced_chain_on_the_pdlp_road_keeps_a_true_bound_and_fits(seed, slack, monkeypatch
                                                                   ) -> None:
    for module in (lp, periodic_search, periodic_bound):
        monkeypatch.setattr(module, "PDLP_MIN_VARS", 0)
    problem = with_peak_rows(chain_problem(seed, 5 + seed % 3, 1 + seed % 2, options=3,
                                           rest=1), seed, slack)
    if np.prod(problem.sizes, dtype=float) > 300_000:
        return
    try:
        _, best = exhaustive(problem)
    except Infeasible:
        return
    free = solve(ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                               blocks=problem.blocks))
    answer = solve(problem, known_bound=free.bound, free_choices=free.choices)
    assert answer.bound <= best + 1e-9
    assert answer.objective >= best - 1e-9
    assert answer.peak_memory <= problem.memory_limit + 1e-9
    if answer.optimal:
        assert answer.objective == pytest.approx(best, abs=1e-9)
