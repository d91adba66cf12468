"""Memory priced on the periodic road, checked against exhaustive search of the whole problem.

The rows here are peak rows of a training-like schedule: every block's parameter node is alive
at every step, and at step t the activations of blocks 0..t are too, so no row is the same in
every block (the reason the periodic LP cannot take rows as they are). ``solver.exact`` shares
no code with the price search, so the checks are independent: the bound never exceeds the
true optimum, the plan fits every row, and a plan called optimal is the true optimum.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import ChoiceProblem, Infeasible, Solution, solve
from solver.exact import exhaustive
from solver.memory_price import priced_row
from solver.periodic import find_chain
from tests.solver.test_periodic import chain_problem


def with_peak_rows(problem: ChoiceProblem, seed: int, slack: float) -> ChoiceProblem:
    """``problem`` with training-like liveness rows and a limit ``slack`` above the least
    possible peak."""
    rng = np.random.default_rng(seed)
    sizes = problem.sizes
    static = [(block[0], rng.integers(1, 6, size=sizes[block[0]]).astype(float))
              for block in problem.blocks]
    saved = [(block[-1], rng.integers(0, 4, size=sizes[block[-1]]).astype(float))
             for block in problem.blocks]
    rows = [tuple(static) + tuple(saved[:t + 1]) for t in range(len(problem.blocks))]
    least = max(sum(float(vec.min()) for _, vec in row) for row in rows)
    return ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                         blocks=problem.blocks, liveness=rows, memory_limit=least + slack)


def assert_brackets(problem: ChoiceProblem, answer: Solution, best: float) -> None:
    """``answer`` against the exhaustive optimum ``best``: its bound is not above it, its plan
    fits and is not below it, and a plan called optimal is it."""
    assert answer.bound <= best + 1e-9
    assert answer.objective >= best - 1e-9
    assert answer.peak_memory <= problem.memory_limit + 1e-9
    if answer.optimal:
        assert answer.objective == pytest.approx(best, abs=1e-9)


def small_optimum(problem: ChoiceProblem, max_product: float) -> float | None:
    """The exhaustive optimum of ``problem``, or ``None`` when it has more than
    ``max_product`` plans or none that fits (the instance is then skipped)."""
    if np.prod(problem.sizes, dtype=float) > max_product:
        return None
    try:
        return exhaustive(problem)[1]
    except Infeasible:
        return None


def check_from_the_free_optimum(problem: ChoiceProblem, max_product: float) -> None:
    """Solve ``problem`` as the planner does (its optimum without memory rows first, then
    the memory-priced search from it) and check the answer by exhaustive search; instances
    with more than ``max_product`` plans, or none that fits, are skipped."""
    best = small_optimum(problem, max_product)
    if best is None:
        return
    free = solve(ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                               blocks=problem.blocks))
    assert_brackets(problem, solve(problem, known_bound=free.bound, free_choices=free.choices),
                    best)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 6), per_block=st.integers(1, 2),
       slack=st.sampled_from([0.0, 2.0, 5.0]))
def test_priced_chain_keeps_a_true_bound_and_fits(seed, layers, per_block, slack) -> None:
    problem = with_peak_rows(chain_problem(seed, layers, per_block, options=3, rest=1), seed,
                             slack)
    if np.prod(problem.sizes, dtype=float) > 300_000:
        return
    try:
        _, best = exhaustive(problem)
    except Infeasible:
        with pytest.raises(Infeasible):
            solve(problem)
        return
    free = solve(ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                               blocks=problem.blocks))
    # with and without the unconstrained optimum to start the price search from
    for answer in (solve(problem), solve(problem, known_bound=free.bound,
                                         free_choices=free.choices)):
        assert_brackets(problem, answer, best)


def test_the_priced_row_is_equal_in_every_interior_block_and_below_the_real_one() -> None:
    problem = with_peak_rows(chain_problem(5, 6, 2, options=3, rest=1), 5, 1.0)
    chain = find_chain(problem)
    assert chain is not None
    row = priced_row(problem, chain)
    assert row is not None
    interior = chain.blocks[1:-1]
    for position in range(len(chain.blocks[0])):
        first = row[interior[0][position]]
        assert all(np.array_equal(row[b[position]], first) for b in interior)
    peak_row = problem.liveness[-1]  # the last step: every block's activations alive
    real = [np.zeros(size) for size in problem.sizes]
    for node, vec in peak_row:
        real[node] = real[node] + vec
    assert all((a <= r + 1e-12).all() for a, r in zip(row, real, strict=True))


def test_memory_that_forces_the_expensive_option_is_priced_to_a_proof() -> None:
    # each layer: option 0 costs 0 and holds 2 bytes, option 1 costs 1 and holds 1; the limit
    # lets exactly one layer keep option 0, so the optimum is layers - 1 (by hand). The
    # Lagrangian bound at price 1 is exactly that, and the end blocks' polish finds the plan.
    layers = 8
    costs = [np.array([0.0, 1.0])] * layers
    edges = [(k, k + 1, np.zeros((2, 2))) for k in range(layers - 1)]
    memory = np.array([2.0, 1.0])
    rows = [tuple((k, memory) for k in range(layers))]
    problem = ChoiceProblem(node_costs=costs, edges=edges, liveness=rows,
                            memory_limit=float(layers + 1),
                            blocks=tuple((k,) for k in range(layers)))
    answer = solve(problem)
    assert answer.stats.backend == "priced"
    assert answer.optimal
    assert answer.objective == pytest.approx(layers - 1)
    assert sorted(answer.choices).count(0) == 1



def _duality_gap_problem() -> ChoiceProblem:
    # each layer: option 0 costs 0 and holds 3 bytes, option 1 costs 1 and holds 1; a limit
    # of 9 lets two layers keep option 0 (3·2 + 1·2 = 8; three need 10): the optimum is 2 (by
    # hand), and no price proves it (at 1/2 per byte: 4·1.5 − 4.5 = 1.5, the best bound).
    layers = 4
    costs = [np.array([0.0, 1.0])] * layers
    edges = [(k, k + 1, np.zeros((2, 2))) for k in range(layers - 1)]
    rows = [tuple((k, np.array([3.0, 1.0])) for k in range(layers))]
    return ChoiceProblem(node_costs=costs, edges=edges, liveness=rows, memory_limit=9.0,
                         blocks=tuple((k,) for k in range(layers)))


def test_a_priced_plan_within_the_callers_gap_is_kept_without_the_tied_search() -> None:
    problem = _duality_gap_problem()
    _, best = exhaustive(problem)
    assert best == pytest.approx(2.0)
    loose = solve(problem, gap=0.3)  # the priced plan's gap is (2 − 1.5) / 2 = 25 %
    assert loose.stats.backend == "priced"
    assert loose.bound <= best + 1e-9 and loose.objective == pytest.approx(best)
    assert loose.gap <= 0.3 and not loose.optimal
    tight = solve(problem)  # the default gap: the tied search still runs and proves it
    assert tight.stats.backend != "priced"
    assert tight.objective == pytest.approx(best) and tight.bound <= best + 1e-9


def test_price_cut_from_the_free_optimum_when_the_first_price_already_fits() -> None:
    """Eight identical layers, each either cheap (cost 100, 10 bytes) or frugal (100.1,
    1 byte), under a limit that holds four cheap layers: the optimum is any four cheap
    (800.4, exhaustive search). The price search's first price makes every layer frugal
    (800.8, fits), so only the cut against the free optimum (all cheap, 800, 80 bytes) finds
    the price where memory binds; the mix of the two plans then holds the optimum, and the
    cut's bound proves it."""
    layers, cheap, frugal = 8, (100.0, 10.0), (100.1, 1.0)
    costs = [np.zeros(1)] + [np.array([cheap[0], frugal[0]]) for _ in range(layers)]
    blocks = tuple((1 + k,) for k in range(layers))
    edges = [(0, 1, np.zeros((1, 2)))] + [(k, k + 1, np.zeros((2, 2)))
                                          for k in range(1, layers)]
    row = tuple((node, np.array([cheap[1], frugal[1]])) for (node,) in blocks)
    limit = 4 * cheap[1] + 4 * frugal[1]
    problem = ChoiceProblem(node_costs=costs, edges=edges, blocks=blocks, liveness=[row],
                            memory_limit=limit)
    _, best = exhaustive(problem)
    assert best == pytest.approx(4 * cheap[0] + 4 * frugal[0])
    free = solve(ChoiceProblem(node_costs=costs, edges=edges, blocks=blocks))
    answer = solve(problem, known_bound=free.bound, free_choices=free.choices)
    assert answer.objective == pytest.approx(best)
    assert answer.bound <= best + 1e-9
    assert answer.gap <= 1e-6


@pytest.mark.parametrize("seed", range(12))
def test_the_run_mix_for_problems_with_windows_is_a_fitting_run_from_one_end(seed) -> None:
    """``_run_mix`` (the mix a problem with windows gets, which ``block_mix`` does not model):
    when it returns a plan, the plan fits, costs what the problem says and less than the
    fitting plan, and takes the cheap plan in a run of units from one end of the chain and
    the fitting plan everywhere else; when it returns none, no such run fits below the
    fitting plan's cost (every run from either end, by brute force)."""
    from solver.api import leanest
    from solver.clock import Clock
    from solver.memory_price import Probe, _run_mix

    problem = with_peak_rows(chain_problem(seed, 5, 2, 3, 1), seed, slack=2.0)
    chain = find_chain(problem)
    assert chain is not None
    free = ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                         blocks=problem.blocks)
    cheap_choices, _ = exhaustive(free)
    fitting_choices = leanest(problem)  # a fitting plan a mix can improve on
    assert fitting_choices is not None
    fitting_cost = problem.evaluate(fitting_choices)
    cheap = Probe(0.0, 0.0, tuple(cheap_choices), problem.evaluate(cheap_choices), 0.0, False)
    fitting = Probe(1.0, 0.0, tuple(fitting_choices), fitting_cost, 0.0, True)
    found = _run_mix(problem, chain, cheap, fitting, Clock(None))
    units = [*chain.blocks, chain.rest]
    runs = []
    for order in ([units[-1], *units[:-1]], [*units[-2::-1], units[-1]]):
        for length in range(1, len(order) + 1):
            mix = list(fitting.choices)
            for unit in order[:length]:
                for node in unit:
                    mix[node] = cheap.choices[node]
            runs.append(tuple(mix))
    fitting_runs = [r for r in runs if problem.peak_memory(r) <= problem.memory_limit
                    and problem.evaluate(r) < fitting.cost]
    if found is None:
        assert not fitting_runs
        return
    choices, cost = found
    assert choices in runs
    assert problem.peak_memory(choices) <= problem.memory_limit
    assert cost == pytest.approx(problem.evaluate(choices)) and cost < fitting.cost


def test_without_a_limit_a_large_problem_keeps_its_priced_plan(monkeypatch) -> None:
    """The tied search cannot raise the bound; without a time limit it runs only where the
    memory rows are small. With the threshold below this problem's rows the answer is the
    priced plan and its gap; above them, the tied search's (the test before)."""
    from solver import api

    problem = _duality_gap_problem()
    assert problem.memory_row_entries() == 8  # one row, four nodes of two options
    monkeypatch.setattr(api, "TIED_MAX_ROW_ENTRIES", 7)
    kept = solve(problem)
    assert kept.stats.backend == "priced"
    assert kept.objective == pytest.approx(2.0) and kept.bound <= 2.0 + 1e-9
    assert not kept.optimal
    timed = solve(problem, time_limit=60.0)  # a time limit ends the tied search: it runs
    assert timed.stats.backend != "priced"
