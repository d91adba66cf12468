"""The polish of a periodic plan, first around the LP's undecided nodes, against brute force.

Independent truths: every polish claims the optimum of the problem with its fixed nodes held,
so enumerating the free nodes alone (``itertools.product``, no solver code) must find the same
cost; the final plan is bracketed by the exhaustive optimum of the whole problem; and the
mask is checked against the rule written out with sets over the problem's edges.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import solver.periodic_search as periodic_search
from solver import ChoiceProblem, solve
from solver.backends import lp
from solver.exact import exhaustive
from solver.periodic import aggregate, find_chain, periodic_lp
from solver.polish import DECIDED, decided_elsewhere, fix, free_part, tied_run
from tests.solver.test_periodic import chain_problem


def best_with_fixed(problem: ChoiceProblem, fixed: np.ndarray, choices: tuple[int, ...]
                    ) -> float:
    free = [node for node in range(problem.num_nodes) if not fixed[node]]
    plan = list(choices)
    best = np.inf
    for combo in itertools.product(*(range(problem.sizes[n]) for n in free)):
        for node, option in zip(free, combo, strict=True):
            plan[node] = option
        best = min(best, problem.evaluate(tuple(plan)))
    return best


def test_mask_frees_undecided_nodes_their_neighbours_and_reduced_ones() -> None:
    problem = chain_problem(3, layers=6, per_block=3, options=3, rest=2)
    chain = find_chain(problem)
    agg = aggregate(problem, chain, 1, 1)
    ids = periodic_lp(agg).indexed.ids
    weight = np.ones(len(ids))
    outside = dict(zip(chain.rest, agg.rest, strict=True))
    for k in (0, len(chain.blocks) - 1):
        outside.update(zip(chain.blocks[k], agg.block_nodes[k], strict=True))
    doubtful = next(node for node, a in outside.items() if a in ids)
    weight[ids.index(outside[doubtful])] = DECIDED / 2

    fixed = decided_elsewhere(problem, chain, agg, 1, ids, weight)

    tied = {n for block in chain.blocks[1:-1] for n in block}
    neighbours = {v for u, v, _ in problem.edges if u == doubtful} | \
        {u for u, v, _ in problem.edges if v == doubtful}
    expected_free = ({doubtful} | (neighbours - tied) |
                     {node for node, a in outside.items() if a not in ids})
    assert {int(n) for n in np.flatnonzero(~fixed)} == expected_free
    assert tied <= {int(n) for n in np.flatnonzero(fixed)}
    assert not tied_run(chain, 1, problem.num_nodes)[list(outside)].any()


def test_fix_keeps_only_the_chosen_option_of_fixed_nodes() -> None:
    problem = ChoiceProblem(node_costs=[[1.0, 2.0], [3.0, 4.0]],
                            edges=[(0, 1, np.array([[0.0, 1.0], [1.0, 0.0]]))])
    narrowed = fix(problem, np.array([True, False]), (1, 0))
    assert narrowed.node_costs[0].tolist() == [np.inf, 2.0]
    assert narrowed.node_costs[1].tolist() == [3.0, 4.0]


def _random_problem(seed: int) -> ChoiceProblem:
    rng = np.random.default_rng(seed)
    nodes = int(rng.integers(3, 7))
    costs = [rng.uniform(0.0, 3.0, int(rng.integers(1, 4))) for _ in range(nodes)]
    edges = []
    for u, v in itertools.combinations(range(nodes), 2):
        if rng.random() < 0.5:
            matrix = rng.uniform(0.0, 2.0, (costs[u].size, costs[v].size))
            matrix[rng.random(matrix.shape) < 0.15] = np.inf  # forbidden pairs
            matrix[0, 0] = 0.0  # option 0 everywhere stays a plan
            edges.append((u, v, matrix))
    return ChoiceProblem(node_costs=costs, edges=edges)


@pytest.mark.parametrize("seed", range(30))
def test_free_part_has_the_optimum_of_the_fixed_problem(seed) -> None:
    """The sub-problem over the free nodes, solved by enumeration, plus the fixed nodes'
    constant is the brute-force optimum with those nodes held; its optimum lifted onto the
    fixed nodes is a plan of the whole problem at that cost."""
    problem = _random_problem(seed)
    rng = np.random.default_rng(1000 + seed)
    fixed = rng.random(problem.num_nodes) < 0.5
    fixed[int(rng.integers(problem.num_nodes))] = False
    plans = [plan for plan in itertools.product(*(range(size) for size in problem.sizes))
             if np.isfinite(problem.evaluate(plan))]  # the polish is given a plan
    choices = plans[int(rng.integers(len(plans)))]
    truth = best_with_fixed(problem, fixed, choices)
    part = free_part(problem, fixed, choices)
    assert part is not None
    sub, free = part
    assert free.tolist() == [n for n in range(problem.num_nodes) if not fixed[n]]
    best_sub, value = np.inf, np.inf
    for combo in itertools.product(*(range(size) for size in sub.sizes)):
        cost = sub.evaluate(combo)
        if cost < best_sub:
            plan = list(choices)
            for node, option in zip(free.tolist(), combo, strict=True):
                plan[node] = option
            best_sub, value = cost, problem.evaluate(tuple(plan))
    assert value == pytest.approx(truth, abs=1e-9)
    constant = problem.evaluate(choices) - sub.evaluate(tuple(choices[n] for n in free.tolist()))
    assert best_sub + constant == pytest.approx(truth, abs=1e-9)


def test_free_part_declines_all_fixed() -> None:
    problem = _random_problem(0)
    everything = np.ones(problem.num_nodes, dtype=bool)
    assert free_part(problem, everything, (0,) * problem.num_nodes) is None


# instances whose periodic plan needs polishing (most first try the small polish)
POLISHED = [(1e-6, seed) for seed in (2, 6, 7, 10, 16, 17, 18, 21)] + \
    [(0.1, seed) for seed in (6, 16, 21, 35, 37)]


@pytest.mark.parametrize(("gap", "seed"), POLISHED)
def test_every_polish_is_optimal_for_what_it_holds(seed, gap, monkeypatch) -> None:
    """PDLP's x (fractional where it hesitates) feeds the first, small polish."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    calls = []
    real = periodic_search._polish

    def spy(problem, fixed, choices, clock, gap):
        answer = real(problem, fixed, choices, clock, gap)
        calls.append((problem, fixed.copy(), choices, answer))
        return answer

    monkeypatch.setattr(periodic_search, "_polish", spy)
    problem = chain_problem(seed, layers=5, per_block=2, options=3, rest=2)
    _, best = exhaustive(problem)
    answer = solve(problem, gap=gap)
    assert answer.bound <= best + 1e-9 <= answer.objective + 2e-9
    assert calls  # the instance still reaches the polish
    for whole, fixed, choices, polished in calls:
        assert polished is not None
        truth = best_with_fixed(whole, fixed, choices)
        assert polished.objective == pytest.approx(truth, abs=1e-9)
        assert polished.objective <= whole.evaluate(choices) + 1e-9


def test_the_small_polish_runs_first_and_says_so(monkeypatch) -> None:
    """Across seeds the first polish of an LP holds more than its tied run, and a plan
    taken from it names that restriction."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    ends: list[int] = []
    firsts: list[tuple[int, np.ndarray]] = []
    real_aggregate, real_polish = periodic_search.aggregate, periodic_search._polish

    def on_aggregate(problem, chain, head, tail):
        ends.append(head)
        return real_aggregate(problem, chain, head, tail)

    def on_polish(problem, fixed, choices, clock, gap):
        if not firsts or firsts[-1][0] != len(ends):
            firsts.append((len(ends), fixed.copy()))
        return real_polish(problem, fixed, choices, clock, gap)

    monkeypatch.setattr(periodic_search, "aggregate", on_aggregate)
    monkeypatch.setattr(periodic_search, "_polish", on_polish)
    smaller, named = False, False
    for seed in range(40):
        problem = chain_problem(seed, layers=6, per_block=3, options=3, rest=2)
        chain = find_chain(problem)
        ends.clear()
        firsts.clear()
        answer = solve(problem, gap=0.1)
        for count, fixed in firsts:
            tied = tied_run(chain, ends[count - 1], problem.num_nodes)
            assert fixed[tied].all()
            smaller |= bool(fixed.sum() > tied.sum())
        named |= "undecided" in (answer.restricted or "")
    assert smaller and named


def test_a_provisional_caller_gets_no_polish_of_all_the_rest(monkeypatch) -> None:
    """``solve(provisional=True)`` (a shared-reshard round, which wants a plan to decide what
    to make exact next) skips the polish of everything around the tied run, which the same
    chains get without it; both answers stay bracketed by the exhaustive optimum."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    rest_polished: list[bool] = []
    real = periodic_search._polish

    def spy(problem, fixed, choices, clock, gap):
        chain = find_chain(problem)
        rest_polished.append(any(np.array_equal(fixed, tied_run(chain, ends, problem.num_nodes))
                                 for ends in (1, 2)))
        return real(problem, fixed, choices, clock, gap)

    monkeypatch.setattr(periodic_search, "_polish", spy)
    polished_without = 0
    for gap, seed in POLISHED:
        problem = chain_problem(seed, layers=5, per_block=2, options=3, rest=2)
        _, best = exhaustive(problem)
        for provisional in (False, True):
            rest_polished.clear()
            answer = solve(problem, gap=gap, provisional=provisional)
            assert answer.bound <= best + 1e-9 <= answer.objective + 2e-9
            if provisional:
                assert not any(rest_polished), seed
            else:
                polished_without += any(rest_polished)
    assert polished_without >= 3  # the chains do reach the polish of the rest without it
