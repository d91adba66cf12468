"""The all-sources reshard search against networkx's Dijkstra over the same moves.

Oracle: the moves of ``reshard_state.moves_from`` priced by ``Pricer`` and handed to
``networkx.single_source_dijkstra_path_length``, one source at a time. The two must agree on
every (source, target) price to rounding (1e-12 relative: the two may add the same path's steps
in the same order but pick different paths among equal sums). Also checked: sharing one move
graph between shapes that divide alike changes no price, and the gcd shape divides exactly
like the real one.
"""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest

from autoshard.reshard.convert import to_sharding
from autoshard.reshard.find import clear_caches, reshard_cost_matrix
from autoshard.reshard.search import Pricer, divisibility_shape
from autoshard.reshard.state import enumerate_states, is_divisible, moves_from
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from costmodel import get_preset

TOPOLOGY = get_preset("dgx-h100")
HBM_BW = float(TOPOLOGY.device.hbm_bw_bytes_per_s)


def _mesh(sizes: tuple[int, ...]) -> Mesh:
    return Mesh(axes=tuple((f"a{i}", n) for i, n in enumerate(sizes)))


def _dijkstra_rows(sizes, shape, itemsize, links, hbm_bw, allowed, sources):
    """Cheapest seconds from each source, by networkx over the moves reachable from it."""
    pricer = Pricer(links=links, axis_names=tuple(links.mesh.axis_names), device_hbm_bw=hbm_bw)
    total = float(math.prod(shape) * itemsize)
    graph = nx.DiGraph()
    todo, seen = list(sources), set(sources)
    while todo:
        state = todo.pop()
        graph.add_node(state)
        for move in moves_from(state, sizes, shape, allowed, multi_axis_slices=hbm_bw is not None):
            seconds = pricer.seconds(move.kind, move.axes, total / move.bytes_divisor)
            old = graph.get_edge_data(state, move.after)
            if old is None or seconds < old["weight"]:
                graph.add_edge(state, move.after, weight=seconds)
            if move.after not in seen:
                seen.add(move.after)
                todo.append(move.after)
    return [nx.single_source_dijkstra_path_length(graph, s) for s in sources]


CASES = [
    ((8,), (64, 32)),
    ((2, 4), (8, 2048, 4096)),
    ((4, 2), (6, 8)),  # dim 0 divides by 2 only
    ((2, 2, 2), (8, 16, 4)),
    ((4, 4, 2), (8, 4096, 32, 128)),
    ((2, 3), (6, 12)),
]


@pytest.mark.parametrize(("sizes", "shape"), CASES, ids=[str(c) for c in CASES])
@pytest.mark.parametrize("hbm_bw", [None, HBM_BW], ids=["free-slices", "priced-slices"])
def test_matrix_equals_dijkstra(sizes: tuple[int, ...], shape: tuple[int, ...],
                                hbm_bw: float | None) -> None:
    mesh = _mesh(sizes)
    links = MeshLinks.build(mesh, TOPOLOGY)
    states = enumerate_states(sizes, shape)
    shardings = [to_sharding(mesh, len(shape), s) for s in states]
    rng = np.random.default_rng(len(states))
    picks = sorted(rng.choice(len(states), size=min(12, len(states)), replace=False))
    clear_caches()
    matrix = reshard_cost_matrix([shardings[i] for i in picks], shardings, shape, 2, links,
                                 hbm_bw)
    by_allowed: dict = {}
    for j, state in enumerate(states):
        by_allowed.setdefault(state[1], []).append(j)
    compared = 0
    for allowed, columns in by_allowed.items():
        rows = _dijkstra_rows(sizes, shape, 2, links, hbm_bw, allowed,
                              [states[i] for i in picks])
        for r, i in enumerate(picks):
            for j in columns:
                expected = 0.0 if i == j else rows[r].get(states[j], math.inf)
                got = matrix[r, j]
                if math.isinf(expected):
                    assert math.isinf(got), (states[i], states[j])
                else:
                    assert got == pytest.approx(expected, rel=1e-12, abs=0.0), \
                        (states[i], states[j])
                    compared += 1
    assert compared > len(picks) * len(states) // 2  # most pairs are reachable


@pytest.mark.parametrize(("sizes", "shape"), CASES, ids=[str(c) for c in CASES])
def test_divisibility_shape_divides_like_the_shape(sizes, shape) -> None:
    small = divisibility_shape(sizes, shape)
    choices = list(range(-1, len(shape)))
    for assignment in itertools.product(choices, repeat=len(sizes)):
        dims = tuple(tuple(a for a, d in enumerate(assignment) if d == k)
                     for k in range(len(shape)))
        assert is_divisible(dims, sizes, small) == is_divisible(dims, sizes, shape)


def test_shapes_sharing_a_move_graph_price_as_if_alone() -> None:
    """(8, 4096, 14336) and (8, 4096, 128256) share a move graph on 4×4×4; each one's matrix
    is the same whether the other was priced first or not."""
    mesh = _mesh((4, 4, 4))
    links = MeshLinks.build(mesh, TOPOLOGY)
    first, second = (8, 4096, 14336), (8, 4096, 128256)
    assert divisibility_shape((4, 4, 4), first) == divisibility_shape((4, 4, 4), second)
    states = enumerate_states((4, 4, 4), first)
    shardings = [to_sharding(mesh, 3, s) for s in states][::3]
    clear_caches()
    alone = reshard_cost_matrix(shardings, shardings, second, 2, links, HBM_BW)
    clear_caches()
    reshard_cost_matrix(shardings[::2], shardings, first, 2, links, HBM_BW)
    shared = reshard_cost_matrix(shardings, shardings, second, 2, links, HBM_BW)
    assert np.array_equal(alone, shared)


def test_moves_do_not_depend_on_which_partial_sets_were_asked_before() -> None:
    """``moves_from`` memoizes the moves that do not depend on the target's Partial axes:
    asked after other Partial sets (cache warm) it lists exactly what a cold call lists,
    and each list offers ``replicated_to_partial`` only on the axes it was given."""
    from autoshard.reshard import state as st

    sizes, shape = (2, 4, 8), (64, 64, 8)
    sets = [(), ((1, "sum"),), ((0, "sum"), (2, "sum")), ((0, "sum"), (1, "sum"), (2, "sum"))]
    states = st.enumerate_states(sizes, shape)[::7]
    warm = {(s, allowed): st.moves_from(s, sizes, shape, allowed)
            for allowed in sets for s in states}
    for (s, allowed), moves in warm.items():
        st._moves_but_to_partial.cache_clear()
        assert moves == st.moves_from(s, sizes, shape, allowed)
        made_partial = {m.axes for m in moves if m.kind == st.REPLICATED_TO_PARTIAL}
        used = st.used_axes(s)
        assert made_partial == {(a,) for a, _ in allowed if a not in used}


@pytest.mark.parametrize("chunk", [2, 16], ids=["chunks-of-2", "one-chunk"])
@pytest.mark.parametrize(("sizes", "shape"), CASES, ids=[str(c) for c in CASES])
def test_frontier_levels_equal_relaxing_every_move(sizes, shape, chunk, monkeypatch) -> None:
    """``PricedSpace._levels`` relaxes only moves out of states that improved a round
    earlier, for a few sources at a time; level by level its floats must be those of
    relaxing every move every round for all sources together, written here as the
    Bellman-Ford rounds read (with chunks of 2, five chunks settle at different rounds)."""
    from autoshard.reshard import find, search

    monkeypatch.setattr(search, "SOURCE_CHUNK", chunk)

    mesh = _mesh(sizes)
    links = MeshLinks.build(mesh, TOPOLOGY)
    states = enumerate_states(sizes, shape)
    shardings = [to_sharding(mesh, len(shape), s) for s in states]
    clear_caches()
    reshard_cost_matrix(shardings[:6], shardings, shape, 2, links, HBM_BW)
    checked = 0
    for space in find._SPACES.values():
        edges = space.graph.edges()
        weights = space._edge_weights(edges)
        sources = list(range(min(edges.states, 9)))
        got = space._levels(sources)
        current = np.full((len(sources), edges.states), math.inf)
        current[np.arange(len(sources)), sources] = 0.0
        expected = [current]
        while True:
            improved = current.copy()
            for e in range(len(edges.src)):
                target = int(np.searchsorted(edges.group_starts, e, side="right") - 1)
                target = int(edges.group_targets[target])
                improved[:, target] = np.minimum(improved[:, target],
                                                 current[:, edges.src[e]] + weights[e])
            if np.array_equal(improved, current):
                break
            expected.append(improved)
            current = improved
        assert np.array_equal(got, np.stack(expected))
        checked += 1
    assert checked
