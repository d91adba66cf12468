"""solver against exhaustive search (an independent NumPy enumeration) on random small problems.

Problems come from a seeded generator so hypothesis shrinks on the seed and the shape knobs;
each property compares objectives (ties may pick different choices) and checks memory.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import solver
from solver import ChoiceProblem, Infeasible, solve
from solver.exact import exhaustive

SETTINGS = settings(max_examples=50, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def random_problem(seed: int, *, nodes: int, memory: bool, groups: bool = False,
                   liveness: bool = False, tree: bool = False, inf: bool = False,
                   tightness: float = 0.5) -> ChoiceProblem:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 5, size=nodes)
    if groups and nodes >= 3:
        sizes[1] = sizes[0]
    costs = [rng.integers(0, 20, size=k).astype(float) for k in sizes]
    if inf:
        for c in costs:
            if c.size > 1 and rng.random() < 0.3:
                c[rng.integers(c.size)] = np.inf
    pairs = [(int(rng.integers(i)), i) for i in range(1, nodes)] if tree else \
        [(int(a), int(b)) for a, b in rng.integers(0, nodes, size=(2 * nodes, 2)) if a != b]
    edges = []
    for u, v in pairs:
        if rng.random() < 0.3:
            u, v = v, u
        edges.append((u, v, rng.integers(0, 15, size=(sizes[u], sizes[v])).astype(float)))
    mem = [rng.integers(1, 30, size=k).astype(float) for k in sizes] if memory else None
    group_list = [[0, 1]] if groups and nodes >= 3 else None
    steps = None
    if liveness and memory:
        steps = [[(n, mem[n]) for n in range(nodes) if rng.random() < 0.6] for _ in range(3)]
    limit = None
    if memory:
        low = sum(m.min() for m in mem)
        high = sum(m.max() for m in mem)
        limit = float(np.floor(low + tightness * (high - low)))
    return ChoiceProblem(node_costs=costs, edges=edges, node_memory=mem, memory_limit=limit,
                         groups=group_list, liveness=steps)


def assert_matches_oracle(problem: ChoiceProblem, backend: str, **kw) -> None:
    try:
        _, best = exhaustive(problem)
    except Infeasible as exc:
        with pytest.raises(Infeasible) as caught:
            solve(problem, backend=backend, **kw)
        assert caught.value.min_peak == pytest.approx(exc.min_peak)
        return
    except solver.NoFiniteOptionError:
        with pytest.raises(solver.NoFiniteOptionError):
            solve(problem, backend=backend, **kw)
        return
    sol = solve(problem, backend=backend, **kw)
    assert sol.objective == pytest.approx(best, rel=1e-9, abs=1e-9)
    assert sol.optimal and sol.status is solver.SolveStatus.OPTIMAL
    assert sol.bound <= sol.objective
    assert problem.evaluate(sol.choices) == sol.objective
    if problem.memory_limit is not None:
        assert problem.peak_memory(sol.choices) <= problem.memory_limit
    for group in problem.groups or ():
        assert len({sol.choices[i] for i in group}) == 1


seeds = st.integers(0, 2**32 - 1)
node_counts = st.integers(1, 6)


@SETTINGS
@given(seed=seeds, nodes=node_counts, memory=st.booleans(), groups=st.booleans(),
       inf=st.booleans())
def test_auto_equals_exhaustive(seed: int, nodes: int, memory: bool, groups: bool,
                                inf: bool) -> None:
    problem = random_problem(seed, nodes=nodes, memory=memory, groups=groups, inf=inf)
    assert_matches_oracle(problem, "auto")


@SETTINGS
@given(seed=seeds, nodes=node_counts, tightness=st.floats(0.0, 0.7))
def test_liveness_peak_equals_exhaustive(seed: int, nodes: int, tightness: float) -> None:
    problem = random_problem(seed, nodes=nodes, memory=True, liveness=True, tightness=tightness)
    assert_matches_oracle(problem, "auto")


@settings(max_examples=25, deadline=None)
@given(seed=seeds, nodes=node_counts, groups=st.booleans())
@pytest.mark.parametrize("backend", ["highs", "cpsat"], ids=["highs", "cpsat"])
def test_ilp_backends_equal_exhaustive(backend: str, seed: int, nodes: int,
                                       groups: bool) -> None:
    problem = random_problem(seed, nodes=nodes, memory=True, groups=groups)
    assert_matches_oracle(problem, backend, reductions=False)


@SETTINGS
@given(seed=seeds, nodes=st.integers(1, 7))
def test_dp_exact_on_trees_without_memory(seed: int, nodes: int) -> None:
    problem = random_problem(seed, nodes=nodes, memory=False, tree=True)
    assert_matches_oracle(problem, "dp", reductions=False)


@SETTINGS
@given(seed=seeds, nodes=st.integers(2, 7))
def test_dp_with_memory_gives_feasible_plan_and_valid_bound(seed: int, nodes: int) -> None:
    problem = random_problem(seed, nodes=nodes, memory=True, tree=True)
    try:
        _, best = exhaustive(problem)
    except Infeasible:
        return
    sol = solve(problem, backend="dp", reductions=False)
    assert problem.peak_memory(sol.choices) <= problem.memory_limit
    assert sol.bound <= best + 1e-9 <= sol.objective + 2e-9


@SETTINGS
@given(seed=seeds, nodes=node_counts, memory=st.booleans(), groups=st.booleans())
def test_reductions_keep_the_optimum(seed: int, nodes: int, memory: bool, groups: bool) -> None:
    problem = random_problem(seed, nodes=nodes, memory=memory, groups=groups, tree=seed % 2 == 0)
    try:
        reduced = solve(problem, backend="highs", reductions=True)
    except Infeasible:
        with pytest.raises(Infeasible):
            solve(problem, backend="highs", reductions=False)
        return
    plain = solve(problem, backend="highs", reductions=False)
    assert reduced.objective == pytest.approx(plain.objective, rel=1e-9, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=seeds, nodes=st.integers(2, 6), liveness=st.booleans())
def test_dp_bound_and_plan_valid_on_general_graphs(seed: int, nodes: int, liveness: bool) -> None:
    problem = random_problem(seed, nodes=nodes, memory=True, liveness=liveness)
    try:
        _, best = exhaustive(problem)
    except Infeasible:
        return
    sol = solve(problem, backend="dp", reductions=seed % 2 == 0)
    assert problem.peak_memory(sol.choices) <= problem.memory_limit
    assert sol.bound <= best + 1e-9 <= sol.objective + 2e-9


def test_benchmark_instance_small() -> None:
    from autoshard.bench.solver import transformer_problem

    problem = transformer_problem(34)  # two 16-op layers plus embedding and head
    assert problem.num_nodes == 34 and len(problem.edges) == 41
    auto = solve(problem)
    dp = solve(problem, backend="dp")
    assert auto.optimal and problem.peak_memory(auto.choices) <= problem.memory_limit
    assert dp.bound <= auto.objective * (1 + 1e-12) <= dp.objective * (1 + 1e-12)

