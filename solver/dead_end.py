"""Dead-end elimination: options that no optimal plan uses, found by swapping one node.

Goldstein's criterion (R. F. Goldstein, "Efficient rotamer elimination applied to protein
side-chains and related spin glasses", Biophysical Journal 66:1335-1340, 1994; the dead-end
elimination of J. Desmet et al., Nature 356:539-542, 1992): option ``a`` of node ``u`` is
never needed when some option ``b`` of ``u`` has

    c_u[b] − c_u[a] + Σ_v max_j (M_uv[b, j] − M_uv[a, j])  <  0      (v: u's neighbours)

Swapping ``a`` for ``b`` in any plan changes its cost by ``c_u[b] − c_u[a] + Σ_v (M_uv[b,
x_v] − M_uv[a, x_v])``, which is at most the left side: every plan that uses ``a`` gets
strictly cheaper, so no optimal plan uses it and dropping it keeps the optimum. ``b`` must use
no more memory than ``a`` in any memory row (the swap must not break the limit).

This is stronger than the column-by-column dominance of ``reduce.prune_dominated`` (``b`` may
be worse on some edge entries if it is cheaper overall by more) and it is what that dominance
misses on measured-curve prices: the size-aware collective model gives every reshard its own
latency floor and bandwidth ramp, so two options rarely tie entry by entry (gpt2 training on
dp=2,tp=4: 4,626 options left by the other reductions, 4,313 after this, against 4,184 and
3,171 with pure alpha-beta link prices). Ties are left to that dominance, which breaks them by
index: here the inequality is strict by ``MARGIN`` per summed term (relative to the largest
price involved), far above the rounding of the sum, so rounding never drops an option.

Nodes that a window term mentions are skipped (their swap changes a maximum over streams),
and so are frozen nodes (the periodic LP's linking rows refer to their options).
"""

from __future__ import annotations

import numpy as np

from solver.compact import Work

MARGIN = 1e-13  # per summed term, relative to the largest |price| involved (module docstring)
CHUNK_ENTRIES = 2_000_000  # pair × column differences formed at once
# evenly spaced columns per edge compared for every pair before the pairs are listed, beside
# each option's own column (``_own_column_gain``), which does most of the screening: with it
# 8 of them cost more than they rule out (Mixtral dp=2,ep=4,tp=8's periodic LP, dead ends
# 1.04-1.11 CPU s at 8, 0.71-0.92 s at 2, the same options dropped)
SCREEN_COLUMNS = 2


def _worst_gain(rows: np.ndarray, others: np.ndarray, finite: bool = False) -> np.ndarray:
    """``[..., i] = max_j (rows[..., i, j] − others[..., i, j])`` over the neighbour options
    ``j`` where the swapped-out option is possible (``j`` impossible for both never occurs
    with it): the most a swap can cost on this edge. ``finite``: the caller knows no entry is
    infinite, so no ``inf − inf`` needs masking."""
    with np.errstate(invalid="ignore"):
        diff = rows - others
    if not finite:
        diff[np.isnan(diff)] = -np.inf  # inf − inf: j is impossible with a (and with b)
    return diff.max(axis=-1)


def _pair_gains(matrix: np.ndarray, b: np.ndarray, a: np.ndarray, finite: bool
                ) -> np.ndarray:
    """``_worst_gain`` of the pairs ``(b[i], a[i])``, a chunk of pairs at a time."""
    out = np.empty(b.size)
    step = max(1, CHUNK_ENTRIES // max(matrix.shape[1], 1))
    for start in range(0, b.size, step):
        chunk = slice(start, start + step)
        out[chunk] = _worst_gain(matrix[b[chunk]], matrix[a[chunk]], finite)
    return out


def _own_column_gain(matrix: np.ndarray, finite: bool) -> np.ndarray:
    """``[b, a] = M[b, j_a] − M[a, j_a]`` where ``j_a`` is the neighbour option cheapest for
    ``a``: one term of ``_worst_gain``'s maximum, so a lower bound of it. On a reshard
    matrix ``j_a`` reads ``a``'s own layout, free for ``a``, and the term is the reshard from
    ``b``'s layout to it: mostly the maximum itself."""
    own = np.argmin(matrix, axis=1)
    with np.errstate(invalid="ignore"):
        gain = matrix[:, own] - matrix[np.arange(matrix.shape[0]), own][None, :]
    if not finite:
        gain[np.isnan(gain)] = -np.inf  # inf − inf: j_a is impossible with a (and with b)
    return gain


def _slack(work: Work, node: int) -> tuple[np.ndarray, float]:
    """``(slack[b, a], margin)``: the left side of the criterion for the pairs that can meet
    it, ``inf`` for the others (``b == a``, ``b`` using more memory than ``a`` in some row,
    or a pair whose lower bound already leaves it short).

    The lower bound starts from a few screening columns per edge (the maximum over every
    column is at least that over a few: evenly spaced ones, and for each ``a`` the column
    cheapest for it, :func:`_own_column_gain`) and is made exact one edge at a time,
    dropping the pairs it rules out before the next edge's columns are read. The own column
    is what keeps the exact sums small where options are many: on the third shared-reshard
    round of llama3-70b dp=8,tp=8 (505 nodes, 10.4 M pairs, 11,808 swaps) the evenly spaced
    columns alone left pairs worth 551 M differences for the exact sums, 6.2 s of an
    11 s solve; with the own column, 3.1 M (the same options dropped). A pair is dropped
    only when its bound is at least ``-margin / 2``, half the margin above the rounding of
    a differently ordered sum, and the survivors' slack is summed in the original order, so
    the answer is the one the full sum gives, bit for bit."""
    costs = work.costs[node]
    matrices = [work.adj[node][other] for other in sorted(work.adj[node])]
    scale = float(np.abs(costs).max())
    finite = []
    for matrix in matrices:
        mask = np.isfinite(matrix)
        finite.append(bool(mask.all()))
        if mask.any():
            scale = max(scale, float(np.abs(matrix[mask]).max()))
    margin = MARGIN * 2 * (len(matrices) + 1) * scale
    lower = costs[:, None] - costs[None, :]
    screens = []
    for matrix, dense in zip(matrices, finite, strict=True):
        screen = matrix[:, np.unique(np.linspace(0, matrix.shape[1] - 1, SCREEN_COLUMNS
                                                 ).astype(np.int64))]
        screens.append(np.maximum(_worst_gain(screen[:, None, :], screen[None, :, :], dense),
                                  _own_column_gain(matrix, dense)))
        with np.errstate(invalid="ignore"):  # inf − inf (an impossible option): NaN, no swap
            lower = lower + screens[-1]
    for row in work.rows:
        if node in row:
            vec = row[node]
            lower = np.where(vec[:, None] > vec[None, :], np.inf, lower)
    np.fill_diagonal(lower, np.inf)
    b, a = np.nonzero(lower < -margin)
    bound, live = lower[b, a], np.arange(b.size)
    gains = np.empty((len(matrices), b.size))
    for m, (matrix, dense) in enumerate(zip(matrices, finite, strict=True)):
        gains[m, live] = _pair_gains(matrix, b[live], a[live], dense)
        with np.errstate(invalid="ignore"):  # inf − inf: both bounds infinite, pair kept
            bound[live] += gains[m, live] - screens[m][b[live], a[live]]
        live = live[~(bound[live] >= -margin / 2)]
    b, a = b[live], a[live]
    exact = costs[b] - costs[a]
    for m in range(len(matrices)):
        exact = exact + gains[m, live]
    slack = np.full(lower.shape, np.inf)
    slack[b, a] = exact
    return slack, margin


def dead_options(work: Work, node: int) -> np.ndarray:
    """Mask of the options of ``node`` the criterion drops, one at a time so that every
    dropped option has a surviving ``b`` (a chain of strictly cheaper swaps ends at an option
    that stays)."""
    slack, margin = _slack(work, node)
    swaps = slack < -margin  # NaN (inf − inf) compares False: no swap
    alive = np.ones(slack.shape[0], dtype=bool)
    for a in np.flatnonzero(swaps.any(axis=0)):
        if (swaps[:, a] & alive).any():
            alive[a] = False
    return ~alive
