"""The descent that polishes a plan the time limit cut short (``solver.descent``), and the
graph search that skips a model it has no time to build (``solver.backends.highs``).

Oracles: a brute force over every single-node change (the descent must end where none helps,
never dearer than it began, within every memory row), and exhaustive search of small
problems (``solver.exact``) for the plan a search out of time returns: never dearer than
each node's cheapest option on its own, and never below the optimum.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from solver import ChoiceProblem, graph_search, solve
from solver.backends import highs
from solver.compact import build_work, index_work
from solver.descent import descend
from solver.exact import exhaustive


def _random_problem(seed: int, nodes: int = 9, rows: int = 2) -> ChoiceProblem:
    """A random chain with skip edges (the shape of a residual stream) and memory rows that
    bind: every option has a weight in each row, and the limit is below the heaviest plan."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 5, size=nodes)
    costs = [rng.uniform(0, 10, size=s) for s in sizes]
    pairs = [(i, i + 1) for i in range(nodes - 1)] + [(i, i + 2) for i in range(0, nodes - 2, 3)]
    edges = [(u, v, rng.uniform(0, 10, size=(sizes[u], sizes[v]))) for u, v in pairs]
    if not rows:
        return ChoiceProblem(node_costs=costs, edges=edges)
    weights = [[(i, rng.uniform(0, 4, size=sizes[i])) for i in range(nodes)]
               for _ in range(rows)]
    limit = min(sum(float(w.max()) for _, w in row) for row in weights) * 0.8
    return ChoiceProblem(node_costs=costs, edges=edges, liveness=weights, memory_limit=limit)


def _indexed(problem: ChoiceProblem):
    return index_work(build_work(problem))


def _leanest(ix) -> np.ndarray:
    weight = [np.zeros(c.size) for c in ix.costs]
    for row in ix.rows:
        for i, vec in row:
            weight[i] = weight[i] + vec
    return np.array([int(np.argmin(w)) for w in weight])


@pytest.mark.parametrize("seed", range(40))
def test_descent_ends_where_no_single_change_helps(seed: int) -> None:
    ix = _indexed(_random_problem(seed))
    start = _leanest(ix)
    assert ix.fits(start)
    x = descend(ix, start)
    assert ix.fits(x)
    value = ix.evaluate(x)
    assert value <= ix.evaluate(start)
    for i in range(ix.n):  # brute force: every other option of every node, alone
        for option in range(ix.costs[i].size):
            y = x.copy()
            y[i] = option
            if ix.fits(y):
                assert ix.evaluate(y) >= value - 1e-9 * abs(value), (i, option)


def test_descent_leaves_a_windowed_problem_as_given() -> None:
    """Windows (layer-overlap maxima) are not pairwise: a move's change is not its local sum."""
    from tests.solver.test_windows import windowed_problem

    ix = _indexed(windowed_problem(0, nodes=5))
    assert ix.windows
    start = np.zeros(ix.n, dtype=np.intp)
    assert np.array_equal(descend(ix, start), start)


@pytest.mark.parametrize("seed", range(12))
def test_a_search_with_no_time_for_its_model_descends_from_the_cheapest_options(
        seed: int, monkeypatch) -> None:
    """No time to build the LP: the search neither builds it nor answers with each node's
    cheapest option as it stands, but with that plan descended, which the exhaustive optimum
    bounds from below."""
    rng = np.random.default_rng(seed + 1000)
    problem = _random_problem(seed, nodes=7, rows=0)

    def no_build(*args, **kwargs):
        raise AssertionError("the model was built with no time to solve it")

    monkeypatch.setattr(highs, "build", no_build)
    monkeypatch.setattr(highs, "BUILD_COLUMNS_PER_S", 1e-3)  # any model takes forever
    monkeypatch.setattr(graph_search, "lagrange_dp", lambda ix, deadline: None)  # no DP plan
    reductions = bool(rng.integers(2))
    answer = solve(problem, time_limit=60.0, backend="auto", reductions=reductions)
    cheapest = tuple(int(np.argmin(c)) for c in problem.node_costs)
    _, optimum = exhaustive(problem)
    assert answer.objective <= problem.evaluate(cheapest)
    assert answer.objective >= optimum - 1e-9
    if not reductions:  # the reductions change the problem the descent walks
        ix = _indexed(problem)
        polished = descend(ix, np.array(cheapest))
        assert answer.objective == pytest.approx(ix.evaluate(polished), rel=1e-12)
    assert not answer.optimal or math.isclose(answer.objective, optimum)
