"""The scale speedups keep the solver exact: series elimination and LP-first HiGHS.

Every optimum is compared with exhaustive search on the original problem (``solver.exact``
enumerates every assignment and shares no code with the reductions or the backends).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import solver.backends.highs as highs
from solver import ChoiceProblem, Infeasible, solve
from solver.compact import build_work, index_work
from solver.errors import NoFiniteOptionError
from solver.exact import exhaustive
from solver.reduce import eliminate_series_nodes, reduce_work


def ladder(seed: int, rungs: int, chords: int, memory: bool, inf_share: float = 0.0
           ) -> ChoiceProblem:
    """A chain with random chords (cycles), so degree-2 nodes sit next to degree-3 ones."""
    rng = np.random.default_rng(seed)
    n = rungs
    sizes = [int(v) for v in rng.integers(1, 4, size=n)]
    costs = [rng.integers(0, 10, size=s).astype(float) for s in sizes]
    pairs = [(i, i + 1) for i in range(n - 1)]
    for _ in range(chords):
        u, v = sorted(int(a) for a in rng.choice(n, size=2, replace=False))
        pairs.append((u, v))
    edges = []
    for u, v in pairs:
        matrix = rng.integers(0, 10, size=(sizes[u], sizes[v])).astype(float)
        matrix[rng.random(matrix.shape) < inf_share] = np.inf
        edges.append((u, v, matrix))
    mem = None
    limit = None
    if memory:
        mem = [np.zeros(s) if i % 2 else rng.integers(1, 9, size=s).astype(float)
               for i, s in enumerate(sizes)]
        limit = float(sum(m.min() for m in mem) + 5)
    return ChoiceProblem(node_costs=costs, edges=edges, node_memory=mem, memory_limit=limit)


def test_series_node_is_eliminated_with_its_argmin() -> None:
    # chain 0 - 1 - 2: node 1 (2 options) is eliminated; the new 0-2 edge is, by hand,
    # N[i, j] = min_k c1[k] + A[k, i] + B[k, j] with c1 = [0, 5].
    a = np.array([[0.0, 9.0], [0.0, 0.0]])  # node 1 option k vs node 0 option i
    b = np.array([[0.0, 9.0], [0.0, 0.0]])  # node 1 option k vs node 2 option j
    p = ChoiceProblem(node_costs=[[0.0, 1.0], [0.0, 5.0], [0.0, 1.0]],
                      edges=[(1, 0, a), (1, 2, b)])
    work = build_work(p)
    assert eliminate_series_nodes(work)
    assert sorted(work.costs) == [0, 2]
    assert work.adj[0][2].tolist() == [[0.0, 5.0], [5.0, 5.0]]
    assert work.eliminated[0].best.tolist() == [[0, 1], [1, 1]]
    lifted = work.lift({0: 1, 2: 1}, 3)
    assert lifted == (1, 1, 1)  # node 1 takes option 1 (5) rather than option 0 (9 + 9)


def test_node_in_a_memory_row_is_kept() -> None:
    p = ChoiceProblem(node_costs=[[0.0, 1.0]] * 3,
                      edges=[(0, 1, np.eye(2)), (1, 2, np.eye(2))],
                      node_memory=[[0, 0], [1, 2], [0, 0]], memory_limit=10)
    work = build_work(p)
    assert not eliminate_series_nodes(work)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), rungs=st.integers(3, 8), chords=st.integers(0, 3),
       memory=st.booleans(), inf_share=st.sampled_from([0.0, 0.2]))
def test_reductions_keep_the_exhaustive_optimum(seed: int, rungs: int, chords: int,
                                                memory: bool, inf_share: float) -> None:
    p = ladder(seed, rungs, chords, memory, inf_share)
    try:
        _, expected = exhaustive(p)
    except (Infeasible, NoFiniteOptionError):
        return  # no finite plan: covered by the api tests
    if not np.isfinite(expected):
        return
    work = build_work(p)
    reduce_work(work)
    ix = index_work(work)
    # the reduced problem's exhaustive optimum, lifted, costs the original optimum
    best = min((x for x in np.ndindex(*[c.size for c in ix.costs]) if ix.fits(np.array(x))),
               key=lambda x: ix.evaluate(np.array(x)))
    choices = work.lift({node: int(best[i]) for i, node in enumerate(ix.ids)}, p.num_nodes)
    assert np.isclose(p.evaluate(choices), expected)
    if p.memory_limit is not None:
        assert p.peak_memory(choices) <= p.memory_limit
    for backend in ("highs", "auto"):
        sol = solve(p, backend=backend)
        assert sol.optimal
        assert np.isclose(sol.objective, expected)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), rungs=st.integers(3, 7), chords=st.integers(0, 3),
       memory=st.booleans())
def test_lp_first_and_mip_only_agree_with_exhaustive(seed: int, rungs: int, chords: int,
                                                     memory: bool) -> None:
    p = ladder(seed, rungs, chords, memory)
    _, expected = exhaustive(p)
    answers = []
    for lp_first in (True, False):
        highs.LP_FIRST = lp_first
        try:
            answers.append(solve(p, backend="highs", reductions=False))
        finally:
            highs.LP_FIRST = True
    for sol in answers:
        assert sol.optimal
        assert np.isclose(sol.objective, expected)
        assert sol.bound <= expected + 1e-9 * max(1.0, abs(expected))


def test_fractional_lp_falls_back_to_the_mip() -> None:
    # A frustrated triangle (anti-ferromagnet on an odd cycle): the local-polytope LP optimum
    # is x = 1/2 everywhere (cost 0), the integral optimum pays 1 on one edge.
    differ = np.array([[1.0, 0.0], [0.0, 1.0]])
    p = ChoiceProblem(node_costs=[[0.0, 0.0]] * 3,
                      edges=[(0, 1, differ), (1, 2, differ), (0, 2, differ)])
    sol = solve(p, backend="highs", reductions=False)
    assert sol.optimal
    assert sol.objective == 1.0
