"""Every memory row's sum for one assignment, in a few numpy passes.

Memory-bound solves evaluate the peak of many plans: each probe of the Lagrangian memory
price, every step of its block-mix binary search, the fallbacks. Liveness rows of a large model
hold millions of ``(node, vector)`` terms (llama3.1-405b training on 512 devices: 8,077 rows,
45 M terms; Mixtral 8x7B on 64: 3,378 rows, 4.4 M), most of them the *same* term objects shared
by the consecutive steps they live through. Summed term by term in Python that was about 7 s
per plan on 405b and 1 s on Mixtral.

:class:`RowSums` is compiled once per set of rows: the distinct terms (by identity), their
vectors end to end, and for every occurrence in a row the index of its distinct term. An
evaluation is then one gather over the distinct terms, one over the occurrences and a
segmented sum (``np.add.reduceat``), so its cost no longer depends on Python's loop speed.
Sums agree with a term-by-term float sum to rounding (numpy may add in a different order).
The planner hands its rows over as spans (:mod:`solver.span_rows`), whose sums are a prefix
sum over the spans instead; this compiles rows given term by term.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, islice

import numpy as np

Term = tuple[int, np.ndarray]
CHUNK_TERMS = 1 << 22  # row terms indexed at a time (``_occurrences``)


@dataclass(frozen=True, slots=True)
class RowSums:
    """Rows of ``(node, vector)`` terms compiled for fast evaluation.

    Example:
        >>> import numpy as np
        >>> a, b = (0, np.array([1.0, 2.0])), (1, np.array([10.0, 20.0, 30.0]))
        >>> sums = RowSums.compile([(a, b), (b,), ()])
        >>> sums.sums((1, 2)).tolist()
        [32.0, 30.0, 0.0]
        >>> sums.peak((0, 0))
        11.0
    """

    nodes: np.ndarray  # per distinct term, its node
    offsets: np.ndarray  # per distinct term, where its vector starts in ``values``
    values: np.ndarray  # the distinct vectors end to end
    occurrences: np.ndarray  # per term of a row (rows end to end), its distinct term
    starts: np.ndarray  # per non-empty row, its first occurrence
    filled: np.ndarray  # the indices of the non-empty rows
    rows: int

    @classmethod
    def compile(cls, rows: Sequence[Sequence[Term]]) -> RowSums:
        """Index ``rows`` once; terms and vectors are told apart by identity, so rows that
        share term objects share their work. Distinct terms are numbered in order of first
        appearance, the occurrences ``CHUNK_TERMS`` at a time (:func:`_occurrences`)."""
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        terms, occurrences = _occurrences(rows, int(lengths.sum()))
        offsets, values = pack_vectors(terms)
        ends = np.cumsum(lengths)
        filled = np.flatnonzero(lengths)
        return cls(nodes=np.fromiter((int(node) for node, _ in terms), dtype=np.int64,
                                     count=len(terms)),
                   offsets=offsets, values=values, occurrences=occurrences,
                   starts=(ends - lengths)[filled], filled=filled, rows=len(rows))

    def sums(self, choices: Sequence[int]) -> np.ndarray:
        """Each row's sum when node ``n`` takes option ``choices[n]``."""
        out = np.zeros(self.rows)
        if self.filled.size:
            picked = np.asarray(choices, dtype=np.int64)[self.nodes]
            term_values = self.values[self.offsets + picked]
            out[self.filled] = np.add.reduceat(term_values[self.occurrences], self.starts)
        return out

    def node_totals(self, sizes: Sequence[int]) -> list[np.ndarray]:
        """Per node, its terms' vectors summed over every row they occur in: how much memory
        each option of the node adds up across the rows (what the deadline fallback ranks
        options by). One pass over the distinct terms, weighted by their occurrence counts.

        Example:
            >>> import numpy as np
            >>> a, b = (0, np.array([1.0, 2.0])), (1, np.array([10.0, 20.0, 30.0]))
            >>> [v.tolist() for v in RowSums.compile([(a, b), (b,), ()]).node_totals([2, 3])]
            [[1.0, 2.0], [20.0, 40.0, 60.0]]
        """
        counts = np.bincount(self.occurrences, minlength=self.nodes.size).astype(np.float64)
        return weighted_totals(self.nodes, self.offsets, self.values, counts, sizes)

    def least_sums(self) -> np.ndarray:
        """Each row's least possible sum (every term at its smallest option)."""
        out = np.zeros(self.rows)
        if self.filled.size:
            term_values = smallest_values(self.offsets, self.values)
            out[self.filled] = np.add.reduceat(term_values[self.occurrences], self.starts)
        return out

    def switch_deltas(self, unit: np.ndarray, count: int, cheap: np.ndarray,
                      fitting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's sum under ``fitting`` and, per unit (``unit[node]`` in ``0..count-1``),
        what switching that unit's nodes to ``cheap`` adds to it (a dense rows x units
        matrix): the block mix's memory rows (:mod:`solver.block_mix`)."""
        base = self.sums(fitting)
        deltas = np.zeros((self.rows, count))
        if not self.nodes.size:
            return base, deltas
        per_term = (self.values[self.offsets + cheap[self.nodes]]
                    - self.values[self.offsets + fitting[self.nodes]])
        moving = np.flatnonzero(per_term[self.occurrences] != 0.0)
        if moving.size:
            lengths = np.diff(np.append(self.starts, self.occurrences.size))
            row = np.repeat(self.filled, lengths)[moving]
            term = self.occurrences[moving]
            flat = np.bincount(row * count + unit[self.nodes[term]], weights=per_term[term],
                               minlength=self.rows * count)
            deltas = flat.reshape(self.rows, count)
        return base, deltas

    def peak(self, choices: Sequence[int]) -> float:
        """The largest row sum (0 without rows)."""
        return float(self.sums(choices).max()) if self.rows else 0.0


def pack_vectors(terms: Sequence[Term]) -> tuple[np.ndarray, np.ndarray]:
    """The terms' distinct vectors (by identity) end to end, and per term where its vector
    starts: ``(offsets, values)``."""
    vector_at: dict[int, int] = {}
    vectors: list[np.ndarray] = []
    offsets = np.empty(len(terms), dtype=np.int64)
    size = 0
    for k, (_, vector) in enumerate(terms):
        start = vector_at.get(id(vector))
        if start is None:
            start = vector_at[id(vector)] = size
            vectors.append(np.asarray(vector, dtype=np.float64).ravel())
            size += vectors[-1].size
        offsets[k] = start
    return offsets, np.concatenate(vectors) if vectors else np.zeros(0)


def weighted_totals(nodes: np.ndarray, offsets: np.ndarray, values: np.ndarray,
                    weights: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """Per node, the vectors of its terms (``pack_vectors``' layout) times each term's
    weight, summed: one scatter over every term's entries."""
    bases = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
    flat = np.zeros(int(bases[-1]))
    if nodes.size:
        widths = np.asarray(sizes, dtype=np.int64)[nodes]
        term = np.repeat(np.arange(nodes.size), widths)
        within = np.arange(term.size) - np.repeat(np.cumsum(widths) - widths, widths)
        np.add.at(flat, bases[nodes][term] + within,
                  weights[term] * values[offsets[term] + within])
    return [flat[bases[n]:bases[n + 1]] for n in range(len(sizes))]


def smallest_values(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per term, the smallest entry of its vector (``pack_vectors``' layout)."""
    starts = np.unique(offsets)  # each distinct vector's start, in order of ``values``
    return np.minimum.reduceat(values, starts)[np.searchsorted(starts, offsets)]


def _occurrences(rows: Sequence[Sequence[Term]], total: int) -> tuple[list[Term], np.ndarray]:
    """The distinct terms of ``rows`` (by identity, in order of first appearance) and, for
    every term of every row (rows end to end), the index of its distinct term.

    ``CHUNK_TERMS`` occurrences at a time, each chunk's object ids looked up in the sorted ids
    seen so far: the whole flat list of terms, its ids and ``np.unique``'s sort of them at once
    (seven arrays of 8 bytes per occurrence) took llama3.1-405b's plan to its peak memory
    (45 M occurrences: ~2.3 GB on top of the rows)."""
    occurrences = np.empty(total, dtype=np.int32 if total < 2**31 else np.int64)
    terms: list[Term] = []
    known = np.zeros(0, dtype=np.int64)  # sorted ids of the distinct terms so far
    known_index = np.zeros(0, dtype=np.int64)  # their indices in ``terms``
    flat = chain.from_iterable(rows)
    done = 0
    while done < total:
        chunk = list(islice(flat, CHUNK_TERMS))
        ids = np.fromiter(map(id, chunk), dtype=np.int64, count=len(chunk))
        at = np.searchsorted(known, ids)
        seen = at < known.size
        seen[seen] = known[at[seen]] == ids[seen]
        unseen = np.flatnonzero(~seen)
        if unseen.size:
            new_ids, first = np.unique(ids[unseen], return_index=True)
            positions = unseen[first]  # each new id's first position in the chunk
            order = np.argsort(positions, kind="stable")
            new_index = np.empty(new_ids.size, dtype=np.int64)
            new_index[order] = len(terms) + np.arange(new_ids.size)
            terms.extend(chunk[i] for i in positions[order].tolist())
            merged = np.concatenate((known, new_ids))
            by_id = np.argsort(merged, kind="stable")
            known = merged[by_id]
            known_index = np.concatenate((known_index, new_index))[by_id]
            at = np.searchsorted(known, ids)
        occurrences[done:done + len(chunk)] = known_index[at]
        done += len(chunk)
    return terms, occurrences
