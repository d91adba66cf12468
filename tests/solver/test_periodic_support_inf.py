"""The support MIP of the periodic LP on edges that forbid pairs (inf entries, as a copy node
that must agree with its original has): an impossible pair gets no column, and the plan is
still the cheapest periodic plan, found by enumeration (``_best_periodic`` shares no code with
the LP)."""

from __future__ import annotations

import numpy as np
import pytest

from solver.periodic import aggregate, expand, find_chain, periodic_lp
from solver.periodic_close import support_plan
from solver.problem import ChoiceProblem
from tests.solver.test_periodic import chain_problem
from tests.solver.test_periodic_caps import _best_periodic


def _forbidding(seed: int) -> ChoiceProblem:
    """A chain problem whose every edge lets option 0 pair only with option 0."""
    problem = chain_problem(seed, layers=4, per_block=2, options=4, rest=2)
    made: dict[int, np.ndarray] = {}

    def forbid(matrix: np.ndarray) -> np.ndarray:
        if id(matrix) not in made:  # one array per original: the blocks stay identical
            out = np.array(matrix, dtype=float)
            out[0, 1:] = np.inf
            out[1:, 0] = np.inf
            made[id(matrix)] = out
        return made[id(matrix)]

    return ChoiceProblem(node_costs=problem.node_costs, blocks=problem.blocks,
                         edges=[(u, v, forbid(m)) for u, v, m in problem.edges])


@pytest.mark.parametrize("seed", (0, 2, 22, 33))  # each has flow-network edges
def test_support_mip_skips_impossible_pairs_and_finds_the_best_periodic_plan(seed) -> None:
    problem = _forbidding(seed)
    chain = find_chain(problem)
    agg = aggregate(problem, chain)
    lp = periodic_lp(agg)
    assert lp.form.flow_maps  # the case the fix is for: a network with unreachable pairs
    values = np.zeros(lp.form.num_vars)
    for a, b in zip(lp.form.offsets[:-1], lp.form.offsets[1:], strict=True):
        values[a:b] = 1.0 / (b - a)  # every option on the support, impossible pairs included
    x = support_plan(lp, agg, values, None, 0.0)
    assert x is not None
    plan = expand(chain, agg, lp.lift(x), problem.num_nodes)
    assert problem.evaluate(plan) == pytest.approx(_best_periodic(problem, chain), abs=1e-9)
