"""Liveness rows given as spans: each term lives over a run of consecutive rows.

A training step's memory constraint has one row per schedule step that could exceed the limit
(:class:`solver.problem.ChoiceProblem`'s ``liveness``), and a tensor lives over consecutive
steps, so the rows repeat the same terms: llama3.1-405b on dp=8,fsdp=8,tp=8 has 8,077 rows
holding 45 M ``(node, bytes)`` terms, made of 18,687 spans. Handed over row by row, every
problem built from the rows checked the 45 M terms once, compiling them for evaluation indexed
them again, and the planner spent seconds building them: about 20 s before the memory price's
first probe (the Python loops over 45 M terms dominate).

:class:`SpanRows` keeps the spans and promises:

* row ``k`` is every span with ``first <= k < stop``, as ``(node, vector)`` pairs in order of
  node (a node's spans in order of ``first``), each pair one object shared by all its rows;
  a row is built only when something reads it (the MIP of the tied search, the exhaustive
  reference), so those readers see exactly the rows they saw before;
* a problem checks each span once (node in range, vector of the node's size, finite), not
  each term;
* :class:`SpanSums` evaluates every row's sum for a plan as a prefix sum over the spans,
  ``O(spans + rows)``. Float additions of whole numbers below 2^53 are exact, so for byte
  counts the sums equal the term-by-term sums bit for bit (:class:`solver.row_sums.RowSums`);
  other values agree to rounding.

Example: node 0's two bytes live over rows 0-2, node 1's over row 1 alone.

    >>> import numpy as np
    >>> rows = SpanRows([Span(node=0, vector=np.array([1.0, 2.0]), first=0, stop=3),
    ...                  Span(node=1, vector=np.array([5.0, 1.0]), first=1, stop=2)], count=3)
    >>> [[n for n, _ in row] for row in rows]
    [[0], [0, 1], [0]]
    >>> rows.sums().sums((1, 0)).tolist()
    [2.0, 7.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from solver.row_sums import pack_vectors, smallest_values, weighted_totals

Term = tuple[int, np.ndarray]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Span:
    """``vector[choice of node]`` bytes in every row from ``first`` up to (not including)
    ``stop``."""

    node: int
    vector: np.ndarray
    first: int
    stop: int


class SpanRows(Sequence[tuple[Term, ...]]):
    """Rows ``0 .. count - 1`` made of spans (module docstring); a read-only sequence of rows.

    Raises:
        ValueError: a span outside ``[0, count]`` or empty, or a vector that is not 1-D.
    """

    __slots__ = ("_checked", "_firsts", "_nodes", "_pairs", "_spans", "_stops", "_sums",
                 "count")

    def __init__(self, spans: Iterable[Span], count: int):
        count = int(count)
        ordered = sorted(spans, key=lambda s: (int(s.node), int(s.first)))
        pairs = []
        for k, span in enumerate(ordered):
            if not 0 <= span.first < span.stop <= count:
                raise ValueError(f"span {k} of node {span.node} covers rows [{span.first}, "
                                 f"{span.stop}); it must be a non-empty part of [0, {count})")
            vector = span.vector
            if not (isinstance(vector, np.ndarray) and vector.dtype == np.float64
                    and not vector.flags.writeable):
                vector = np.array(vector, dtype=np.float64)
                vector.setflags(write=False)
            if vector.ndim != 1 or vector.size == 0:
                raise ValueError(f"span {k} of node {span.node}: the bytes must be a non-empty "
                                 f"1-D array, got shape {vector.shape}")
            pairs.append((int(span.node), vector))
        self.count = count
        self._spans = tuple(ordered)
        self._pairs = tuple(pairs)
        self._nodes = np.fromiter((n for n, _ in pairs), dtype=np.int64, count=len(pairs))
        self._firsts = np.fromiter((s.first for s in ordered), dtype=np.int64,
                                   count=len(ordered))
        self._stops = np.fromiter((s.stop for s in ordered), dtype=np.int64, count=len(ordered))
        self._checked: tuple[int, ...] | None = None
        self._sums: SpanSums | None = None

    @property
    def spans(self) -> tuple[Span, ...]:
        """The spans, in order of node, then of first row."""
        return self._spans

    def __len__(self) -> int:
        return self.count

    @overload
    def __getitem__(self, index: int) -> tuple[Term, ...]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[Term, ...]]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[k] for k in range(*index.indices(self.count))]
        k = int(index)
        if k < 0:
            k += self.count
        if not 0 <= k < self.count:
            raise IndexError(f"row {index} of {self.count}")
        alive = np.flatnonzero((self._firsts <= k) & (k < self._stops))
        return tuple(self._pairs[i] for i in alive.tolist())

    def __iter__(self) -> Iterator[tuple[Term, ...]]:
        return (self[k] for k in range(self.count))

    def __reduce__(self):
        return SpanRows, (self._spans, self.count)

    def check(self, sizes: Sequence[int]) -> str | None:
        """What is wrong with the spans for a problem whose nodes have ``sizes`` options
        (``None``: nothing). Each span is checked once per ``sizes``; the problems a solver
        road builds from another's rows share the answer."""
        sizes = tuple(int(s) for s in sizes)
        if self._checked == sizes:
            return None
        for k, (node, vector) in enumerate(self._pairs):
            if not 0 <= node < len(sizes):
                return (f"liveness span {k} refers to node {node}, but nodes are numbered "
                        f"0..{len(sizes) - 1}")
            if vector.size != sizes[node] or not np.isfinite(vector).all():
                return (f"liveness span {k}: the term of node {node} must hold {sizes[node]} "
                        f"finite values, got {vector.size}")
        self._checked = sizes
        return None

    def sums(self) -> SpanSums:
        """The spans compiled for evaluation, once for every problem that shares them."""
        if self._sums is None:
            offsets, values = pack_vectors(self._pairs)
            self._sums = SpanSums(nodes=self._nodes, offsets=offsets, values=values,
                                  firsts=self._firsts, stops=self._stops, rows=self.count)
        return self._sums


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class SpanSums:
    """Every row's sum for one assignment by a prefix sum over the spans; the same methods
    as :class:`solver.row_sums.RowSums`, which compiles rows given term by term."""

    nodes: np.ndarray  # per span, its node
    offsets: np.ndarray  # per span, where its vector starts in ``values``
    values: np.ndarray  # the distinct vectors end to end
    firsts: np.ndarray
    stops: np.ndarray
    rows: int

    def _prefix(self, per_span: np.ndarray) -> np.ndarray:
        """Each row's sum of ``per_span`` over the spans covering it."""
        delta = (np.bincount(self.firsts, weights=per_span, minlength=self.rows + 1)
                 - np.bincount(self.stops, weights=per_span, minlength=self.rows + 1))
        return np.cumsum(delta)[:self.rows]

    def picked(self, choices: Sequence[int]) -> np.ndarray:
        """Per span, the bytes of its node's option in ``choices``."""
        return self.values[self.offsets + np.asarray(choices, dtype=np.int64)[self.nodes]]

    def sums(self, choices: Sequence[int]) -> np.ndarray:
        """Each row's sum when node ``n`` takes option ``choices[n]``."""
        if not self.nodes.size:
            return np.zeros(self.rows)
        return self._prefix(self.picked(choices))

    def least_sums(self) -> np.ndarray:
        """Each row's least possible sum (every term at its smallest option)."""
        if not self.nodes.size:
            return np.zeros(self.rows)
        return self._prefix(smallest_values(self.offsets, self.values))

    def node_totals(self, sizes: Sequence[int]) -> list[np.ndarray]:
        """Per node, its spans' vectors each times the rows it covers, summed."""
        widths = (self.stops - self.firsts).astype(np.float64)
        return weighted_totals(self.nodes, self.offsets, self.values, widths, sizes)

    def switch_deltas(self, unit: np.ndarray, count: int, cheap: np.ndarray,
                      fitting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`RowSums.switch_deltas <solver.row_sums.RowSums.switch_deltas>`, each span's
        change added where it starts and taken off where it stops."""
        base = self.sums(fitting)
        deltas = np.zeros((self.rows + 1, count))
        if self.nodes.size:
            change = self.picked(cheap) - self.picked(fitting)
            moving = np.flatnonzero(change != 0.0)
            units = unit[self.nodes[moving]]
            np.add.at(deltas, (self.firsts[moving], units), change[moving])
            np.add.at(deltas, (self.stops[moving], units), -change[moving])
        return base, np.cumsum(deltas, axis=0)[:self.rows]

    def peak(self, choices: Sequence[int]) -> float:
        """The largest row sum (0 without rows)."""
        return float(self.sums(choices).max()) if self.rows else 0.0
