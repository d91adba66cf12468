"""Exact reductions applied before any backend: each keeps at least one optimal plan.

* Memory-impossible options: an option that overflows a memory row even when every other
  node in the row takes its leanest option can never be in a feasible plan.
* Dominated options: option ``a`` of a node is dropped when some option ``b`` is no worse in
  node cost, in every memory row and in every incident edge row (ties keep the lower index).
  Swapping ``a`` for ``b`` in any plan never raises cost or memory, so an optimum survives.
* Dead ends (``solver.dead_end``): ``a`` is dropped when swapping it for some ``b`` makes
  every plan strictly cheaper, edge rows summed rather than compared entry by entry.
* Leaf merging: a node ``u`` with a single neighbour ``v`` is folded into ``v`` by reindexing:
  ``v``'s new options are pairs ``(u option, v option)``, and for each ``v`` option only the
  Pareto-optimal ``u`` options (cost including the edge, memory per row) are kept. When memory
  does not distinguish ``u``'s options this is plain elimination (one pair per ``v`` option).
* Singleton folding: a node with one option left (the rest dominated, impossible, or priced
  ``inf`` by a caller that fixed it) is a constant: its edge rows are added to its
  neighbours' costs and its own cost to one neighbour's, and the node goes. The polish of a
  periodic plan fixes every interior layer this way: 1,903 nodes left before, the ends after.
* Series elimination: a node ``w`` in no memory row with exactly two neighbours ``a`` and
  ``b`` is removed and replaced by the edge ``N[i, j] = min_k (c_w[k] + M_wa[k, i] +
  M_wb[k, j])`` (added to an existing ``a``–``b`` edge). For every choice of ``a`` and ``b``
  the best ``w`` is known, so the optimum is unchanged (min-sum bucket elimination); the argmin
  table is kept to lift ``w``'s choice. It runs only when ``N`` is no larger than the two
  matrices it replaces, so the ILP shrinks (GPT-2 training: 407 of 1,082 nodes have degree 2).

Windows (the longest of concurrent streams) cost more when any stream grows, so dominance
compares each window term too; leaf merging and singleton folding move a node's window terms
exactly (onto the merged options, into the stream's constant); series elimination skips nodes
with window terms, whose best option would depend on the other streams.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from solver.compact import Eliminated, Work, WorkStream, drop_unpairable
from solver.dead_end import dead_options


class MemoryExhausted(Exception):
    """Every option of a node overflows some memory row: no plan fits."""


MERGE_GROWTH = 2  # a merge may at most double the neighbour's option count
MERGE_MIN_CAP = 32


SCREEN_COLUMNS = 8  # columns compared for every pair before the pairs are listed
PAIR_CHUNK = 64  # columns per pass over the surviving pairs


def _dominated(features: np.ndarray) -> np.ndarray:
    """Mask of rows dominated by another row (≤ everywhere; ties keep the lower index).

    A few columns are compared for all pairs; the few pairs that survive them are
    checked on the rest, a chunk of columns at a time. Same mask as comparing every pair on
    every column, without the rows × rows × columns array that needs (3-axis nodes carry
    330 options × up to a thousand edge columns: that array was 2.7 s of a 3.9 s periodic
    LP build)."""
    count, width = features.shape
    # the screen: the node's cost and columns spread over the edges (the first few columns of
    # one edge tell little: Mixtral's 3-axis periodic LP build, 3,431 calls, 1.3 s -> 0.4 s)
    screen = np.unique(np.r_[0, np.linspace(0, width - 1, SCREEN_COLUMNS).astype(np.int64)])
    le = np.ones((count, count), dtype=bool)  # le[b, a]: b ≤ a on the columns seen so far
    for column in features[:, screen].T:
        le &= column[:, None] <= column[None, :]
    # and each a's cheapest column (on a reshard matrix a's own layout, free for a alone),
    # where few b are as cheap: Mixtral's 3,431 calls 0.86 -> 0.48 CPU s, llama3-70b's third
    # shared-reshard round 0.53 -> 0.19 s, the same masks
    own = np.argmin(features, axis=1)
    le &= features[:, own] <= features[np.arange(count), own][None, :]
    np.fill_diagonal(le, False)
    better, worse = np.nonzero(le)
    for start in range(0, width, PAIR_CHUNK):
        if not better.size:
            break
        chunk = slice(start, start + PAIR_CHUNK)
        keep = (features[better, chunk] <= features[worse, chunk]).all(axis=1)
        better, worse = better[keep], worse[keep]
    equal = (features[better] == features[worse]).all(axis=1)
    dominated = np.zeros(count, dtype=bool)
    dominated[worse[~equal | (better < worse)]] = True
    return dominated


def _window_terms(work: Work, node: int) -> list[np.ndarray]:
    """The node's window terms as feature columns: its node vector and its edge rows in each
    stream (a window's cost never falls when one of its streams grows, so an option no
    worse in every stream term is no worse for every window)."""
    columns = []
    for stream in work.streams():
        if node in stream.nodes:
            columns.append(stream.nodes[node][:, None])
        for (a, b), matrix in sorted(stream.edges.items(), key=lambda item: item[0]):
            if a == node:
                columns.append(matrix)
            elif b == node:
                columns.append(matrix.T)
    return columns


def _features(work: Work, node: int, extra: list[np.ndarray]) -> np.ndarray:
    columns = [work.costs[node][:, None], *extra]
    columns += [row[node][:, None] for row in work.rows if node in row]
    columns += [work.adj[node][other] for other in sorted(work.adj[node])]
    columns += _window_terms(work, node)
    return np.hstack(columns)


def prune_memory(work: Work) -> bool:
    """Drop options that overflow a memory row on their own."""
    if work.limit is None:
        return False
    changed = False
    for row in work.rows:
        slack = work.limit - sum(float(v.min()) for v in row.values())
        for node in sorted(row):
            if node in work.frozen:
                continue
            keep = row[node] - row[node].min() <= slack
            if not keep.any():
                raise MemoryExhausted(node)
            if not keep.all():
                work.restrict(node, keep)
                changed = True
    return changed


def _feature_sources(work: Work, node: int) -> tuple[tuple[int, ...], tuple[np.ndarray, ...]]:
    """What ``_features`` reads for ``node``: its neighbours, and its arrays themselves (not
    copies): costs, memory vectors, incident matrices."""
    others = tuple(sorted(work.adj[node]))
    return others, (work.costs[node], *(row[node] for row in work.rows if node in row),
                    *(work.adj[node][other] for other in others), *_window_sources(work, node))


def _window_sources(work: Work, node: int) -> list[np.ndarray]:
    sources = []
    for stream in work.streams():
        if node in stream.nodes:
            sources.append(stream.nodes[node])
        sources += [matrix for pair, matrix in sorted(stream.edges.items(),
                                                      key=lambda item: item[0]) if node in pair]
    return sources


def _same_sources(first: tuple, second: tuple) -> bool:
    """Identity, not equality: the reductions never write into an array, they replace it,
    and a cached tuple holds its arrays alive, so ``is`` cannot be fooled by a reused id."""
    return first[0] == second[0] and len(first[1]) == len(second[1]) and all(
        a is b for a, b in zip(first[1], second[1], strict=True))


def prune_dominated(work: Work, deadline: float | None = None,
                    clean: dict[int, tuple] | None = None) -> bool:
    """Drop dominated options at every node, to a fixpoint (or until ``deadline``).

    ``clean`` remembers, across calls, the nodes found to have nothing dominated and what
    their features were read from; a node whose costs, memory and incident matrices are
    still those very arrays is not compared again (a 3-axis periodic LP build: 864
    comparisons over three rounds of ``reduce_work``, 515 with this)."""
    return _prune(work, deadline, clean, lambda node: node in work.frozen,
                  lambda node: _dominated(_features(work, node, [])))


def prune_dead_ends(work: Work, deadline: float | None = None,
                    clean: dict[int, tuple] | None = None) -> bool:
    """Drop dead-end options (``solver.dead_end``) at every node, to a fixpoint (or until
    ``deadline``); ``clean`` as in ``prune_dominated``, a cache of its own."""
    return _prune(work, deadline, clean,
                  lambda node: node not in work.costs or node in work.frozen
                  or work.in_window(node),
                  lambda node: dead_options(work, node))


def _prune(work: Work, deadline: float | None, clean: dict[int, tuple] | None,
           skip: Callable[[int], bool], droppable: Callable[[int], np.ndarray]) -> bool:
    """Restrict every node not ``skip``-ped to the options ``droppable`` leaves, revisiting
    the neighbours of every node that lost one, to a fixpoint (or until ``deadline``)."""
    pending = work.nodes()
    any_change = False
    while pending:
        touched: set[int] = set()
        for node in pending:
            if deadline is not None and time.perf_counter() > deadline:
                return any_change
            if skip(node) or work.costs[node].size < 2:
                continue
            sources = _feature_sources(work, node) if clean is not None else ()
            if clean is not None and node in clean and _same_sources(clean[node], sources):
                continue
            drop = droppable(node)
            if drop.any():
                work.restrict(node, ~drop)
                touched.update(work.adj[node])
                any_change = True
            elif clean is not None:
                clean[node] = sources
        pending = sorted(touched)
    return any_change


def _pareto_pairs(work: Work, leaf: int, nb: int, matrix: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """For each option q of the neighbour, the leaf options p worth keeping: no other is as
    good in cost (edge included), in every memory row and in every window stream."""
    memory = [row[leaf][:, None] for row in work.rows if leaf in row]
    streams = [(stream.nodes.get(leaf), _oriented(stream, leaf, nb))
               for stream in work.streams()]
    leaf_idx, nb_idx = [], []
    for q in range(matrix.shape[1]):
        cost = work.costs[leaf] + matrix[:, q]
        finite = np.flatnonzero(np.isfinite(cost))
        window = [(0.0 if vec is None else vec) + (0.0 if edge is None else edge[:, q])
                  for vec, edge in streams]
        window = [np.broadcast_to(np.asarray(w, dtype=float), cost.shape)[:, None]
                  for w in window]
        feats = np.hstack([cost[:, None], *memory, *window])[finite]
        keep = finite[~_dominated(feats)]
        leaf_idx.append(keep)
        nb_idx.append(np.full(keep.size, q))
    return np.concatenate(leaf_idx), np.concatenate(nb_idx)


def _oriented(stream: WorkStream, node: int, other: int) -> np.ndarray | None:
    """The stream's edge term between ``node`` and ``other``, indexed ``[node, other]``."""
    if node < other:
        return stream.edges.get((node, other))
    matrix = stream.edges.get((other, node))
    return None if matrix is None else matrix.T


def merge_leaf(work: Work, leaf: int) -> bool:
    """Fold a degree-1 node into its neighbour (see the module docstring); its window terms
    move with it: its node terms and its edge terms with the neighbour become node terms of
    the neighbour's new options."""
    (nb,) = work.adj[leaf]
    if leaf in work.frozen or nb in work.frozen or work.window_neighbours(leaf) - {nb}:
        return False
    matrix = work.adj[leaf][nb]
    p, q = _pareto_pairs(work, leaf, nb, matrix)
    cap = max(MERGE_GROWTH * work.costs[nb].size, MERGE_MIN_CAP)
    if p.size > cap or p.size == 0:
        return False
    work.costs[nb] = work.costs[nb][q] + work.costs[leaf][p] + matrix[p, q]
    for other in list(work.adj[nb]):
        if other != leaf:
            work.adj[nb][other] = work.adj[nb][other][q]
            work.adj[other][nb] = work.adj[nb][other].T
    for row in work.rows:
        if nb in row or leaf in row:
            base = row[nb][q] if nb in row else 0.0
            row[nb] = base + (row[leaf][p] if leaf in row else 0.0)
    for stream in work.streams():
        _merge_stream(stream, leaf, nb, p, q)
    work.table[nb] = np.hstack([work.table[nb][q], work.table[leaf][p]])
    work.members[nb] = work.members[nb] + work.members[leaf]
    work.remove(leaf)
    return True


def _merge_stream(stream: WorkStream, leaf: int, nb: int, p: np.ndarray, q: np.ndarray
                  ) -> None:
    """Re-index one stream for ``nb``'s new options ``(q, p)`` and fold ``leaf`` into it."""
    edge = _oriented(stream, leaf, nb)
    stream.edges.pop((min(leaf, nb), max(leaf, nb)), None)
    touched = nb in stream.nodes or leaf in stream.nodes or edge is not None
    for (a, b), matrix in list(stream.edges.items()):
        if a == nb:
            stream.edges[(a, b)] = matrix[q]
        elif b == nb:
            stream.edges[(a, b)] = matrix[:, q]
    if touched:
        value = stream.nodes[nb][q] if nb in stream.nodes else np.zeros(q.size)
        if leaf in stream.nodes:
            value = value + stream.nodes.pop(leaf)[p]
        if edge is not None:
            value = value + edge[p, q]
        stream.nodes[nb] = value


def fold_singletons(work: Work) -> bool:
    """Fold every node with one option into its neighbours (see the module docstring)."""
    changed = False
    for node in work.nodes():
        if (work.costs[node].size != 1 or node in work.frozen or not work.adj[node]
                or _in_memory(work, node)):
            continue
        for stream in work.streams():  # its window terms are constants now
            if node in stream.nodes:
                stream.constant += float(stream.nodes.pop(node)[0])
            for (a, b) in [pair for pair in stream.edges if node in pair]:
                other = b if a == node else a
                term = _oriented(stream, other, node)[:, 0]
                del stream.edges[(a, b)]
                stream.nodes[other] = stream.nodes.get(other, 0.0) + term
        neighbours = sorted(work.adj[node])
        for other in neighbours:
            work.costs[other] = work.costs[other] + work.adj[other][node][:, 0]
        first = neighbours[0]
        work.costs[first] = work.costs[first] + work.costs[node][0]
        work.settled.append((work.members[node], work.table[node][0].copy()))
        work.remove(node)
        changed = True
    return changed


def merge_leaves(work: Work) -> bool:
    changed = False
    for node in work.nodes():
        if node in work.adj and len(work.adj[node]) == 1:
            changed |= merge_leaf(work, node)
    return changed


SERIES_MAX_TABLE = 4_000_000  # entries of the k × |a| × |b| argmin table
SERIES_ELIMINATION = True  # the scale benchmark switches it off to measure the baseline
DEAD_ENDS = True  # off only to measure what dead-end elimination buys


def _in_memory(work: Work, node: int) -> bool:
    return any(node in row for row in work.rows)


def eliminate_series(work: Work, node: int) -> bool:
    """Remove a degree-2 node outside every memory row (see the module docstring)."""
    a, b = sorted(work.adj[node])
    to_a, to_b = work.adj[node][a], work.adj[node][b]  # [k, i], [k, j]
    k, na, nb = to_a.shape[0], to_a.shape[1], to_b.shape[1]
    existing = na * nb if b in work.adj[a] else 0
    if na * nb > k * (na + nb) + existing or k * na * nb > SERIES_MAX_TABLE:
        return False
    total = work.costs[node][:, None, None] + to_a[:, :, None] + to_b[:, None, :]
    with np.errstate(invalid="ignore"):
        best = np.argmin(np.where(np.isnan(total), np.inf, total), axis=0)
    merged = np.take_along_axis(total, best[None], axis=0)[0]
    work.eliminated.append(Eliminated(
        members=work.members[node], table=work.table[node], best=best,
        ends=((work.members[a], work.table[a].copy()), (work.members[b], work.table[b].copy()))))
    work.remove(node)
    work.adj[a][b] = work.adj[a].get(b, 0.0) + merged
    work.adj[b][a] = work.adj[a][b].T
    return True


def eliminate_series_nodes(work: Work) -> bool:
    changed = False
    for node in work.nodes():
        if (node in work.adj and len(work.adj[node]) == 2 and not _in_memory(work, node)
                and node not in work.frozen and not work.in_window(node)):
            changed |= eliminate_series(work, node)
    if changed:
        drop_unpairable(work)
    return changed


def reduce_work(work: Work, max_rounds: int = 4, deadline: float | None = None) -> None:
    """Apply every exact reduction until nothing changes (or ``max_rounds`` passes, or the
    ``deadline`` of ``time.perf_counter()`` passes: each reduction is optional, so stopping
    early leaves a larger problem, never a wrong one)."""
    clean: dict[int, tuple] = {}
    dead_clean: dict[int, tuple] = {}
    for _ in range(max_rounds):
        if deadline is not None and time.perf_counter() > deadline:
            return
        changed = prune_memory(work)
        changed |= prune_dominated(work, deadline, clean)
        changed |= fold_singletons(work)
        changed |= merge_leaves(work)
        if SERIES_ELIMINATION:
            changed |= eliminate_series_nodes(work)
        if DEAD_ENDS:
            changed |= prune_dead_ends(work, deadline, dead_clean)
        if not changed:
            return
