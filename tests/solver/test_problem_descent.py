"""The descent on a problem as given (``solver.problem_descent``), which polishes the leanest
plan a memory-bound chain returns when its time ran out before any search did.

Oracles: a brute force over every single-node change, checked against the problem's own
``evaluate`` and ``peak_memory`` (the descent keeps running sums over runs of rows; the
check does not): the result fits, is never dearer than its start, and no single change of a
node that may move makes it cheaper while fitting. Rows given as spans and written out term
by term must give the same plan.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from solver import ChoiceProblem, api, solve
from solver.api import leanest
from solver.exact import exhaustive
from solver.problem_descent import descend_problem
from solver.span_rows import SpanRows
from tests.solver.test_descent import _random_problem
from tests.solver.test_memory_price import with_peak_rows
from tests.solver.test_periodic import chain_problem
from tests.solver.test_span_rows import _random_spans, _written_out


def _fits(problem: ChoiceProblem, choices) -> bool:
    peak = problem.peak_memory(choices)
    return peak is None or problem.memory_limit is None or peak <= problem.memory_limit


def _local_optimum(problem: ChoiceProblem, choices, frozen=frozenset()) -> None:
    value = problem.evaluate(choices)
    for node, size in enumerate(problem.sizes):
        if node in frozen:
            continue
        for option in range(size):
            other = list(choices)
            other[node] = option
            if _fits(problem, other):
                assert problem.evaluate(other) >= value - 1e-9 * abs(value), (node, option)


@pytest.mark.parametrize("seed", range(30))
def test_rows_term_by_term(seed: int) -> None:
    problem = _random_problem(seed)
    start = leanest(problem)
    assert start is not None
    found = descend_problem(problem, start)
    assert _fits(problem, found) and problem.evaluate(found) <= problem.evaluate(start)
    _local_optimum(problem, found)


@pytest.mark.parametrize("seed", range(20))
def test_rows_as_spans_walk_as_the_rows_written_out(seed: int) -> None:
    rng = np.random.default_rng(900 + seed)
    sizes = [int(s) for s in rng.integers(2, 5, 7)]
    count = 8
    spans = _random_spans(rng, sizes, count, whole=True)
    costs = [rng.uniform(0, 10, s) for s in sizes]
    edges = [(k, k + 1, rng.uniform(0, 5, (sizes[k], sizes[k + 1]))) for k in range(6)]
    edges += [(0, 6, rng.uniform(0, 5, (sizes[0], sizes[6])))]
    rows = SpanRows(spans, count)
    least = max(rows.sums().least_sums().tolist(), default=0.0)
    most = max((sum(float(v.max()) for _, v in row) for row in rows), default=0.0)
    limit = least + 0.5 * (most - least)
    as_spans = ChoiceProblem(node_costs=costs, edges=edges, liveness=rows, memory_limit=limit)
    as_rows = ChoiceProblem(node_costs=costs, edges=edges, liveness=_written_out(spans, count),
                            memory_limit=limit)
    start = leanest(as_spans)
    assert start is not None
    found = descend_problem(as_spans, start)
    assert found == descend_problem(as_rows, start)
    assert _fits(as_spans, found) and as_spans.evaluate(found) <= as_spans.evaluate(start)
    _local_optimum(as_spans, found)


def test_tied_nodes_do_not_move() -> None:
    problem = _random_problem(3, rows=0)
    a, b = next((u, v) for u in range(problem.num_nodes) for v in range(u + 1, problem.num_nodes)
                if problem.sizes[u] == problem.sizes[v])
    tied = ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges, groups=((a, b),))
    start = tuple(int(np.argmax(c)) if n in (a, b) else 0
                  for n, c in enumerate(tied.node_costs))
    found = descend_problem(tied, start)
    assert (found[a], found[b]) == (start[a], start[b])
    _local_optimum(tied, found, frozen={a, b})


@pytest.mark.parametrize("seed", range(6))
def test_a_chain_out_of_time_returns_the_leanest_plan_descended(seed: int,
                                                                 monkeypatch) -> None:
    """No priced plan and no time left: the answer fits, costs no more than the leanest plan
    and is where the descent from it ends."""
    problem = with_peak_rows(chain_problem(seed, 5, 2, 3, 1), seed, slack=2.0)
    monkeypatch.setattr(api, "solve_priced", lambda *args, **kwargs: None)
    answer = solve(problem, time_limit=1e-9)
    lean = leanest(problem)
    assert lean is not None
    assert answer.objective == pytest.approx(problem.evaluate(descend_problem(problem, lean)))
    assert answer.objective <= problem.evaluate(lean)
    assert _fits(problem, answer.choices) and not math.isinf(answer.objective)


@pytest.mark.parametrize("seed", range(4))
def test_a_cut_short_chain_answer_is_polished_and_keeps_its_bound(seed: int,
                                                                   monkeypatch) -> None:
    """Whatever a chain's search returns at its time limit (here: each node's dearest
    option), the answer is that plan descended, with a bound still below the optimum."""
    from solver.graph_search import finish, sizes_of
    from solver.solution import SolveStatus

    problem = chain_problem(seed, 5, 2, 3, 1)
    dearest = tuple(int(np.argmax(c)) for c in problem.node_costs)

    def cut_short(problem, chain, clock, gap, before, **kwargs):
        return finish(problem, dearest, 0.0, True, clock, "periodic", before, sizes_of(problem))

    monkeypatch.setattr(api, "solve_periodic", cut_short)
    answer = solve(problem, time_limit=60.0)
    _, optimum = exhaustive(problem)
    assert answer.status is SolveStatus.TIME_LIMIT
    assert answer.bound <= optimum + 1e-9 <= answer.objective + 2e-9
    assert answer.choices == descend_problem(problem, dearest)
    assert answer.objective < problem.evaluate(dearest)
    _local_optimum(problem, answer.choices)
