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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

Term = tuple[int, np.ndarray]


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
        share term objects share their work."""
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        flat = list(chain.from_iterable(rows))
        ids = np.fromiter(map(id, flat), dtype=np.int64, count=len(flat))
        _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
        terms = [flat[i] for i in first.tolist()]
        del flat, ids
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
        ends = np.cumsum(lengths)
        filled = np.flatnonzero(lengths)
        return cls(nodes=np.fromiter((int(node) for node, _ in terms), dtype=np.int64,
                                     count=len(terms)),
                   offsets=offsets,
                   values=np.concatenate(vectors) if vectors else np.zeros(0),
                   occurrences=inverse.reshape(-1).astype(np.int32 if len(terms) < 2**31
                                                          else np.int64),
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
        bases = np.concatenate(([0], np.cumsum(sizes, dtype=np.int64)))
        flat = np.zeros(int(bases[-1]))
        if self.nodes.size:
            counts = np.bincount(self.occurrences, minlength=self.nodes.size).astype(np.float64)
            widths = np.asarray(sizes, dtype=np.int64)[self.nodes]
            term = np.repeat(np.arange(self.nodes.size), widths)
            within = np.arange(term.size) - np.repeat(np.cumsum(widths) - widths, widths)
            np.add.at(flat, bases[self.nodes][term] + within,
                      counts[term] * self.values[self.offsets[term] + within])
        return [flat[bases[n]:bases[n + 1]] for n in range(len(sizes))]

    def peak(self, choices: Sequence[int]) -> float:
        """The largest row sum (0 without rows)."""
        return float(self.sums(choices).max()) if self.rows else 0.0
