"""The periodic search's first look (``periodic_close.first_look_target``) against
exhaustive search.

An exact periodic LP that splits a node of the rest or of a distinct block gets a partial MIP
against a threshold ``T`` a little above its bound before any plan is polished. ``solver.exact``
enumerates every assignment of the whole problem and shares no code with the aggregation, the
LP or the MIP: the MIP's bound never exceeds the true optimum, whatever ``T``, and a plan the
search calls optimal costs exactly the true optimum, whether the first look proved it or the
polish and the MIP after it did.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solver.periodic_search as periodic_search
from solver import ChoiceProblem, solve
from solver.exact import exhaustive
from solver.periodic import expand
from solver.periodic_close import close_gap, first_look_target, kept_after_fixing
from tests.solver.test_periodic_close import frustrated_chain, lp_and_duals, overlap_chain
from tests.support.bracket import assert_bracketed


def _small(problem) -> bool:
    return float(np.prod(problem.sizes, dtype=float)) <= 200_000


def random_frustrated_chain(seed: int, layers: int, options: int) -> ChoiceProblem:
    """``frustrated_chain`` with random prices: three rest nodes and block 0's node joined
    pairwise by edges that charge 4 more when both ends take the same option, so the LP
    likes to split them (it is fractional there: the partial MIP's nodes), while the blocks
    chain through one random matrix."""
    rng = np.random.default_rng(seed)

    def matrix() -> np.ndarray:
        return rng.integers(0, 4, size=(options, options)).astype(float)

    first = 3
    costs = [rng.integers(0, 3, size=options).astype(float) for _ in range(3)]
    block_cost = rng.integers(0, 3, size=options).astype(float)
    costs += [block_cost for _ in range(layers)]
    clique = (0, 1, 2, first)
    edges = [(a, b, matrix() + 4 * np.eye(options)) for i, a in enumerate(clique)
             for b in clique[i + 1:]]
    chained = matrix()
    edges += [(first + k - 1, first + k, chained) for k in range(1, layers)]
    return ChoiceProblem(node_costs=costs, edges=edges,
                         blocks=tuple((first + k,) for k in range(layers)))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 6), options=st.integers(2, 3),
       share=st.sampled_from([0.3, 0.5, 0.8]), frustrated=st.booleans())
def test_first_look_bound_never_exceeds_the_optimum(seed, layers, options, share,
                                                     frustrated) -> None:
    problem = (random_frustrated_chain if frustrated else overlap_chain)(seed, layers, options)
    if not _small(problem):
        return
    _, best = exhaustive(problem)
    _, agg, lp, answer = lp_and_duals(problem)
    target = first_look_target(lp, agg, answer.duals, share)
    if target is None:
        return
    assert math.isfinite(target) and target >= answer.bound
    assert kept_after_fixing(lp, agg, answer.duals, target) <= int(lp.form.num_vars * share)
    closed = close_gap(lp, agg, answer.duals, target, None, 0.0)
    assert closed.bound <= best + 1e-9
    assert closed.bound <= target
    if best <= target * (1 - 1e-9) - 1e-9:  # the optimum's image is in the MIP
        assert closed.x is not None


class _Spy:
    """Counts first looks, and those after which the search needed no polish."""

    def __init__(self, monkeypatch) -> None:
        self.looks = self.proven = 0
        original = periodic_search._Search.first_look

        def first_look(search, agg, lp, ends, relaxed) -> None:
            before = search.bound
            original(search, agg, lp, ends, relaxed)
            if search.bound != before or search.best is not None:
                self.looks += 1
                self.proven += search.done(search.gap)

        monkeypatch.setattr(periodic_search._Search, "first_look", first_look)


def test_solve_with_first_looks_is_bracketed_by_the_true_optimum(monkeypatch) -> None:
    """Fixing on LPs this small keeps more than the default share; a larger one makes the
    first look run on them, and every answer still brackets the exhaustive optimum."""
    import solver.periodic_close as periodic_close

    spy = _Spy(monkeypatch)
    monkeypatch.setattr(periodic_close, "FIRST_LOOK_GAP", 1.0)  # integer prices: gaps of ~1
    monkeypatch.setattr(periodic_search, "first_look_target",
                        lambda lp, agg, duals: first_look_target(lp, agg, duals, 0.8))
    checked = 0
    for seed in range(40):
        problem = random_frustrated_chain(seed, 4 + seed % 3, 3)
        if not _small(problem):
            continue
        _, best = exhaustive(problem)
        answer = solve(problem)
        assert_bracketed(problem, answer, best)
        checked += 1
    assert checked >= 20
    assert spy.looks > 0  # the first look ran on some of them
    assert spy.proven > 0  # and proved some plans optimal on its own


@pytest.mark.parametrize("layers", [4, 9])
def test_first_look_below_the_optimum_proves_its_threshold(layers) -> None:
    """The frustrated cycle: LP bound 0, optimum 2 (checked by enumeration). A partial MIP
    against a threshold below 2 proves the threshold and no plan below it; the search still
    ends at the optimum."""
    problem = frustrated_chain(layers)
    _, best = exhaustive(problem)
    assert best == 2.0
    chain, agg, lp, answer = lp_and_duals(problem)
    closed = close_gap(lp, agg, answer.duals, 1.5, None, 0.0)
    assert closed.bound == 1.5  # proven: T, below the optimum
    if closed.x is not None:  # a point of the MIP, whose representative may be fractional
        plan = expand(chain, agg, lp.lift(closed.x), problem.num_nodes)
        assert problem.evaluate(plan) >= best
    solved = solve(problem)
    assert solved.optimal and solved.objective == 2.0
