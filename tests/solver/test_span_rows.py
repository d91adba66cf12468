"""Liveness rows given as spans against the same rows written out term by term."""

from __future__ import annotations

import itertools
import math
import pickle

import numpy as np
import pytest

from solver import ChoiceProblem, InvalidProblemError, Span, SpanRows, solve
from solver.block_mix import best_mix
from solver.row_sums import RowSums


def _random_spans(rng: np.random.Generator, sizes: list[int], count: int,
                  whole: bool) -> list[Span]:
    """Spans of random nodes over random runs of rows, a node's runs disjoint (as the
    planner's memory model makes them), some over every row; whole-number bytes when
    ``whole`` (byte counts), else any floats."""
    spans = []
    for node, size in enumerate(sizes):
        cuts = sorted(set(rng.integers(0, count + 1, size=int(rng.integers(2, 6))).tolist()))
        for first, stop in itertools.pairwise(cuts):
            if rng.random() < 0.7:
                vector = (rng.integers(0, 2**40, size) if whole else rng.uniform(0, 1e9, size))
                spans.append(Span(node=node, vector=np.asarray(vector, dtype=np.float64),
                                  first=int(first), stop=int(stop)))
    return spans


def _written_out(spans: list[Span], count: int) -> list[tuple]:
    """The rows term by term: row k holds every span covering k, in order of node."""
    return [tuple((s.node, s.vector) for s in sorted(spans, key=lambda s: (s.node, s.first))
                  if s.first <= k < s.stop) for k in range(count)]


@pytest.mark.parametrize("seed", range(20))
def test_rows_are_the_spans_written_out(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(1, 5, 6)]
    count = int(rng.integers(1, 15))
    spans = _random_spans(rng, sizes, count, whole=bool(seed % 2))
    rows = SpanRows(spans, count)
    expected = _written_out(spans, count)
    assert len(rows) == count
    for got, want in zip(rows, expected, strict=True):
        assert [n for n, _ in got] == [n for n, _ in want]
        assert all(np.array_equal(a, b) for (_, a), (_, b) in zip(got, want, strict=True))
    assert [len(r) for r in rows[::-1]] == [len(r) for r in expected[::-1]]
    assert len(rows[-1]) == len(expected[-1])


@pytest.mark.parametrize("seed", range(20))
def test_sums_match_term_by_term(seed: int) -> None:
    """Floats agree with a term-by-term ``fsum`` to rounding; whole numbers (byte counts)
    give the compiled term-by-term sums bit for bit, so plans do not change."""
    rng = np.random.default_rng(50 + seed)
    sizes = [int(s) for s in rng.integers(1, 5, 6)]
    count = int(rng.integers(1, 15))
    whole = bool(seed % 2)
    spans = _random_spans(rng, sizes, count, whole)
    rows = SpanRows(spans, count)
    written = _written_out(spans, count)
    reference = RowSums.compile(written)
    compiled = rows.sums()
    for _ in range(10):
        choices = [int(rng.integers(s)) for s in sizes]
        expected = [math.fsum(float(v[choices[n]]) for n, v in row) for row in written]
        got = compiled.sums(choices)
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-3)
        if whole:
            assert got.tolist() == expected == reference.sums(choices).tolist()
    least = [math.fsum(float(v.min()) for _, v in row) for row in written]
    assert compiled.least_sums() == pytest.approx(least, rel=1e-12, abs=1e-3)
    assert reference.least_sums() == pytest.approx(least, rel=1e-12, abs=1e-3)
    totals = [np.zeros(s) for s in sizes]
    for row in written:
        for node, vector in row:
            totals[node] = totals[node] + vector
    for got, want in zip(compiled.node_totals(sizes), totals, strict=True):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-3)


@pytest.mark.parametrize("seed", range(10))
def test_switch_deltas_are_the_row_sums_of_each_switch(seed: int) -> None:
    """Per unit, what switching its nodes from one plan to the other adds to each row: the
    difference of the two plans' row sums (whole numbers: exact), for spans and rows alike."""
    rng = np.random.default_rng(200 + seed)
    sizes = [int(s) for s in rng.integers(1, 5, 8)]
    count = int(rng.integers(1, 12))
    spans = _random_spans(rng, sizes, count, whole=True)
    units = int(rng.integers(1, 4))
    unit = rng.integers(0, units, len(sizes))
    cheap = np.array([int(rng.integers(s)) for s in sizes])
    fitting = np.array([int(rng.integers(s)) for s in sizes])
    written = RowSums.compile(_written_out(spans, count))
    for compiled in (SpanRows(spans, count).sums(), written):
        base, deltas = compiled.switch_deltas(unit, units, cheap, fitting)
        assert base.tolist() == written.sums(fitting).tolist()
        for u in range(units):
            switched = np.where(unit == u, cheap, fitting)
            assert (base + deltas[:, u]).tolist() == written.sums(switched).tolist()


@pytest.mark.parametrize("seed", range(6))
def test_a_problem_answers_the_same_with_spans_or_rows(seed: int) -> None:
    """The same memory-bound problem given its rows as spans and written out: the same
    peaks, memory totals, optimum (exhaustive search) and block mix."""
    rng = np.random.default_rng(300 + seed)
    sizes = [int(s) for s in rng.integers(2, 4, 5)]
    count = 6
    spans = _random_spans(rng, sizes, count, whole=True)
    costs = [rng.uniform(0, 10, s) for s in sizes]
    edges = [(k, k + 1, rng.uniform(0, 5, (sizes[k], sizes[k + 1]))) for k in range(4)]
    written = _written_out(spans, count)
    peaks = [max((sum(float(v[c[n]]) for n, v in row) for row in written), default=0.0)
             for c in np.ndindex(*sizes)]
    limit = float(np.median(peaks))
    as_spans = ChoiceProblem(node_costs=costs, edges=edges, liveness=SpanRows(spans, count),
                             memory_limit=limit)
    as_rows = ChoiceProblem(node_costs=costs, edges=edges, liveness=written, memory_limit=limit)
    for choices in np.ndindex(*sizes):
        assert as_spans.peak_memory(choices) == as_rows.peak_memory(choices)
    for a, b in zip(as_spans.memory_totals(), as_rows.memory_totals(), strict=True):
        assert a.tolist() == b.tolist()
    for backend in ("exhaustive", "auto"):
        x, y = solve(as_spans, backend=backend), solve(as_rows, backend=backend)
        assert (x.choices, x.objective) == (y.choices, y.objective)
    cheap = tuple(int(np.argmin(c)) for c in costs)
    fitting = solve(as_rows, backend="exhaustive").choices
    units = [[0, 1], [2], [3, 4]]
    assert best_mix(as_spans, units, cheap, fitting, None) \
        == best_mix(as_rows, units, cheap, fitting, None)


def test_spans_survive_pickling() -> None:
    spans = [Span(node=0, vector=np.array([1.0, 2.0]), first=0, stop=2),
             Span(node=1, vector=np.array([3.0]), first=1, stop=3)]
    rows = pickle.loads(pickle.dumps(SpanRows(spans, 3)))
    assert [[(n, v.tolist()) for n, v in row] for row in rows] \
        == [[(0, [1.0, 2.0])], [(0, [1.0, 2.0]), (1, [3.0])], [(1, [3.0])]]


def test_bad_spans_name_the_span() -> None:
    with pytest.raises(ValueError, match=r"span 0 of node 0 covers rows \[2, 2\)"):
        SpanRows([Span(node=0, vector=np.ones(2), first=2, stop=2)], 3)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        SpanRows([Span(node=0, vector=np.ones(2), first=0, stop=4)], 3)
    rows = SpanRows([Span(node=5, vector=np.ones(2), first=0, stop=1)], 1)
    with pytest.raises(InvalidProblemError, match="liveness span 0 refers to node 5"):
        ChoiceProblem(node_costs=[[0.0, 1.0]], liveness=rows, memory_limit=1.0)
    rows = SpanRows([Span(node=0, vector=np.array([1.0, np.inf]), first=0, stop=1)], 1)
    with pytest.raises(InvalidProblemError, match="must hold 2 finite values"):
        ChoiceProblem(node_costs=[[0.0, 1.0]], liveness=rows, memory_limit=1.0)
    rows = SpanRows([Span(node=0, vector=np.ones(3), first=0, stop=1)], 1)
    with pytest.raises(InvalidProblemError, match="must hold 2 finite values, got 3"):
        ChoiceProblem(node_costs=[[0.0, 1.0]], liveness=rows, memory_limit=1.0)
