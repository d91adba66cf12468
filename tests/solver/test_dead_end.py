"""Dead-end elimination (``solver.dead_end``): every option it drops is strictly worse than
the optimum in every plan that uses it, checked by enumerating those plans; the reduced
problem keeps the optimum of exhaustive search."""

from __future__ import annotations

import numpy as np
import pytest

from solver import ChoiceProblem, Infeasible
from solver.compact import build_work, index_work
from solver.dead_end import dead_options
from solver.exact import exhaustive
from solver.reduce import prune_dead_ends, prune_dominated, reduce_work


def random_problem(seed: int, memory: bool) -> ChoiceProblem:
    """A small graph with integer prices (ties are common) and some impossible pairs."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 6))
    sizes = [int(k) for k in rng.integers(2, 5, size=n)]
    costs = [rng.integers(0, 12, size=k).astype(float) for k in sizes]
    edges = []
    for a in range(n):
        for b in range(a + 1, n):
            if rng.random() < 0.6:
                matrix = rng.integers(0, 8, size=(sizes[a], sizes[b])).astype(float)
                matrix[rng.random(matrix.shape) < 0.1] = np.inf
                edges.append((a, b, matrix))
    mem = [rng.integers(1, 6, size=k).astype(float) for k in sizes] if memory else None
    limit = float(sum(m.min() for m in mem) + 4) if memory else None
    return ChoiceProblem(node_costs=costs, edges=edges, node_memory=mem, memory_limit=limit)


def plan_values(problem: ChoiceProblem) -> tuple[np.ndarray, np.ndarray]:
    """Every assignment (columns) and its cost, inf where it breaks the memory limit."""
    grid = np.indices(problem.sizes).reshape(problem.num_nodes, -1)
    total = np.zeros(grid.shape[1])
    for node, costs in enumerate(problem.node_costs):
        total += costs[grid[node]]
    for u, v, matrix in problem.edges:
        total += matrix[grid[u], grid[v]]
    if problem.memory_limit is not None:
        for row in problem.memory_rows():
            used = sum(vec[grid[node]] for node, vec in row)
            total[used > problem.memory_limit] = np.inf
    return grid, total


@pytest.mark.parametrize("seed", range(60))
def test_dropped_options_are_strictly_worse_in_every_plan(seed: int) -> None:
    problem = random_problem(seed, memory=seed % 2 == 1)
    grid, total = plan_values(problem)
    if not np.isfinite(total).any():
        return
    best = total.min()
    work = build_work(problem)
    for node in work.nodes():
        dead = dead_options(work, node)
        for option in work.table[node][dead, 0]:
            uses = grid[node] == option
            # no optimal plan uses it (the criterion is a strict improvement)
            assert not (total[uses] == best).any(), (node, option)


@pytest.mark.parametrize("seed", range(60))
def test_reduced_problem_keeps_the_optimum(seed: int) -> None:
    problem = random_problem(seed, memory=seed % 3 == 0)
    try:
        _, best = exhaustive(problem)
    except Infeasible:
        return
    work = build_work(problem)
    reduce_work(work)
    ix = index_work(work)
    grid = np.indices([c.size for c in ix.costs]).reshape(ix.n, -1)
    values = [ix.evaluate(grid[:, j]) if ix.fits(grid[:, j]) else np.inf
              for j in range(grid.shape[1])]
    assert min(values) == pytest.approx(best, rel=1e-12, abs=1e-12)
    lifted = work.lift({node: int(grid[i, int(np.argmin(values))])
                        for i, node in enumerate(ix.ids)}, problem.num_nodes)
    assert problem.evaluate(lifted) == pytest.approx(best, rel=1e-12, abs=1e-12)


def test_fires_where_entry_by_entry_dominance_does_not() -> None:
    # option 1 of node 0 is worse than option 0 on one edge entry (3 > 2) but cheaper by 5 in
    # node cost: no entry-by-entry dominance (at either node), yet every swap 1 -> 0 saves at
    # least 6 - 1 - max(2 - 0, 3 - 2) = 3
    problem = ChoiceProblem(node_costs=[[1.0, 6.0], [1.0, 0.0]],
                            edges=[(0, 1, np.array([[2.0, 3.0], [0.0, 2.0]]))])
    work = build_work(problem)
    assert not prune_dominated(work)
    assert dead_options(work, 0).tolist() == [False, True]
    assert prune_dead_ends(work)
    assert work.table[0][:, 0].tolist() == [0]


def test_ties_are_not_dead_ends() -> None:
    # swapping either option for the other changes nothing in some plan: neither is dropped
    # here (entry-by-entry dominance breaks such ties by index)
    problem = ChoiceProblem(node_costs=[[1.0, 1.0], [0.0, 0.0]],
                            edges=[(0, 1, np.array([[0.0, 1.0], [1.0, 0.0]]))])
    work = build_work(problem)
    assert not dead_options(work, 0).any()


def test_more_memory_is_never_a_dead_end_swap() -> None:
    # option 0 is cheaper everywhere but needs more memory: option 1 stays
    problem = ChoiceProblem(node_costs=[[0.0, 5.0], [0.0, 0.0]],
                            edges=[(0, 1, np.array([[0.0, 0.0], [1.0, 1.0]]))],
                            node_memory=[[9.0, 1.0], [1.0, 1.0]], memory_limit=20.0)
    work = build_work(problem)
    assert not dead_options(work, 0).any()


def dead_by_definition(work, node: int) -> list[bool]:
    """The criterion written out pair by pair and column by column (no screening), then
    options dropped in index order while a surviving option still beats them."""
    costs = work.costs[node]
    k = costs.size
    neighbours = sorted(work.adj[node])
    largest = [abs(float(c)) for c in costs]
    for other in neighbours:
        largest += [abs(float(x)) for x in work.adj[node][other].ravel() if np.isfinite(x)]
    margin = 1e-13 * 2 * (len(neighbours) + 1) * max(largest)

    def beats(b: int, a: int) -> bool:
        if any(row[node][b] > row[node][a] for row in work.rows if node in row):
            return False
        total = float(costs[b] - costs[a])
        for other in neighbours:
            matrix = work.adj[node][other]
            gains = [matrix[b, j] - matrix[a, j] for j in range(matrix.shape[1])
                     if np.isfinite(matrix[a, j])]
            total += max(gains) if gains else -np.inf
        return total < -margin

    alive = [True] * k
    for a in range(k):
        if any(alive[b] and b != a and beats(b, a) for b in range(k)):
            alive[a] = False
    return [not flag for flag in alive]


def wide_node(seed: int) -> ChoiceProblem:
    """Node 0 with up to 14 options and three neighbours of 9..20 (more columns than the
    screening compares), node costs spread wider than edge prices so swaps often pay."""
    rng = np.random.default_rng(seed)
    sizes = [int(rng.integers(2, 15)), *(int(k) for k in rng.integers(9, 21, size=3))]
    costs = [rng.integers(0, 60, size=k).astype(float) for k in sizes]
    edges = []
    for other in (1, 2, 3):
        matrix = rng.integers(0, 6, size=(sizes[0], sizes[other])).astype(float)
        matrix[rng.random(matrix.shape) < 0.05] = np.inf
        edges.append((0, other, matrix))
    mem = [rng.integers(1, 4, size=k).astype(float) for k in sizes] if seed % 2 else None
    return ChoiceProblem(node_costs=costs, edges=edges, node_memory=mem,
                         memory_limit=1e9 if mem else None)


def _nodes_dropping(make) -> int:
    """How many of 40 seeds' node 0 (``make(seed)``) drop an option, once each seed's drops
    are checked against the definition."""
    dropping = 0
    for seed in range(40):
        work = build_work(make(seed))
        dead = dead_options(work, 0)
        assert dead.tolist() == dead_by_definition(work, 0), seed
        dropping += bool(dead.any())
    return dropping


def test_dead_options_match_the_definition() -> None:
    assert _nodes_dropping(wide_node) >= 15  # compares drops, not only "nothing to drop"


def test_dead_options_match_the_definition_on_finite_prices() -> None:
    # every edge finite (the path that skips masking inf − inf) and the node's options many
    # (pairs ruled out edge by edge before the last edge is read)
    dropping = 0
    for seed in range(40):
        problem = wide_node(seed)
        edges = [(u, v, np.where(np.isfinite(m), m, 7.0)) for u, v, m in problem.edges]
        work = build_work(ChoiceProblem(node_costs=problem.node_costs, edges=edges,
                                        node_memory=problem.node_memory,
                                        memory_limit=problem.memory_limit))
        dead = dead_options(work, 0)
        assert dead.tolist() == dead_by_definition(work, 0), seed
        dropping += bool(dead.any())
    assert dropping >= 15


def reshard_like_node(seed: int) -> ChoiceProblem:
    """Node 0's options and its neighbours' are layouts: an edge prices the distance between
    two layouts (zero on a neighbour option of the same layout, so each option has a free
    column), some pairs impossible, and now and then an option impossible with every option
    of a neighbour (its cheapest column is infinite)."""
    rng = np.random.default_rng(seed)
    points = rng.integers(0, 5, size=(12, 3)).astype(float)  # layout → a place; L1 distances
    layouts = [rng.integers(0, 12, size=int(k)) for k in (rng.integers(4, 16),
                                                          *rng.integers(9, 21, size=3))]
    costs = [rng.integers(0, 30, size=ls.size).astype(float) for ls in layouts]
    edges = []
    for other in (1, 2, 3):
        matrix = np.abs(points[layouts[0]][:, None, :]
                        - points[layouts[other]][None, :, :]).sum(axis=2)
        matrix[rng.random(matrix.shape) < 0.05] = np.inf
        if rng.random() < 0.5:
            matrix[rng.integers(0, matrix.shape[0])] = np.inf
        edges.append((0, other, matrix))
    return ChoiceProblem(node_costs=costs, edges=edges)


def test_dead_options_match_the_definition_on_reshard_like_prices() -> None:
    # the screen's own-column term (``dead_end._own_column_gain``) meets its free column on
    # every option here, and an all-impossible row on some
    assert _nodes_dropping(reshard_like_node) >= 15
