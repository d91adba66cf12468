"""The tied plan over the options some plans use, against a brute force over every such plan.

The oracle lists every plan whose interior blocks (all but the first and the last) take the
same choices and whose every node takes an option one of the given plans takes at a node of
the same position (the rest's nodes, and the first and last blocks' nodes, each their own
position), builds it node by node on the *whole* problem and scores it with
``ChoiceProblem.evaluate`` and ``peak_memory``. It shares nothing with the quotient (summed
node costs, merged edges and windows, memory rows from the compiled rows' per-unit deltas).
The blocks need not be identical: the quotient is exact for tied plans of any chain, so the
instances perturb one block and add windows that differ from block to block.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import ChoiceProblem, solve
from solver.exact import exhaustive
from solver.periodic import Chain
from solver.problem import Stream, Window
from solver.tied_plan import best_tied_plan, quotient
from tests.solver.test_memory_price import assert_brackets, with_peak_rows
from tests.solver.test_periodic import chain_problem


def with_windows(problem: ChoiceProblem, seed: int) -> ChoiceProblem:
    """``problem`` plus one window per block: a compute stream on the block's first node
    and a link stream on an edge from the block before (the first block: from rest node
    0), each block its own numbers."""
    rng = np.random.default_rng(seed)
    sizes, windows = problem.sizes, []
    for k, block in enumerate(problem.blocks):
        first = block[0]
        compute = Stream(nodes=((first, rng.integers(0, 6, sizes[first]).astype(float)),))
        before = problem.blocks[k - 1][-1] if k else 0  # rest node 0 before the first
        link = Stream(edges=((before, block[-1], rng.integers(
            0, 6, (sizes[before], sizes[block[-1]])).astype(float)),),
            constant=float(rng.integers(0, 3)))
        windows.append(Window(streams=(compute, link), weight=float(rng.integers(1, 3))))
    return ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                         blocks=problem.blocks, liveness=problem.liveness,
                         memory_limit=problem.memory_limit, windows=tuple(windows))


def chain_of(problem: ChoiceProblem) -> Chain:
    blocks = problem.blocks
    inside = {n for block in blocks for n in block}
    rest = tuple(n for n in range(problem.num_nodes) if n not in inside)
    return Chain(rest=rest, blocks=blocks, copies=tuple(frozenset() for _ in blocks))


def tied_oracle(problem: ChoiceProblem, plans: list[tuple[int, ...]]) -> float:
    """The cheapest fitting tied plan over the plans' options, by listing them all."""
    blocks = problem.blocks
    inside = {n for block in blocks for n in block}
    # one "slot" per free choice: each rest node, each node of the first, the shared
    # interior and the last block; a slot's members take its choice
    slots = [[n] for n in range(problem.num_nodes) if n not in inside]
    slots += [[n] for n in blocks[0]]
    slots += [[block[r] for block in blocks[1:-1]] for r in range(len(blocks[1]))]
    slots += [[n] for n in blocks[-1]]
    options = [sorted({plan[n] for plan in plans for n in members}) for members in slots]
    best = np.inf
    for pick in itertools.product(*options):
        choices = [0] * problem.num_nodes
        for members, option in zip(slots, pick, strict=True):
            for n in members:
                choices[n] = option
        peak = problem.peak_memory(choices)
        if peak is None or peak <= problem.memory_limit:
            best = min(best, problem.evaluate(choices))
    return best


def random_plans(problem: ChoiceProblem, seed: int, count: int) -> list[tuple[int, ...]]:
    rng = np.random.default_rng(seed)
    return [tuple(int(rng.integers(0, s)) for s in problem.sizes) for _ in range(count)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 6), per_block=st.integers(1, 2),
       slack=st.sampled_from([0.0, 2.0, 6.0]), windows=st.booleans(),
       plans=st.integers(1, 3))
def test_the_tied_plan_is_the_cheapest_fitting_one_over_the_plans_options(
        seed, layers, per_block, slack, windows, plans) -> None:
    problem = with_peak_rows(chain_problem(seed, layers, per_block, options=3, rest=2,
                                           perturb=1), seed, slack)
    if windows:
        problem = with_windows(problem, seed)
    given_plans = random_plans(problem, seed, plans)
    oracle = tied_oracle(problem, given_plans)
    answer = best_tied_plan(problem, chain_of(problem), given_plans, None, 1e-9)
    if not np.isfinite(oracle):
        assert answer is None
        return
    assert answer is not None
    choices, cost = answer
    assert cost == pytest.approx(oracle, abs=1e-9)
    assert problem.evaluate(choices) == pytest.approx(cost, abs=1e-12)
    assert problem.peak_memory(choices) <= problem.memory_limit
    interior = problem.blocks[1:-1]
    assert all(choices[a] == choices[b] for block in interior[1:]
               for a, b in zip(interior[0], block, strict=True))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), per_block=st.integers(1, 3), windows=st.booleans())
def test_the_quotient_prices_every_tied_plan_as_the_whole_problem_does(
        seed, per_block, windows) -> None:
    """Every plan of the quotient costs what the tied plan it stands for costs on the whole
    problem, and fits exactly when that plan fits (sampled plans, the plans given: five
    random ones, so most representatives keep several options)."""
    problem = with_peak_rows(chain_problem(seed, 5, per_block, options=4, rest=2,
                                           perturb=2), seed, 3.0)
    if windows:
        problem = with_windows(problem, seed)
    small, rep, kept = quotient(problem, chain_of(problem), random_plans(problem, seed, 5))
    rng = np.random.default_rng(seed)
    for _ in range(50):
        x = [int(rng.integers(0, k.size)) for k in kept]
        whole = [int(kept[q][x[q]]) for q in rep]
        assert small.evaluate(x) == pytest.approx(problem.evaluate(whole), rel=1e-12)
        peak = small.peak_memory(x)
        fits = peak is None or peak <= problem.memory_limit
        assert fits == (problem.peak_memory(whole) <= problem.memory_limit)


# instances whose block mix leaves more than TIED_SEARCH_GAP, so that the tied plan is looked for
@pytest.mark.parametrize(("seed", "slack"), [(1, 5.0), (4, 5.0), (12, 2.0), (21, 2.0),
                                             (23, 2.0), (42, 2.0), (43, 5.0), (58, 2.0)])
def test_a_priced_chain_with_the_tied_plan_keeps_a_true_bound_and_is_no_dearer(
        seed, slack, monkeypatch) -> None:
    """Through ``solve``: the answer with the tied plan among the price search's candidates
    brackets the exhaustive optimum and is no dearer than the answer without it."""
    from solver import memory_price

    problem = with_peak_rows(chain_problem(seed, 6, 2, options=3, rest=1), seed, slack)
    _, best = exhaustive(problem)
    free = solve(ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                               blocks=problem.blocks))
    kwargs = {"known_bound": free.bound, "free_choices": free.choices}
    looked, tied = [], memory_price._tied
    monkeypatch.setattr(memory_price, "_tied", lambda *args: looked.append(1) or tied(*args))
    with_tied = solve(problem, **kwargs)
    assert looked  # the instance reaches the tied plan
    assert_brackets(problem, with_tied, best)
    monkeypatch.setattr(memory_price, "_tied", lambda *args: None)
    without = solve(problem, **kwargs)
    assert with_tied.objective <= without.objective + 1e-12
