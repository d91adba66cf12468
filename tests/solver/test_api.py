"""solver's contract: validation messages, infeasibility certificates, time limits, determinism."""

from __future__ import annotations

import numpy as np
import pytest

import solver
from solver import ChoiceProblem, Infeasible, SolveStatus, solve
from solver.exact import exhaustive


def layered(layers: int, options: int = 6, seed: int = 0, tight: float = 0.4) -> ChoiceProblem:
    """A chain of layers with skip edges and a binding memory row (a harder instance)."""
    rng = np.random.default_rng(seed)
    n = 4 * layers
    costs = [rng.uniform(1, 10, options) for _ in range(n)]
    edges = [(i, i + 1, rng.uniform(0, 8, (options, options))) for i in range(n - 1)]
    edges += [(i, i + 3, rng.uniform(0, 4, (options, options))) for i in range(0, n - 3, 4)]
    mem = [rng.integers(10, 100, options).astype(float) for _ in range(n)]
    low, high = sum(m.min() for m in mem), sum(m.max() for m in mem)
    return ChoiceProblem(node_costs=costs, edges=edges, node_memory=mem,
                         memory_limit=float(low + tight * (high - low)))


def test_hand_computed_chain() -> None:
    # options: node0 (1, 2), node1 (3, 1); edge 0 on agreement, 5 otherwise.
    # (0,0)=1+3=4, (1,1)=2+1=3, mixed ≥ 1+1+5 → optimum (1,1) = 3; with memory 5/1 per node
    # and a limit of 6, (0,0) needs 10 and is excluded anyway; limit 2 forces (1,1) too.
    p = ChoiceProblem(node_costs=[[1.0, 2.0], [3.0, 1.0]],
                      edges=[(0, 1, np.array([[0.0, 5.0], [5.0, 0.0]]))],
                      node_memory=[[5, 1], [5, 1]], memory_limit=6)
    sol = solve(p)
    assert sol.choices == (1, 1) and sol.objective == 3.0 and sol.gap == 0.0


def test_parallel_and_reversed_edges_add_up() -> None:
    m = np.array([[0.0, 4.0], [1.0, 0.0]])
    p = ChoiceProblem(node_costs=[[0.0, 0.0], [0.0, 0.0]],
                      edges=[(0, 1, m), (1, 0, m), (0, 1, m)])
    # (0,1): 4 + m[1,0] + 4 = 9; (1,0): 1 + 4 + 1 = 6; (0,0),(1,1): 0
    assert p.evaluate((0, 1)) == 9.0 and p.evaluate((1, 0)) == 6.0
    assert solve(p).objective == 0.0


def test_infeasible_reports_sum_of_minima() -> None:
    p = ChoiceProblem(node_costs=[[1.0, 2.0], [1.0, 1.0, 1.0]],
                      node_memory=[[7, 4], [9, 3, 5]], memory_limit=6)
    with pytest.raises(Infeasible) as caught:
        solve(p)
    assert caught.value.min_peak == 7.0 and caught.value.limit == 6.0
    assert "7" in str(caught.value) and "6" in str(caught.value)


def test_infeasible_liveness_reports_exact_min_peak() -> None:
    # step 0: a + b, step 1: b + c. b = 0 → (a+4, 1+c) ; b = 1 → (a+1, 5+c).
    # a ∈ {2, 3}, c ∈ {2, 6}: b=0,a=2,c=2 → max(6, 3) = 6; b=1 → max(3, 7) = 7. Min peak 6.
    a, b, c = np.array([2.0, 3.0]), np.array([4.0, 1.0]), np.array([2.0, 6.0])
    b_late = np.array([1.0, 5.0])
    p = ChoiceProblem(node_costs=[[0, 0], [0, 0], [0, 0]], node_memory=[a, b, c],
                      liveness=[[(0, a), (1, b)], [(1, b_late), (2, c)]], memory_limit=5.0)
    with pytest.raises(Infeasible) as caught:
        solve(p)
    assert caught.value.min_peak == 6.0
    with pytest.raises(Infeasible) as oracle:
        exhaustive(p)
    assert oracle.value.min_peak == 6.0


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"node_costs": [[1.0], [np.inf, np.inf]]}, "node 1 has no option of finite cost"),
        ({"node_costs": [[1.0, 2.0], [1.0]], "edges": [(0, 1, np.zeros((2, 2)))]}, "edge 0"),
        ({"node_costs": [[1.0]], "edges": [(0, 3, np.zeros((1, 1)))]}, "node 3"),
        ({"node_costs": [[1.0, np.nan]]}, "NaN"),
        ({"node_costs": [[1.0, 2.0], [1.0]], "groups": [[0, 1]]}, "group 0"),
        ({"node_costs": [[1.0]], "node_memory": [[1.0, 2.0]]}, "node_memory[0]"),
    ],
    ids=["no-finite", "edge-shape", "edge-node", "nan", "group-sizes", "memory-shape"],
)
def test_validation_names_the_culprit(kwargs: dict, fragment: str) -> None:
    with pytest.raises(solver.InvalidProblemError, match=None) as caught:
        ChoiceProblem(**kwargs)
    assert fragment in str(caught.value)


def test_group_with_no_common_finite_option_is_named() -> None:
    p = ChoiceProblem(node_costs=[[1.0, np.inf], [np.inf, 1.0]], groups=[[0, 1]])
    with pytest.raises(solver.NoFiniteOptionError, match="group of node 0"):
        solve(p)


def test_unknown_backend_and_oversized_exhaustive() -> None:
    p = ChoiceProblem(node_costs=[np.zeros(10)] * 8)
    with pytest.raises(solver.UnknownBackendError, match="gurobi"):
        solve(p, backend="gurobi")
    with pytest.raises(solver.ProblemTooLargeError, match="exhaustive"):
        solve(p, backend="exhaustive")


@pytest.mark.parametrize("backend", ["cpsat", "highs", "auto"])
def test_time_limit_returns_feasible_plan_with_valid_bound(backend: str) -> None:
    p = layered(30, seed=3)
    quick = solve(p, time_limit=0.05, backend=backend)
    assert quick.status in (SolveStatus.TIME_LIMIT, SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
    assert p.peak_memory(quick.choices) <= p.memory_limit
    assert quick.bound <= quick.objective
    reference = solve(p, backend="highs")
    assert quick.bound <= reference.objective * (1 + 1e-9)
    assert reference.objective <= quick.objective * (1 + 1e-9)


def test_deterministic_choices() -> None:
    p = layered(6, seed=7)
    runs = {solve(p).choices for _ in range(2)} | {solve(p, backend="cpsat").choices}
    first = solve(p).choices
    assert solve(p).choices == first
    assert len({p.evaluate(c) for c in runs}) == 1


def test_dp_is_exact_on_a_long_chain_without_memory() -> None:
    rng = np.random.default_rng(1)
    n, k = 300, 5
    costs = [rng.uniform(0, 5, k) for _ in range(n)]
    mats = [rng.uniform(0, 5, (k, k)) for _ in range(n - 1)]
    p = ChoiceProblem(node_costs=costs, edges=[(i, i + 1, m) for i, m in enumerate(mats)])
    # independent Viterbi recursion
    best = costs[0].copy()
    for i, m in enumerate(mats):
        best = (best[:, None] + m).min(axis=0) + costs[i + 1]
    sol = solve(p, backend="dp", reductions=False)
    assert sol.objective == pytest.approx(float(best.min()), rel=1e-12)
    assert sol.optimal
