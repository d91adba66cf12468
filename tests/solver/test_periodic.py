"""The periodic chain solver (identical layers) against exhaustive search of the whole problem.

``solver.exact`` enumerates every assignment of the *whole* problem and shares no code with the
aggregation, so each check is independent: a bound never exceeds the true optimum, a plan
called optimal costs exactly the true optimum, and a restricted plan's stated gap really
brackets the optimum.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solver.periodic_search as periodic_search
from solver import ChoiceProblem, solve
from solver.backends import lp, simplex
from solver.exact import exhaustive
from solver.periodic import aggregate, expand, find_chain


def chain_problem(seed: int, layers: int, per_block: int, options: int, rest: int,
                  perturb: int | None = None, memory: bool = False,
                  own_last_link: bool = False) -> ChoiceProblem:
    """``rest`` shared nodes + ``layers`` identical blocks of ``per_block`` nodes: edges
    inside a block, to the previous block, and from every block to rest node 0 (like a
    rotary table every layer reads). Optionally one block's costs are perturbed, or the last
    block reads other positions of the block before it than the others do."""
    rng = np.random.default_rng(seed)
    costs_block = [rng.integers(0, 9, size=options).astype(float) for _ in range(per_block)]
    inner = [(a, b, rng.integers(0, 9, size=(options, options)).astype(float))
             for a in range(per_block) for b in range(a + 1, per_block) if rng.random() < 0.7]
    link = [(a, b, rng.integers(0, 9, size=(options, options)).astype(float))
            for a in range(per_block) for b in range(per_block) if rng.random() < 0.4]
    if not link:
        link = [(per_block - 1, 0, rng.integers(0, 9, size=(options, options)).astype(float))]
    last_link = [(a, b, rng.integers(0, 9, size=(options, options)).astype(float))
                 for a in range(per_block) for b in range(per_block) if rng.random() < 0.5]
    shared = rng.integers(0, 5, size=(options, options)).astype(float)
    costs = [rng.integers(0, 9, size=options).astype(float) for _ in range(rest)]
    edges = []
    blocks = []
    for k in range(layers):
        base = len(costs)
        block = tuple(range(base, base + per_block))
        blocks.append(block)
        for r in range(per_block):
            cost = costs_block[r]
            if perturb is not None and k == perturb and r == 0:
                cost = cost + np.arange(options)
            costs.append(cost)
        edges += [(base + a, base + b, m) for a, b, m in inner]
        if k == 0:
            edges.append((0, base, rng.integers(0, 9, size=(options, options)).astype(float)))
        else:
            prev = blocks[k - 1][0]
            own = last_link if own_last_link and k == layers - 1 else link
            edges += [(prev + a, base + b, m) for a, b, m in own]
        if rest > 1:
            edges.append((1, base + per_block - 1, shared))
    if rest > 0:
        edges.append((blocks[-1][-1], rest - 1,
                      rng.integers(0, 9, size=(options, options)).astype(float)))
    limit = None
    node_memory = None
    if memory:
        node_memory = [rng.integers(0, 4, size=options).astype(float) for _ in costs]
        limit = float(sum(m.min() for m in node_memory) + 3)
    return ChoiceProblem(node_costs=costs, edges=edges, blocks=tuple(blocks),
                         node_memory=node_memory, memory_limit=limit)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 7), per_block=st.integers(1, 2),
       options=st.integers(2, 3), rest=st.integers(1, 2), own_last_link=st.booleans())
def test_periodic_answer_is_bracketed_by_the_true_optimum(seed, layers, per_block, options,
                                                          rest, own_last_link) -> None:
    problem = chain_problem(seed, layers, per_block, options, rest,
                            own_last_link=own_last_link)
    if np.prod(problem.sizes, dtype=float) > 600_000:
        return
    _, best = exhaustive(problem)
    answer = solve(problem)
    assert answer.bound <= best + 1e-9  # the periodic LP is a bound of the whole problem
    assert answer.objective >= best - 1e-9  # the plan is a plan of the whole problem
    assert answer.objective == pytest.approx(problem.evaluate(answer.choices))
    if answer.optimal:
        assert answer.objective == pytest.approx(best, abs=1e-9)
        assert answer.restricted is None
    else:
        assert answer.restricted  # a plan that is not proven says what it was restricted to


def test_identical_layers_are_solved_at_block_size() -> None:
    problem = chain_problem(7, layers=30, per_block=2, options=3, rest=2)
    chain = find_chain(problem)
    assert chain is not None
    agg = aggregate(problem, chain)
    assert agg.problem.num_nodes < 4 * 2 + 2 + 2 * 2 + 1  # R, B0, I, E and the copies
    answer = solve(problem)
    reference = solve(ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges))
    assert answer.stats.backend in ("periodic", "restricted")
    assert answer.bound <= reference.objective + 1e-9
    assert answer.objective >= reference.objective - 1e-9


def test_a_different_block_is_not_treated_as_identical() -> None:
    problem = chain_problem(3, layers=5, per_block=2, options=3, rest=1, perturb=2)
    assert find_chain(problem) is None
    _, best = exhaustive(problem)
    answer = solve(problem)
    assert answer.stats.backend != "periodic"
    assert answer.optimal and answer.objective == pytest.approx(best)


def test_an_edge_that_skips_a_block_disables_the_chain() -> None:
    problem = chain_problem(4, layers=5, per_block=1, options=2, rest=1)
    skip = (problem.blocks[0][0], problem.blocks[2][0], np.array([[0.0, 5.0], [5.0, 0.0]]))
    problem = ChoiceProblem(node_costs=problem.node_costs, edges=(*problem.edges, skip),
                            blocks=problem.blocks)
    assert find_chain(problem) is None
    _, best = exhaustive(problem)
    assert solve(problem).objective == pytest.approx(best)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 5), gap=st.sampled_from([1e-6, 0.1]))
def test_memory_constrained_chain_keeps_a_true_bound(seed, layers, gap) -> None:
    problem = chain_problem(seed, layers, per_block=1, options=3, rest=1, memory=True)
    try:
        _, best = exhaustive(problem)
    except Exception:  # infeasible: solve must say so too
        with pytest.raises(Exception):  # noqa: B017
            solve(problem, gap=gap)
        return
    answer = solve(problem, gap=gap)
    assert answer.bound <= best + 1e-9
    assert answer.objective >= best - 1e-9
    assert answer.peak_memory <= problem.memory_limit + 1e-9
    if answer.optimal:  # a looser gap may stop early, never be called optimal for it
        assert answer.objective == pytest.approx(best, abs=1e-9)


def test_blocks_must_align() -> None:
    with pytest.raises(Exception, match="block 1 has 1 nodes"):
        ChoiceProblem(node_costs=[[0.0], [0.0], [0.0]], blocks=((0, 1), (2,)))


def test_layers_that_must_differ_to_fit_are_not_called_infeasible() -> None:
    # 5 one-node blocks with identical costs; the memory rows make layer 1 want option 0 and
    # layer 2 option 1: tying the interior layers cannot fit, mixing them can
    costs = [[0.0, 0.0]] * 5
    edges = [(k, k + 1, np.array([[0.0, 1.0], [1.0, 0.0]])) for k in range(4)]
    liveness = [((1, np.array([0.0, 5.0])),), ((2, np.array([5.0, 0.0])),)]
    problem = ChoiceProblem(node_costs=costs, edges=edges, liveness=liveness, memory_limit=1.0,
                            blocks=tuple((k,) for k in range(5)))
    _, best = exhaustive(problem)
    answer = solve(problem)
    assert answer.objective == pytest.approx(best)
    assert answer.choices[1] == 0 and answer.choices[2] == 1


@pytest.mark.parametrize("seed", (0, 22, 25, 29, 38))  # 22.. stop short of optimal
def test_a_looser_gap_loosens_pdlp_and_keeps_a_true_bound(seed, monkeypatch) -> None:
    """A looser gap (sweeps take 1e-3) lets PDLP stop at a tenth of it, yet the bound
    must still be below the true optimum and the plan within the gap of it."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    tolerances = []
    real = lp._solve_pdlp

    def spy(form, time_limit, eps, *rest):
        tolerances.append(eps)
        return real(form, time_limit, eps, *rest)

    monkeypatch.setattr(lp, "_solve_pdlp", spy)
    problem = chain_problem(seed, layers=5, per_block=2, options=3, rest=2)
    _, best = exhaustive(problem)
    answer = solve(problem, gap=0.1)
    assert tolerances and set(tolerances) == {1e-2}
    assert answer.bound <= best + 1e-9
    assert best - 1e-9 <= answer.objective <= answer.bound + 0.1 * answer.objective + 1e-9
    assert answer.optimal or answer.restricted  # stopping short says what the plan assumed



@pytest.mark.parametrize("seed", range(8))
def test_capped_pdlp_plans_from_the_support_vertex_before_the_barrier(seed, monkeypatch):
    """PDLP stopped by its cap: the plan first comes from the simplex vertex on PDLP's support
    with PDLP's bound, and the barrier runs only when that leaves the gap open and the support
    LP (with its column generation) did not prove the LP optimum to the gap, which on these
    small chains it always does (asserted: the barrier road is tested in
    ``tests/solver/backends/test_lp_bound.py``). Either way the answer is bracketed by the
    exhaustive optimum."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_MAX_ITERATIONS", 16)
    calls = []
    for name in ("solve_on_support", "solve_highs_lp"):
        real = getattr(simplex, name)
        monkeypatch.setattr(simplex, name, lambda *a, _real=real, _name=name, **k:
                            calls.append(_name) or _real(*a, **k))
    problem = chain_problem(seed, layers=5, per_block=2, options=3, rest=2)
    _, best = exhaustive(problem)
    answer = solve(problem, gap=0.05)
    assert calls[0] == "solve_on_support"
    assert "solve_highs_lp" not in calls
    assert answer.bound <= best + 1e-9
    assert best - 1e-9 <= answer.objective
    assert answer.objective <= answer.bound + 0.05 * answer.objective + 1e-9 \
        or answer.restricted


def test_converged_pdlp_that_rounds_badly_is_closed_by_its_support_vertex(monkeypatch):
    """Seed 11: PDLP converges, but its x rounds to a plan short of the gap (the polish used
    to run for it). The vertex on PDLP's support gives the exhaustive optimum with no polish
    and no second LP."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    calls = []
    for module, name in ((periodic_search, "_polish"), (periodic_search, "periodic_lp"),
                         (simplex, "solve_on_support")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k:
                            calls.append(_name) or _real(*a, **k))
    rounded = []
    real_plan = periodic_search._periodic_plan

    def plan(problem, chain, agg, ends, lp_, relaxed, *rest):
        rounded.append(problem.evaluate(expand(chain, agg, lp_.lift(relaxed.x),
                                               problem.num_nodes)))
        return real_plan(problem, chain, agg, ends, lp_, relaxed, *rest)

    monkeypatch.setattr(periodic_search, "_periodic_plan", plan)
    problem = chain_problem(11, layers=5, per_block=2, options=3, rest=2)
    _, best = exhaustive(problem)
    answer = solve(problem, gap=1e-6)
    assert calls == ["periodic_lp", "solve_on_support"]
    assert len(rounded) == 2 and rounded[0] > best * (1 + 1e-6) + 1e-9
    assert answer.objective == pytest.approx(best, abs=1e-9)
    assert answer.bound <= best + 1e-9
