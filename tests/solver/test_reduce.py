"""Each exact reduction on its own: it fires where expected and keeps the optimum.

The optimum of the reduced problem (lifted back) is compared with exhaustive search on the
original problem, which shares no code with the reductions.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import ChoiceProblem, Infeasible, solve
from solver.compact import build_work, index_work
from solver.exact import exhaustive
from solver.reduce import _dominated, merge_leaves, prune_dominated, prune_memory


def star(seed: int, leaves: int, memory: bool) -> ChoiceProblem:
    rng = np.random.default_rng(seed)
    k = [int(v) for v in rng.integers(2, 5, size=leaves + 1)]
    costs = [rng.integers(0, 10, size=s).astype(float) for s in k]
    edges = [(0, i, rng.integers(0, 10, size=(k[0], k[i])).astype(float))
             for i in range(1, leaves + 1)]
    mem = [rng.integers(1, 9, size=s).astype(float) for s in k] if memory else None
    limit = float(sum(m.min() for m in mem) + 6) if memory else None
    return ChoiceProblem(node_costs=costs, edges=edges, node_memory=mem, memory_limit=limit)


def test_dominated_option_is_dropped() -> None:
    # option 1 of node 0 costs more, uses more memory and has a worse edge row than option 0.
    # Without it, node 1's option 1 (column [2, 9]) is dominated by option 0 ([1, 0]); then
    # node 0's option 2 (cost 0.5, edge 0) dominates option 0 (cost 1, edge 1): only (2, 0),
    # the optimum 0.5, is left.
    p = ChoiceProblem(node_costs=[[1.0, 2.0, 0.5], [0.0, 0.0]],
                      edges=[(0, 1, np.array([[1.0, 2.0], [3.0, 2.0], [0.0, 9.0]]))],
                      node_memory=[[4, 5, 4], [1, 1]], memory_limit=100)
    work = build_work(p)
    assert prune_dominated(work)
    assert work.table[0][:, 0].tolist() == [2]
    assert work.table[1][:, 0].tolist() == [0]
    assert solve(p).objective == 0.5


def dominated_by_definition(features: np.ndarray) -> list[bool]:
    """Row a is dominated when some row b is ≤ it everywhere and either differs from it
    somewhere or equals it with a lower index."""
    rows = features.tolist()
    return [any(all(x <= y for x, y in zip(b, a, strict=True)) and (b != a or j < i)
                for j, b in enumerate(rows) if j != i) for i, a in enumerate(rows)]


@pytest.mark.parametrize("seed", range(40))
def test_dominated_rows_match_the_definition(seed) -> None:
    """Small integer values make ties, duplicates and near-duplicates common; ``inf``
    entries are what priced-out options carry."""
    rng = np.random.default_rng(seed)
    rows, columns = int(rng.integers(1, 25)), int(rng.integers(1, 6))
    features = rng.integers(0, 3, size=(rows, columns)).astype(float)
    features[rng.random((rows, columns)) < 0.15] = np.inf
    features[rng.integers(0, rows, size=rows // 3)] = features[0]
    assert _dominated(features).tolist() == dominated_by_definition(features)


@pytest.mark.parametrize("seed", range(20))
def test_dominated_rows_match_the_definition_on_wide_rows(seed) -> None:
    """More columns than the screen and a pair chunk hold: rows made from a few base rows
    plus sparse non-negative bumps, so many pairs agree on the screened columns and differ
    (or not) only elsewhere."""
    rng = np.random.default_rng(seed)
    rows, columns = int(rng.integers(2, 30)), int(rng.integers(9, 150))
    base = rng.integers(0, 4, size=(3, columns)).astype(float)
    features = base[rng.integers(0, 3, size=rows)]
    features += (rng.random((rows, columns)) < 0.02) * rng.integers(-1, 3, size=(rows, columns))
    features[rng.random((rows, columns)) < 0.01] = np.inf
    assert _dominated(features).tolist() == dominated_by_definition(features)


def test_memory_impossible_option_is_dropped() -> None:
    p = ChoiceProblem(node_costs=[[1.0, 0.0], [0.0, 0.0]],
                      node_memory=[[1, 50], [2, 3]], memory_limit=10)
    work = build_work(p)
    assert prune_memory(work)
    assert work.table[0][:, 0].tolist() == [0]


def test_leaves_merge_into_the_hub() -> None:
    p = star(0, leaves=4, memory=False)
    work = build_work(p)
    assert merge_leaves(work)
    assert len(work.costs) == 1  # all leaves eliminated (memory does not distinguish them)


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), leaves=st.integers(1, 5), memory=st.booleans())
def test_leaf_merge_is_exact(seed: int, leaves: int, memory: bool) -> None:
    p = star(seed, leaves, memory)
    try:
        _, best = exhaustive(p)
    except Infeasible:
        with pytest.raises(Infeasible):
            solve(p, backend="highs")
        return
    work = build_work(p)
    merge_leaves(work)
    assert len(work.costs) < p.num_nodes
    ix = index_work(work)
    lifted = solve(p, backend="highs")
    assert lifted.objective == pytest.approx(best, rel=1e-12)
    # the reduced problem's own optimum (by enumeration over its options) is the same number
    grid = np.indices([c.size for c in ix.costs]).reshape(ix.n, -1)
    values = [ix.evaluate(grid[:, j]) if ix.fits(grid[:, j]) else np.inf
              for j in range(grid.shape[1])]
    assert min(values) == pytest.approx(best, rel=1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_single_option_nodes_fold_away_exactly(seed: int) -> None:
    """Nodes pinned to one option (as the periodic polish pins the tied layers) disappear from
    the reduced problem; the optimum, its objective and the pinned choices are unchanged."""
    from solver.reduce import fold_singletons

    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 4, size=7)
    costs = [rng.integers(0, 9, size=int(k)).astype(float) for k in sizes]
    pinned = {1: 0, 3: int(sizes[3]) - 1, 4: 1}
    for node, option in pinned.items():
        costs[node] = np.where(np.arange(sizes[node]) == option, costs[node], np.inf)
    edges = [(a, b, rng.integers(0, 9, size=(int(sizes[a]), int(sizes[b]))).astype(float))
             for a in range(7) for b in range(a + 1, 7) if rng.random() < 0.5]
    problem = ChoiceProblem(node_costs=costs, edges=edges)
    work = build_work(problem)
    folded = [node for node in pinned if work.adj[node]]
    assert fold_singletons(work)
    assert not any(node in work.costs for node in folded)
    _, best = exhaustive(problem)
    answer = solve(problem, backend="highs")
    assert answer.objective == pytest.approx(best, abs=1e-9)
    assert answer.optimal and answer.bound == pytest.approx(best, abs=1e-9)  # constants kept
    assert all(answer.choices[node] == option for node, option in pinned.items())


@pytest.mark.parametrize("seed", range(6))
def test_remembering_clean_nodes_reduces_exactly_as_much(seed, monkeypatch) -> None:
    """``reduce_work`` skips the dominance check of nodes whose inputs are the very arrays
    it found clean before; the reduced problem is the same as when every node is checked
    every time (a grid with ties, so reductions cascade over several rounds)."""
    from solver import reduce as reduce_module

    rng = np.random.default_rng(seed)
    side = 4
    costs = [rng.integers(0, 3, size=4).astype(float) for _ in range(side * side)]
    edges = [(a, b, rng.integers(0, 4, size=(4, 4)).astype(float))
             for a in range(side * side) for b in (a + 1, a + side)
             if b < side * side and (b != a + 1 or b % side)]
    problem = ChoiceProblem(node_costs=costs, edges=edges)
    checked = []
    real = reduce_module._dominated
    monkeypatch.setattr(reduce_module, "_dominated",
                        lambda f: checked.append(f.shape) or real(f))
    remembered = build_work(problem)
    reduce_module.reduce_work(remembered)
    with_cache = len(checked)
    monkeypatch.setattr(reduce_module, "_same_sources", lambda a, b: False)
    checked.clear()
    fresh = build_work(problem)
    reduce_module.reduce_work(fresh)
    assert with_cache < len(checked)
    assert remembered.size() == fresh.size()
    for node in fresh.nodes():
        assert np.array_equal(remembered.table[node], fresh.table[node])
        assert np.array_equal(remembered.costs[node], fresh.costs[node])
