"""Flow networks for edges: routes price every pair exactly, never less, and LPs agree.

The independent checks: all-pairs shortest paths over the network (Floyd–Warshall in NumPy,
sharing nothing with ``flow_arcs``) must reproduce the dense matrix; the LP written with flow
networks must have the optimum of the LP written with dense pairs; and a matrix that *is* a
shortest-path metric of a sparse graph must come back with no more arcs than that graph.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import ChoiceProblem
from solver.backends.flow_arcs import _column_network, _mirror, flow_arcs
from solver.backends.formulation import build
from solver.backends.lp import solve_lp
from solver.compact import build_work, index_work


def shortest_paths(arcs, n: int) -> np.ndarray:
    dist = np.full((n, n), np.inf)
    np.fill_diagonal(dist, 0.0)
    for t, h, c in zip(arcs.tails, arcs.heads, arcs.costs, strict=True):
        dist[t, h] = min(dist[t, h], c)
    for k in range(n):
        dist = np.minimum(dist, dist[:, k:k + 1] + dist[k:k + 1, :])
    return dist


def random_matrix(seed: int, rows: int, cols: int, holes: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.integers(0, 6, size=(rows, cols)).astype(float)  # integers: many exact ties
    matrix[rng.random((rows, cols)) < holes] = np.inf
    return matrix


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(3, 9), cols=st.integers(3, 9),
       holes=st.sampled_from([0.0, 0.2, 0.6]))
def test_routes_reproduce_every_pair_and_never_undercut(seed, rows, cols, holes):
    """Both networks (detours among columns, and the mirror among rows) are checked on every
    example, not only the one ``flow_arcs`` would pick."""
    matrix = np.unique(np.unique(random_matrix(seed, rows, cols, holes), axis=0), axis=1)
    nr, nc = matrix.shape
    finite = np.isfinite(matrix)
    if not finite.any():
        return
    networks = [_column_network(matrix), _mirror(_column_network(matrix.T), nr, nc)]
    for arcs in networks:
        dist = shortest_paths(arcs, nr + nc)[:nr, nr:]
        assert np.array_equal(np.isfinite(dist), finite)
        np.testing.assert_allclose(dist[finite], matrix[finite], rtol=1e-9, atol=0)


def test_a_graph_metric_needs_no_more_arcs_than_its_graph():
    """Rows and columns are the nodes of a sparse graph (a layout graph's shape: single
    collective steps), the matrix its distances; the network keeps the graph's arcs at most,
    plus one zero-cost arc per node, instead of all n² pairs."""
    graph = nx.random_regular_graph(4, 60, seed=3).to_directed()
    rng = np.random.default_rng(5)
    for t, h in graph.edges:
        graph.edges[t, h]["w"] = float(rng.uniform(1.0, 2.0))
    lengths = dict(nx.all_pairs_dijkstra_path_length(graph, weight="w"))
    matrix = np.array([[lengths[a][b] for b in range(60)] for a in range(60)])
    arcs = flow_arcs(matrix)
    assert arcs is not None
    assert arcs.size <= graph.number_of_edges() + 60
    dist = shortest_paths(arcs, 120)[:60, 60:]
    np.testing.assert_allclose(dist, matrix, rtol=1e-9)


def graph_metric(rng: np.random.Generator, options: int) -> np.ndarray:
    """Distances over a random sparse digraph of options, like reshard costs."""
    graph = nx.gnp_random_graph(options, 0.3, seed=int(rng.integers(1 << 30)), directed=True)
    graph.add_edges_from((i, (i + 1) % options) for i in range(options))  # strongly connected
    for t, h in graph.edges:
        graph.edges[t, h]["w"] = float(rng.integers(1, 5))
    lengths = dict(nx.all_pairs_dijkstra_path_length(graph, weight="w"))
    return np.array([[lengths[a][b] for b in range(options)] for a in range(options)])


def chain_of_edges(seed: int, nodes: int, options: int) -> ChoiceProblem:
    """Edges alternate reshard-like metrics and arbitrary matrices with holes."""
    rng = np.random.default_rng(seed)
    costs = [rng.integers(0, 9, size=options).astype(float) for _ in range(nodes)]
    edges = [(a, b, graph_metric(rng, options) if (a + b) % 2 else
              random_matrix(seed + 7 * a + b, options, options, 0.1))
             for a in range(nodes) for b in range(a + 1, nodes) if rng.random() < 0.6]
    return ChoiceProblem(node_costs=costs, edges=edges)


@pytest.mark.parametrize("seed", range(8))
def test_flow_lp_has_the_dense_lp_optimum(seed):
    problem = chain_of_edges(seed, nodes=6, options=9)
    ix = index_work(build_work(problem))
    dense, flow = build(ix), build(ix, flow=True)
    dense_bound = solve_lp(dense, None).bound
    flow_bound = solve_lp(flow, None).bound
    assert math.isfinite(dense_bound)
    assert flow_bound == pytest.approx(dense_bound, rel=1e-9, abs=1e-9)
    assert flow.num_vars < dense.num_vars  # the network did replace some pairs
    assert any((network.variables < 0).any() for network in flow.flow_maps)  # substituted


@pytest.mark.parametrize("seed", range(8))
def test_hint_is_feasible_and_priced_like_the_problem(seed):
    """The MIP runs on the flow networks with a hinted plan: the hint must satisfy every row
    and cost exactly what the dense matrices say the plan costs."""
    problem = chain_of_edges(seed, nodes=6, options=9)
    ix = index_work(build_work(problem))
    form = build(ix, flow=True)
    assert form.flow_maps  # some edges are networks
    # and some network nodes have one arc, which ``flow_edge`` substitutes away
    assert any((flow.variables < 0).any() for flow in form.flow_maps)
    rng = np.random.default_rng(seed)
    matrix = np.zeros((form.row_lo.size, form.num_vars))
    np.add.at(matrix, (form.rows, form.cols), form.coefs)
    checked = 0
    for _ in range(30):
        x = np.array([rng.integers(c.size) for c in ix.costs])
        if not math.isfinite(ix.evaluate(x)):
            continue
        checked += 1
        values = form.hint(x)
        sums = matrix @ values
        assert np.all(sums >= form.row_lo - 1e-9) and np.all(sums <= form.row_hi + 1e-9)
        assert form.obj @ values + form.constant == pytest.approx(ix.evaluate(x), rel=1e-12)
    assert checked  # some random plan had a finite price


@pytest.mark.parametrize("seed", range(4))
def test_flow_mip_finds_the_exhaustive_optimum(seed, monkeypatch):
    """With the LP switched off the MIP alone, on the flow networks, must reach the optimum."""
    from solver import solve
    from solver.backends import highs
    from solver.exact import exhaustive

    monkeypatch.setattr(highs, "LP_FIRST", False)
    problem = chain_of_edges(seed, nodes=5, options=6)
    _, best = exhaustive(problem)
    answer = solve(problem, backend="highs", reductions=False)
    assert answer.optimal
    assert answer.objective == pytest.approx(best, abs=1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), rows=st.integers(1, 9), cols=st.integers(1, 9),
       holes=st.sampled_from([0.0, 0.2, 0.6, 1.0]))
def test_row_by_row_detours_and_min_plus_equal_the_whole_cubes(seed, rows, cols, holes):
    """The differences and sums taken one row (one inner index) at a time give the very
    floats of the whole rows × cols × cols cube, written here as the formulas read."""
    from solver.backends.flow_arcs import _detours, _min_plus

    matrix = random_matrix(seed, rows, cols, holes)
    dense = bool(np.isfinite(matrix).all())
    with np.errstate(invalid="ignore"):
        cube = matrix[:, None, :] - matrix[:, :, None]  # [r, k, c]
        expected = cube.max(axis=0) if dense else np.fmax.reduce(cube, axis=0)
    expected[np.isnan(expected)] = -np.inf
    assert np.array_equal(_detours(matrix, dense), expected)
    other = random_matrix(seed + 1, cols, rows, holes)
    sums = (matrix[:, :, None] + other[None, :, :]).min(axis=1)
    assert np.array_equal(_min_plus(matrix, other), sums)


def repeated_chain(seed: int, nodes: int = 5, options: int = 6) -> ChoiceProblem:
    """A chain whose edges repeat two matrices (equal bytes, separate arrays, some
    transposed shapes), as a periodic LP's end blocks do."""
    rng = np.random.default_rng(seed)
    first, second = (random_matrix(seed + k, options, options, 0.2) for k in (1, 2))
    for matrix in (first, second):
        matrix[:, 0] = rng.integers(0, 3, size=options)  # every row keeps a finite entry
    costs = [rng.integers(0, 4, size=options).astype(float) for _ in range(nodes)]
    edges = [(i, i + 1, (first if i % 2 else second).copy()) for i in range(nodes - 1)]
    return ChoiceProblem(node_costs=costs, edges=edges)


@pytest.mark.parametrize("seed", range(6))
def test_repeated_matrices_share_their_groups_and_networks(seed, monkeypatch):
    """Edges with equal matrix bytes reuse one grouping and one network: the LP is the
    very one built with both caches defeated, and its MIP reaches the exhaustive optimum."""
    from solver import solve
    from solver.backends import formulation, highs
    from solver.exact import exhaustive

    problem = repeated_chain(seed)
    ix = index_work(build_work(problem))
    cached = build(ix, flow=True)

    def uncached(self, matrix):  # what ``edge`` did before the cache, every time
        rows_u, inv_r = np.unique(matrix, axis=0, return_inverse=True)
        agg, inv_c = np.unique(rows_u, axis=1, return_inverse=True)
        return agg, inv_r.ravel(), inv_c.ravel()

    monkeypatch.setattr(formulation._Builder, "grouped", uncached)
    monkeypatch.setattr(formulation._Builder, "arcs_for",
                        lambda self, agg: formulation.flow_arcs(agg))
    fresh = build(ix, flow=True)
    for name in ("rows", "cols", "coefs", "row_lo", "row_hi", "obj"):
        assert np.array_equal(getattr(cached, name), getattr(fresh, name)), name
    monkeypatch.undo()
    monkeypatch.setattr(highs, "LP_FIRST", False)
    _, best = exhaustive(problem)
    answer = solve(problem, backend="highs", reductions=False)
    assert answer.optimal and answer.objective == pytest.approx(best, abs=1e-9)


def test_a_later_build_reuses_the_networks_and_is_the_same_lp(monkeypatch):
    """Networks outlive one LP build (a shared-reshard round or a memory price's probe
    builds its LP over the matrices the last one had): the second build of a problem
    computes none, and its LP is the first's, array for array."""
    from solver.backends import formulation

    monkeypatch.setattr(formulation, "_networks", formulation._Networks())
    computed: list[bytes] = []
    real = formulation.flow_arcs

    def counted(agg):
        computed.append(agg.tobytes())
        return real(agg)

    monkeypatch.setattr(formulation, "flow_arcs", counted)
    ix = index_work(build_work(repeated_chain(0, options=8)))
    first = build(ix, flow=True)
    assert computed and len(computed) == len(set(computed))  # each matrix once
    computed.clear()
    second = build(ix, flow=True)
    assert not computed
    for name in ("rows", "cols", "coefs", "row_lo", "row_hi", "obj"):
        assert np.array_equal(getattr(first, name), getattr(second, name)), name


def test_the_network_cache_keeps_to_its_budget(monkeypatch):
    """Least recently used networks go once their matrices' bytes pass the budget; one
    asked for again after it went is computed again, the same network."""
    from solver.backends import formulation

    matrices = [random_matrix(seed, 6, 6, 0.0) for seed in range(5)]
    size = matrices[0].nbytes
    monkeypatch.setattr(formulation, "NETWORK_CACHE_BYTES", 3 * size)
    cache = formulation._Networks()
    computed: list[int] = []
    real = formulation.flow_arcs
    monkeypatch.setattr(formulation, "flow_arcs",
                        lambda agg: computed.append(1) or real(agg))
    first = cache(matrices[0])
    for matrix in matrices[1:]:
        cache(matrix)
        assert cache.bytes <= 3 * size
    assert len(computed) == 5
    cache(matrices[4])  # still held
    assert len(computed) == 5
    again = cache(matrices[0])  # the oldest went
    assert len(computed) == 6
    assert (first is None) == (again is None)
    if first is not None:
        for name in ("tails", "heads", "costs"):
            assert np.array_equal(getattr(first, name), getattr(again, name))
