"""Compiled row sums against the term-by-term sums they replace."""

from __future__ import annotations

import math

import numpy as np
import pytest

from solver import ChoiceProblem
from solver.row_sums import RowSums


def _random_rows(rng: np.random.Generator, sizes: list[int], count: int) -> list[tuple]:
    """Rows that share term objects (and vectors) the way liveness rows do, with a term
    repeated inside a row, and empty rows."""
    pool = []
    for _ in range(3 * len(sizes)):
        node = int(rng.integers(len(sizes)))
        vector = rng.uniform(0, 1e9, sizes[node])
        pool.append((node, vector))
        if rng.random() < 0.3:  # another term over the same vector object
            pool.append((node, vector))
    rows = []
    for _ in range(count):
        picked = rng.choice(len(pool), size=int(rng.integers(0, 8)), replace=True)
        rows.append(tuple(pool[i] for i in picked))
    return rows


@pytest.mark.parametrize("seed", range(20))
def test_sums_match_term_by_term(seed: int) -> None:
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(1, 5, 6)]
    rows = _random_rows(rng, sizes, int(rng.integers(1, 12)))
    compiled = RowSums.compile(rows)
    for _ in range(10):
        choices = [int(rng.integers(s)) for s in sizes]
        expected = [math.fsum(float(v[choices[n]]) for n, v in row) for row in rows]
        assert compiled.sums(choices) == pytest.approx(expected, rel=1e-12, abs=0.0)
        assert compiled.peak(choices) == pytest.approx(max(expected), rel=1e-12, abs=0.0)


def test_problem_peak_uses_every_row() -> None:
    rng = np.random.default_rng(7)
    sizes = [3, 2, 4]
    rows = _random_rows(rng, sizes, 9)
    problem = ChoiceProblem(node_costs=[np.zeros(s) for s in sizes], liveness=rows,
                            memory_limit=1e12)
    for choices in np.ndindex(*sizes):
        expected = max(math.fsum(float(v[choices[n]]) for n, v in row) for row in rows)
        assert problem.peak_memory(choices) == pytest.approx(expected, rel=1e-12, abs=0.0)


def test_no_rows_means_no_peak() -> None:
    assert ChoiceProblem(node_costs=[[1.0]], liveness=[]).peak_memory((0,)) is None
    assert ChoiceProblem(node_costs=[[1.0]]).peak_memory((0,)) is None


@pytest.mark.parametrize("seed", range(10))
def test_node_totals_match_summing_every_term(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    sizes = [int(s) for s in rng.integers(1, 5, 5)]
    rows = _random_rows(rng, sizes, int(rng.integers(1, 10)))
    expected = [np.zeros(s) for s in sizes]
    for row in rows:
        for node, vector in row:
            expected[node] = expected[node] + vector
    problem = ChoiceProblem(node_costs=[np.zeros(s) for s in sizes], liveness=rows,
                            memory_limit=1e12)
    for got, want in zip(problem.memory_totals(), expected, strict=True):
        assert got == pytest.approx(want, rel=1e-12, abs=0.0)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
@pytest.mark.parametrize("seed", range(8))
def test_small_chunks_give_the_same_sums(seed: int, chunk: int, monkeypatch) -> None:
    """Occurrences indexed a few at a time (terms met again in later chunks, new ones in
    every chunk) sum like the term-by-term sums, and distinct terms come in order of first
    appearance, whatever their ids."""
    from solver import row_sums

    rng = np.random.default_rng(100 + seed)
    sizes = [int(s) for s in rng.integers(1, 5, 6)]
    rows = _random_rows(rng, sizes, int(rng.integers(4, 12)))
    monkeypatch.setattr(row_sums, "CHUNK_TERMS", chunk)
    compiled = RowSums.compile(rows)
    flat = [term for row in rows for term in row]
    first_seen: dict[int, tuple] = {}
    for term in flat:
        first_seen.setdefault(id(term), term)
    assert [int(n) for n in compiled.nodes] == [node for node, _ in first_seen.values()]
    assert compiled.occurrences.size == len(flat)
    for _ in range(10):
        choices = [int(rng.integers(s)) for s in sizes]
        expected = [math.fsum(float(v[choices[n]]) for n, v in row) for row in rows]
        assert compiled.sums(choices) == pytest.approx(expected, rel=1e-12, abs=0.0)
