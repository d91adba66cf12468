"""The block mix's MIP against an exhaustive search over every mix of the two plans.

The oracle enumerates all ``2^units`` assignments of "this unit takes the cheap plan's
choices, or the fitting plan's" and scores each with ``ChoiceProblem.evaluate`` and
``peak_memory``; it shares nothing with the MIP's linearisation (per-unit coefficients, 2x2
tables between units, memory rows as per-unit deltas). Instances: random chains with
training-like peak rows, and chains whose options come in mirror pairs (two interchangeable
mesh axes: every plan has a mirror plan at the same cost and memory).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import ChoiceProblem, Infeasible
from solver.block_mix import best_mix
from solver.exact import exhaustive
from solver.periodic import find_chain
from tests.solver.test_memory_price import check_from_the_free_optimum, with_peak_rows
from tests.solver.test_periodic import chain_problem

MIRROR = np.array([0, 2, 1, 3])  # options R, S(a), S(b), S(ab): swapping axes a and b


def mirrored(problem: ChoiceProblem) -> ChoiceProblem:
    """``problem`` (4 options per node, liveness rows) made invariant under swapping options
    1 and 2 at every node at once: costs, edge tables and memory averaged with their mirror
    images."""
    costs = [(c + c[MIRROR]) / 2 for c in problem.node_costs]
    edges = [(u, v, (m + m[np.ix_(MIRROR, MIRROR)]) / 2) for u, v, m in problem.edges]
    rows = [tuple((n, (vec + vec[MIRROR]) / 2) for n, vec in row) for row in problem.liveness]

    def least(rows) -> float:
        return max(sum(float(vec.min()) for _, vec in row) for row in rows)

    # the same slack above the least possible peak as the original problem had
    limit = problem.memory_limit + least(rows) - least(problem.liveness)
    return ChoiceProblem(node_costs=costs, edges=edges, blocks=problem.blocks, liveness=rows,
                         memory_limit=limit)


def units_of(problem: ChoiceProblem) -> list[tuple[int, ...]]:
    chain = find_chain(problem)
    assert chain is not None
    return [*chain.blocks, chain.rest] if chain.rest else list(chain.blocks)


def enumerate_mixes(problem: ChoiceProblem, units, cheap, fitting) -> float:
    """The cheapest fitting mix by brute force (the oracle)."""
    best = np.inf
    for pick in itertools.product((False, True), repeat=len(units)):
        choices = list(fitting)
        for take, nodes in zip(pick, units, strict=True):
            if take:
                for n in nodes:
                    choices[n] = cheap[n]
        peak = problem.peak_memory(choices)
        if peak is None or peak <= problem.memory_limit:
            best = min(best, problem.evaluate(choices))
    return best


def random_plans(problem: ChoiceProblem, seed: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A fitting plan (the constrained optimum) and a cheap one (the optimum without memory,
    or a random plan when that fits): the pair the memory price hands the mix."""
    fitting, _ = exhaustive(problem)
    free, _ = exhaustive(ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges))
    if problem.peak_memory(free) <= problem.memory_limit:
        rng = np.random.default_rng(seed)
        free = tuple(int(rng.integers(0, s)) for s in problem.sizes)
    return fitting, free


def check(problem: ChoiceProblem, seed: int) -> None:
    try:
        fitting, cheap = random_plans(problem, seed)
    except Infeasible:
        return
    units = units_of(problem)
    # the fitting side need not be optimal: a worse fitting plan leaves the mix more to find
    for base in (fitting, leanest_fit(problem) or fitting):
        oracle = enumerate_mixes(problem, units, cheap, base)
        answer = best_mix(problem, units, cheap, base)
        if oracle >= problem.evaluate(base) - 1e-12:
            assert answer is None
            continue
        assert answer is not None
        choices, cost = answer
        assert cost == pytest.approx(oracle, abs=1e-9)
        assert problem.peak_memory(choices) <= problem.memory_limit + 1e-9


def leanest_fit(problem: ChoiceProblem) -> tuple[int, ...] | None:
    from solver.api import leanest

    return leanest(problem)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 6), per_block=st.integers(1, 2),
       slack=st.sampled_from([0.0, 2.0, 5.0]))
def test_the_mix_is_the_best_of_every_mix_on_random_chains(seed, layers, per_block,
                                                           slack) -> None:
    problem = with_peak_rows(chain_problem(seed, layers, per_block, options=3, rest=1), seed,
                             slack)
    if np.prod(problem.sizes, dtype=float) > 200_000:
        return
    check(problem, seed)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 5),
       slack=st.sampled_from([2.0, 5.0, 8.0]))
def test_the_mix_is_the_best_of_every_mix_with_two_interchangeable_axes(seed, layers,
                                                                        slack) -> None:
    problem = mirrored(with_peak_rows(chain_problem(seed, layers, 1, options=4, rest=1), seed,
                                      slack))
    if np.prod(problem.sizes, dtype=float) > 200_000:
        return
    check(problem, seed)


def test_a_mix_needs_units_that_cover_every_node() -> None:
    problem = ChoiceProblem(node_costs=[[1.0, 0.0], [1.0, 0.0]],
                            node_memory=[[0.0, 1.0], [0.0, 1.0]], memory_limit=1.0)
    with pytest.raises(ValueError, match="cover every node"):
        best_mix(problem, [[0]], cheap=(1, 1), fitting=(0, 0))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 5),
       slack=st.sampled_from([2.0, 5.0, 8.0]))
def test_the_price_search_with_its_mix_keeps_a_true_bound_with_interchangeable_axes(
        seed, layers, slack) -> None:
    """The whole memory-priced road on mirrored chains (every plan has a mirror plan at the
    same cost and memory, so the LP splits nodes between the two): the bound never exceeds
    the exhaustive optimum, the plan fits and is never below it."""
    check_from_the_free_optimum(mirrored(with_peak_rows(chain_problem(seed, layers, 1, options=4,
                                                                      rest=1), seed, slack)),
                                200_000)
