"""The periodic search's first look (``periodic_close.first_look_target`` and
``first_look_plan``) against exhaustive search.

An LP answer that splits a node of the rest or of a distinct block, and whose own plan misses
the gap, gets a MIP for the best periodic plan over the variables that reduced-cost fixing
against a threshold ``T`` a little above the LP bound keeps, then the partial MIP against that
plan for the proof. ``solver.exact`` and the brute force below enumerate plans of the whole
problem and share no code with the aggregation, the LP or the MIPs: the first look's plan is
the best periodic plan whenever one costs less than ``T``, fixing against ``T`` never loses a
plan cheaper than ``T``, and a plan the search calls optimal costs exactly the true optimum.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solver.periodic_close as periodic_close
import solver.periodic_search as periodic_search
from solver import ChoiceProblem, solve
from solver.exact import exhaustive
from solver.periodic import expand
from solver.periodic_close import (
    close_gap,
    first_look_plan,
    first_look_target,
    kept_after_fixing,
)
from tests.solver.test_periodic_caps import _best_periodic
from tests.solver.test_periodic_close import frustrated_chain, lp_and_duals, overlap_chain
from tests.support.bracket import assert_bracketed


def _small(problem: ChoiceProblem) -> bool:
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
def test_first_look_finds_the_best_periodic_plan_below_its_threshold(
        seed, layers, options, share, frustrated) -> None:
    problem = (random_frustrated_chain if frustrated else overlap_chain)(seed, layers, options)
    if not _small(problem):
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(periodic_close, "FIRST_LOOK_GAP", 1.0)  # integer prices: gaps of ~1
        _check_first_look(problem, share)


def _check_first_look(problem: ChoiceProblem, share: float) -> None:
    _, best = exhaustive(problem)
    chain, agg, lp, answer = lp_and_duals(problem)
    target = first_look_target(lp, agg, answer.duals, share)
    if target is None:
        return
    assert target >= answer.bound
    assert kept_after_fixing(lp, agg, answer.duals, target) <= int(lp.form.num_vars * share)
    periodic = _best_periodic(problem, chain)
    x = first_look_plan(lp, agg, answer.duals, target, None, 0.0)
    if periodic < target - 1e-6:  # that plan's image is among the variables kept
        assert x is not None
    if x is not None:
        value = problem.evaluate(expand(chain, agg, lp.lift(x), problem.num_nodes))
        assert value >= best - 1e-9
        if periodic < target - 1e-6:
            assert value == pytest.approx(periodic, abs=1e-9)
    closed = close_gap(lp, agg, answer.duals, target, None, 0.0)
    assert closed.bound <= best + 1e-9  # fixing against T never loses a cheaper plan


def test_solve_with_first_looks_is_bracketed_by_the_true_optimum(monkeypatch) -> None:
    """Fixing on LPs this small keeps more than the default share, and integer prices put the
    optimum far above the bound; a larger share and gap make the first look run on them, and
    every answer still brackets the exhaustive optimum."""
    monkeypatch.setattr(periodic_close, "FIRST_LOOK_GAP", 1.0)
    monkeypatch.setattr(periodic_search, "first_look_target",
                        lambda lp, agg, duals: first_look_target(lp, agg, duals, 0.8))
    looks, proven = [], []
    original = periodic_search._Search.first_look

    def first_look(search, agg, lp, ends, relaxed) -> None:
        calls = len(looks)
        done = search.done(search.gap)
        original(search, agg, lp, ends, relaxed)
        if len(looks) > calls:
            proven.append(not done and search.done(search.gap))

    def plan_spy(*args, **kwargs):
        looks.append(1)
        return first_look_plan(*args, **kwargs)

    monkeypatch.setattr(periodic_search._Search, "first_look", first_look)
    monkeypatch.setattr(periodic_search, "first_look_plan", plan_spy)
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
    assert looks  # the first look ran on some of them
    assert any(proven)  # and its plan was proven optimal on the spot on some


@pytest.mark.parametrize("layers", [4, 9])
def test_first_look_below_the_optimum(layers) -> None:
    """The frustrated cycle: LP bound 0, optimum 2 (checked by enumeration). Against a
    threshold below 2 the first look's MIP finds no plan below it (at best the optimum),
    the partial MIP proves the threshold, and the search still ends at the optimum."""
    problem = frustrated_chain(layers)
    _, best = exhaustive(problem)
    assert best == 2.0
    chain, agg, lp, answer = lp_and_duals(problem)
    x = first_look_plan(lp, agg, answer.duals, 1.5, None, 0.0)
    if x is not None:  # the best periodic plan on what fixing keeps, above the threshold
        assert problem.evaluate(expand(chain, agg, lp.lift(x), problem.num_nodes)) == 2.0
    assert close_gap(lp, agg, answer.duals, 1.5, None, 0.0).bound == 1.5
    solved = solve(problem)
    assert solved.optimal and solved.objective == 2.0
