"""Shortest paths over layout states, from many sources at once, in NumPy.

Why a separate module: :func:`autoshard.reshard.find.reshard_cost_matrix` asks for millions of
(source, target) prices on a large model. A search space has a few hundred states at most
(254 for a 4-D activation on a 3-axis mesh), and one matrix asks for about a hundred sources
in it, so the all-sources answer is a Bellman-Ford over dense ``sources × states`` arrays: each
round relaxes every move from every source in one vectorized step, and a round per step of the
longest path (at most 8 on a 3-axis mesh) finishes it. A per-source Dijkstra in Python
spent 4 s of a 3-axis llama3-8b plan here.

The move graph depends on the shape only through which shard counts divide each dim, so one
:class:`StateGraph` serves every tensor whose dims have the same ``gcd`` with the device
count (a 4096×14336 weight and a 4096×128256 embedding share theirs); a :class:`PricedSpace`
adds the step prices for one byte size. Step prices come from ``costmodel`` through a memo
keyed by (kind, axes, bytes), because the same few byte sizes recur.

Which path wins, so that every answer is exact and independent of what was asked before:
the cost is the smallest float sum over paths, added in path order (the order
:func:`autoshard.reshard.find.find_reshard` adds its steps, so its total equals the matrix entry
bit for bit). Among paths within a relative ``TIE_TOLERANCE`` of it, the one with fewest steps
wins, so rounding noise (a ring reduce-scatter plus all-gather sums to the ring all-reduce only
up to the last bit) never prefers the longer sequence. Among equal sums, the first move in a
canonical order (source state tuple, then :func:`moves_from`'s order) wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoshard.reshard.state import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_SLICE,
    ALL_TO_ALL,
    COLLECTIVE_PERMUTE,
    REDUCE_SCATTER,
    REPLICATED_TO_PARTIAL,
    Move,
    State,
    moves_from,
)
from autoshard.sharding.links import MeshLinks
from costmodel import CollectiveKind, collective_seconds

_COSTMODEL_KIND = {
    ALL_GATHER: CollectiveKind.ALL_GATHER,
    ALL_REDUCE: CollectiveKind.ALL_REDUCE,
    REDUCE_SCATTER: CollectiveKind.REDUCE_SCATTER,
    ALL_TO_ALL: CollectiveKind.ALL_TO_ALL,
    COLLECTIVE_PERMUTE: CollectiveKind.COLLECTIVE_PERMUTE,
}


# entries of the levels × sources × states × parts array ``_split_by_axis`` fills at once
SPLIT_ENTRIES = 2**22  # 32 MiB of float64
TIE_TOLERANCE = 1e-12
# sources searched together (PricedSpace._levels): 8-16 were the fastest on a 4-axis mesh
# (3x all at once); Mixtral 8x7B on dp=2,ep=4,tp=8 prices the same either way
SOURCE_CHUNK = 16


def divisibility_shape(sizes: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """The smallest shape that every layout divides exactly when ``shape`` does.

    Every shard count is a product of distinct axis sizes, so it divides the device count
    ``P``; then ``count | n`` exactly when ``count | gcd(n, P)``.
    """
    devices = math.prod(sizes)
    return tuple(math.gcd(n, devices) for n in shape)


@dataclass(slots=True)
class Pricer:
    """Seconds of one step on one mesh's links, memoized by (kind, axes, bytes).

    Local slices cost a read and a write of the output at HBM bandwidth when
    ``device_hbm_bw`` is given, and nothing otherwise; ``replicated_to_partial`` is free.
    """

    links: MeshLinks
    axis_names: tuple[str, ...]
    device_hbm_bw: float | None
    _groups: dict[tuple[int, ...], Any] = field(default_factory=dict)
    _seconds: dict[tuple[str, tuple[int, ...], float], float] = field(default_factory=dict)

    def group(self, axes: tuple[int, ...]) -> Any:
        group = self._groups.get(axes)
        if group is None:
            group = self.links.group(tuple(self.axis_names[a] for a in axes))
            self._groups[axes] = group
        return group

    def seconds(self, kind: str, axes: tuple[int, ...], nbytes: float) -> float:
        key = (kind, axes, nbytes)
        value = self._seconds.get(key)
        if value is None:
            value = self._price(kind, axes, nbytes)
            self._seconds[key] = value
        return value

    def _price(self, kind: str, axes: tuple[int, ...], nbytes: float) -> float:
        if kind == REPLICATED_TO_PARTIAL:
            return 0.0
        if kind == ALL_SLICE:
            return 2.0 * nbytes / self.device_hbm_bw if self.device_hbm_bw else 0.0
        return float(collective_seconds(_COSTMODEL_KIND[kind], float(nbytes), self.group(axes)))


@dataclass(frozen=True, slots=True)
class Edges:
    """The graph's moves as arrays, grouped by target state for ``np.minimum.reduceat``.

    Within a target's group the moves keep the canonical order (source state tuple, then
    ``moves_from``'s order), which decides between equal sums.
    """

    states: int
    src: np.ndarray
    step: np.ndarray  # index into ``steps``: the (kind, axes, bytes divisor) being priced
    steps: tuple[tuple[str, tuple[int, ...], int], ...]
    moves: tuple[Move, ...]
    group_starts: np.ndarray
    group_targets: np.ndarray


@dataclass(slots=True)
class StateGraph:
    """Every layout reachable from the sources seen so far, and the moves between them.

    Grown on demand: asking for a source adds everything reachable from it, so each source's
    reachable set is always complete and an answer never depends on which sources came first.
    """

    sizes: tuple[int, ...]
    shape: tuple[int, ...]  # a divisibility_shape
    allowed_partial: tuple[tuple[int, str], ...]
    multi_axis_slices: bool
    states: list[State] = field(default_factory=list)
    index: dict[State, int] = field(default_factory=dict)
    _moves: list[list[Move]] = field(default_factory=list)
    _edges: Edges | None = None

    def add(self, source: State) -> int:
        """The id of ``source``, after adding every state reachable from it."""
        found = self.index.get(source)
        if found is not None:
            return found
        todo = [source]
        self._new(source)
        while todo:
            state = todo.pop()
            moves = moves_from(state, self.sizes, self.shape, self.allowed_partial,
                               multi_axis_slices=self.multi_axis_slices)
            self._moves[self.index[state]] = moves
            for move in moves:
                if move.after not in self.index:
                    self._new(move.after)
                    todo.append(move.after)
        self._edges = None
        return self.index[source]

    def _new(self, state: State) -> None:
        self.index[state] = len(self.states)
        self.states.append(state)
        self._moves.append([])

    def edges(self) -> Edges:
        if self._edges is None:
            self._edges = self._build_edges()
        return self._edges

    def _build_edges(self) -> Edges:
        src: list[int] = []
        dst: list[int] = []
        step: list[int] = []
        moves: list[Move] = []
        steps: dict[tuple[str, tuple[int, ...], int], int] = {}
        for state_id in sorted(range(len(self.states)), key=self.states.__getitem__):
            for move in self._moves[state_id]:
                src.append(state_id)
                dst.append(self.index[move.after])
                key = (move.kind, move.axes, move.bytes_divisor)
                step.append(steps.setdefault(key, len(steps)))
                moves.append(move)
        dst_array = np.asarray(dst, dtype=np.intp)
        order = np.argsort(dst_array, kind="stable")
        dst_sorted = dst_array[order]
        starts = np.flatnonzero(np.r_[True, dst_sorted[1:] != dst_sorted[:-1]]) \
            if len(dst_sorted) else np.zeros(0, dtype=np.intp)
        return Edges(states=len(self.states),
                     src=np.asarray(src, dtype=np.intp)[order],
                     step=np.asarray(step, dtype=np.intp)[order], steps=tuple(steps),
                     moves=tuple(moves[i] for i in order),
                     group_starts=starts, group_targets=dst_sorted[starts])


@dataclass(slots=True)
class PricedSpace:
    """One :class:`StateGraph` priced for one tensor size; rows of costs memoized per source."""

    graph: StateGraph
    total_bytes: float
    pricer: Pricer
    _rows: dict[int, np.ndarray] = field(default_factory=dict)
    _axis_rows: dict[int, np.ndarray] = field(default_factory=dict)
    _paths: dict[int, np.ndarray] = field(default_factory=dict)
    _weights: np.ndarray | None = None
    _weights_for: Edges | None = None

    def costs(self, sources: list[State]) -> np.ndarray:
        """``sources × states`` cheapest seconds (``inf`` where unreachable)."""
        ids = [self.graph.add(source) for source in sources]
        missing = list(dict.fromkeys(i for i in ids if i not in self._rows))
        if missing:
            rows = _settle_ties(self._levels(missing))  # every source at once
            for k, source_id in enumerate(missing):
                self._rows[source_id] = rows[k]
        n = len(self.graph.states)
        out = np.full((len(ids), n), math.inf)
        for k, source_id in enumerate(ids):
            row = self._rows[source_id]
            out[k, :len(row)] = row  # states added later are unreachable from this source
        return out

    def path(self, source: State, target: State) -> list[tuple[State, Move, float]] | None:
        """(state before, move, seconds) along the cheapest path, or ``None`` if unreachable."""
        source_id = self.graph.add(source)
        target_id = self.graph.index.get(target)
        if target_id is None:
            return None
        levels = self._paths.get(source_id)
        if levels is None:
            levels = self._paths[source_id] = self._levels([source_id])[:, 0, :]
        edges = self.graph.edges()
        if levels.shape[1] < edges.states:  # states added since are unreachable from here
            levels = self._paths[source_id] = np.pad(
                levels, ((0, 0), (0, edges.states - levels.shape[1])),
                constant_values=math.inf)
        weights = self._edge_weights(edges)
        level = int(_tie_levels(levels[:, target_id:target_id + 1])[0])
        if level < 0:
            return None
        steps: list[tuple[State, Move, float]] = []
        state_id = target_id
        while level > 0:
            value = levels[level, state_id]
            while level > 0 and levels[level - 1, state_id] == value:
                level -= 1  # reached with fewer moves
            if level == 0:
                break
            group = int(np.searchsorted(edges.group_targets, state_id))
            start = edges.group_starts[group]
            stop = (edges.group_starts[group + 1] if group + 1 < len(edges.group_starts)
                    else len(edges.src))
            sums = levels[level - 1, edges.src[start:stop]] + weights[start:stop]
            e = start + int(np.flatnonzero(sums == value)[0])
            before = int(edges.src[e])
            steps.append((self.graph.states[before], edges.moves[e], float(weights[e])))
            state_id, level = before, level - 1
        steps.reverse()
        return steps

    def axis_costs(self, sources: list[State]) -> np.ndarray:
        """``sources × states × (axes + 1)``: the seconds of the cheapest path (the one
        :meth:`path` takes) split by where they are spent: on each mesh axis (a collective
        over several axes counts fully on each, it occupies all their links) and, last, in
        local steps (slices). Zero where unreachable (``costs`` says inf there).

        The split follows the same choices as :meth:`path`, level by level for every target at
        once: at state ``s`` reached at level ``k``, the fewest moves with the same sum, then
        the first move into ``s`` that attains it."""
        ids = [self.graph.add(source) for source in sources]
        edges = self.graph.edges()
        axes = len(self.graph.sizes)
        missing = list(dict.fromkeys(i for i in ids if i not in self._axis_rows))
        if missing:
            weights = self._edge_weights(edges)
            part = np.zeros((len(edges.steps), axes + 1))
            for index, (kind, step_axes, _) in enumerate(edges.steps):
                if kind in (ALL_SLICE, REPLICATED_TO_PARTIAL):
                    part[index, axes] = 1.0
                else:
                    part[index, list(step_axes)] = 1.0
            edge_parts = part[edges.step] * weights[:, None]
            levels = self._levels(missing)  # levels × sources × states
            step = max(1, SPLIT_ENTRIES // max(levels.shape[0] * levels.shape[2]
                                               * (axes + 1), 1))
            for start in range(0, len(missing), step):
                split = _split_by_axis(levels[:, start:start + step, :], edges, weights,
                                       edge_parts)
                for k, source_id in enumerate(missing[start:start + step]):
                    self._axis_rows[source_id] = split[k]
        out = np.zeros((len(ids), edges.states, axes + 1))
        for k, source_id in enumerate(ids):
            row = self._axis_rows[source_id]
            out[k, :len(row)] = row
        return out

    def _edge_weights(self, edges: Edges) -> np.ndarray:
        if self._weights_for is not edges:
            prices = np.array([self.pricer.seconds(kind, axes, self.total_bytes / divisor)
                               for kind, axes, divisor in edges.steps], dtype=float)
            self._weights = prices[edges.step] if len(prices) else np.zeros(0)
            self._weights_for = edges
        assert self._weights is not None
        return self._weights

    def _levels(self, source_ids: list[int]) -> np.ndarray:
        """``levels × sources × states``: level k is the cheapest sum over paths of ≤ k moves.

        Float addition is monotone, so each round's minimum is the exact smallest path-order
        sum over one more move; the rounds stop when nothing improves. A round relaxes only
        the moves out of states that improved in the round before (for some source): a move
        out of any other state offers the very sum it offered a round earlier, already in
        the minimum, so the levels are the same floats as relaxing every move each round
        (Mixtral 8x7B training on dp=2,ep=4,tp=8, its 334 searches: 0.80 s of CPU relaxing
        every move, 0.58 s with the frontier, the same levels bit for bit; gpt2 dp=2,tp=4 and
        llama3-8b dp=4,fsdp=4,tp=4 alike, loaded 2-core machine).

        Sources are searched ``SOURCE_CHUNK`` at a time: each source's levels are its own, so
        the chunks give the same floats, but a small chunk keeps the frontier to the states
        that improved for *its* sources (a few hundred sources together improve almost every
        state each round) and its arrays small (gpt2 training on dp=2,tp=2,cp=2,ep=2: 2,256
        states, ~51,000 moves and 607 sources per search, whose gathers were 250 MB a round;
        its 60 largest searches took 15.7-25.5 s of CPU at once, 5.5-6.4 s in chunks of 8-16).
        A chunk that settles early repeats its last level, as the longer search does."""
        edges = self.graph.edges()
        chunks = [self._chunk_levels(edges, source_ids[start:start + SOURCE_CHUNK])
                  for start in range(0, len(source_ids), SOURCE_CHUNK)]
        depth = max(len(levels) for levels in chunks)
        out = np.empty((depth, len(source_ids), edges.states))
        start = 0
        for levels in chunks:
            stop = start + levels[0].shape[1]
            for k in range(depth):
                out[k, start:stop] = levels[min(k, len(levels) - 1)].T
            start = stop
        return out

    def _chunk_levels(self, edges: Edges, source_ids: list[int]) -> list[np.ndarray]:
        """The levels of a few sources, each ``states × sources`` (see :meth:`_levels`)."""
        weights = self._edge_weights(edges)[:, None]
        target_of = np.repeat(edges.group_targets,
                              np.diff(np.r_[edges.group_starts, len(edges.src)]))
        # states × sources: a move's gather and the minimum over a target's moves then run
        # over contiguous rows (the same sums and minima as sources × states, ~2x faster)
        current = np.full((edges.states, len(source_ids)), math.inf)
        current[source_ids, np.arange(len(source_ids))] = 0.0
        levels = [current]
        changed = np.zeros(edges.states, dtype=bool)
        changed[source_ids] = True
        while len(edges.src):
            live = np.flatnonzero(changed[edges.src])  # in target order, as edges are
            if not live.size:
                break
            targets = target_of[live]
            starts = np.flatnonzero(np.r_[True, targets[1:] != targets[:-1]])
            arrived = np.minimum.reduceat(current[edges.src[live]] + weights[live], starts,
                                          axis=0)
            reached = targets[starts]
            better = arrived < current[reached]
            if not better.any():
                break
            improved = current.copy()
            improved[reached] = np.minimum(current[reached], arrived)
            changed = np.zeros(edges.states, dtype=bool)
            changed[reached[better.any(axis=1)]] = True
            levels.append(improved)
            current = improved
        return levels


def _split_by_axis(levels: np.ndarray, edges: Edges, weights: np.ndarray,
                   edge_parts: np.ndarray) -> np.ndarray:
    """``sources × states × parts`` (see ``PricedSpace.axis_costs``), every source of
    ``levels`` (``levels × sources × states``) at once: per level, per source and state, the
    first move in canonical order into the state that attains its sum (the least move index
    of its target's group, by ``np.minimum.reduceat``). The same additions as one source at
    a time, so the same floats (Mixtral 8x7B on dp=2,ep=4,tp=8: 2,015 sources one by one were
    the cost phase's largest Python loop)."""
    count, sources, states = levels.shape
    moves = len(edges.src)
    parts = np.zeros((count, sources, states, edge_parts.shape[1]))
    target_of = edges.group_targets.repeat(np.diff(np.r_[edges.group_starts, moves]))
    index = np.arange(moves)
    for level in range(1, count):
        value, before = levels[level], levels[level - 1]
        same = before == value  # reached with fewer moves: its split already holds
        parts[level][same] = parts[level - 1][same]
        if not moves:
            continue
        sums = before[:, edges.src] + weights[None, :]
        hit = (sums == value[:, target_of]) & ~same[:, target_of] & np.isfinite(sums)
        if not hit.any():
            continue
        first = np.minimum.reduceat(np.where(hit, index[None, :], moves), edges.group_starts,
                                    axis=1)
        source, group = np.nonzero(first < moves)
        chosen = first[source, group]  # the first move into each state that attains it
        parts[level][source, edges.group_targets[group]] = \
            parts[level - 1][source, edges.src[chosen]] + edge_parts[chosen]
    final = _tie_levels(levels)
    out = np.take_along_axis(parts, np.maximum(final, 0)[None, :, :, None], axis=0)[0]
    out[final < 0] = 0.0
    return out


def _tie_levels(levels: np.ndarray) -> np.ndarray:
    """Per state (column), the fewest moves whose cheapest sum is within ``TIE_TOLERANCE`` of
    the best; -1 where unreachable."""
    best = levels[-1]
    first = np.argmax(levels <= best + TIE_TOLERANCE * np.abs(best), axis=0)
    first[np.isinf(best)] = -1
    return first


def _settle_ties(levels: np.ndarray) -> np.ndarray:
    """Per state, the cheapest sum at the fewest moves within ``TIE_TOLERANCE`` of the best
    (``levels × states``, or ``levels × sources × states`` for every source at once)."""
    first = _tie_levels(levels)
    row = np.take_along_axis(levels, np.maximum(first, 0)[None, ...], axis=0)[0]
    row[first < 0] = math.inf
    return row
