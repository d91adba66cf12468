"""Shortest paths over layout states, resumable and shared between queries.

Why a separate module: :func:`autoshard.reshard.reshard_cost_matrix` asks for millions of
(source, target) prices on a large model, and most share a source, a tensor size and a mesh.
One :class:`PathSearch` per (source state, shape, itemsize, allowed Partial ops) runs Dijkstra
lazily: asking for a target settles states only until that target is settled, and the next
query resumes where the last one stopped. Step prices come from ``costmodel`` through a memo
keyed by (kind, axes, bytes), because the same few byte sizes recur on every path.

Ties are broken deterministically: by cost, then number of steps, then the state tuple.
Costs within a relative ``TIE_TOLERANCE`` count as equal, so that rounding noise (a ring
reduce-scatter plus all-gather sums to the ring all-reduce only up to the last bit) never
prefers the longer sequence.
"""

from __future__ import annotations

import heapq
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from autoshard.links import MeshLinks
from autoshard.reshard_state import (
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
from costmodel import CollectiveKind, collective_seconds

logger = logging.getLogger(__name__)

_COSTMODEL_KIND = {
    ALL_GATHER: CollectiveKind.ALL_GATHER,
    ALL_REDUCE: CollectiveKind.ALL_REDUCE,
    REDUCE_SCATTER: CollectiveKind.REDUCE_SCATTER,
    ALL_TO_ALL: CollectiveKind.ALL_TO_ALL,
    COLLECTIVE_PERMUTE: CollectiveKind.COLLECTIVE_PERMUTE,
}


TIE_TOLERANCE = 1e-12


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


@dataclass(slots=True)
class SearchSpace:
    """Everything about one (mesh, links, shape, itemsize, allowed Partial) search space.

    States get small integer ids on first sight (hashing an int is much cheaper than hashing
    a nested tuple); each state's priced moves are computed once and shared by every search.
    """

    sizes: tuple[int, ...]
    shape: tuple[int, ...]
    total_bytes: float
    allowed_partial: tuple[tuple[int, str], ...]
    pricer: Pricer
    states: list[State] = field(default_factory=list)
    index: dict[State, int] = field(default_factory=dict)
    _edges: list[list[tuple[int, float, Move]] | None] = field(default_factory=list)

    def id_of(self, state: State) -> int:
        found = self.index.get(state)
        if found is None:
            found = len(self.states)
            self.index[state] = found
            self.states.append(state)
            self._edges.append(None)
        return found

    def edges(self, state_id: int) -> list[tuple[int, float, Move]]:
        """(target id, seconds, move) for every move out of the state, priced."""
        cached = self._edges[state_id]
        if cached is None:
            moves = moves_from(self.states[state_id], self.sizes, self.shape,
                               self.allowed_partial,
                               multi_axis_slices=self.pricer.device_hbm_bw is not None)
            cached = [(self.id_of(move.after),
                       self.pricer.seconds(move.kind, move.axes,
                                           self.total_bytes / move.bytes_divisor), move)
                      for move in moves]
            self._edges[state_id] = cached
        return cached


@dataclass(slots=True)
class PathSearch:
    """Lazy single-source Dijkstra from ``source`` over ``space``."""

    space: SearchSpace
    source: State
    _source_id: int = -1
    _best: dict[int, tuple[float, int]] = field(default_factory=dict)
    _pred: dict[int, tuple[int, Move, float]] = field(default_factory=dict)
    _settled: set[int] = field(default_factory=set)
    _heap: list[tuple[float, int, State, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._source_id = self.space.id_of(self.source)
        self._best[self._source_id] = (0.0, 0)
        self._heap.append((0.0, 0, self.source, self._source_id))

    def cost(self, target: State) -> float:
        """Cheapest seconds from the source to ``target``; ``math.inf`` when unreachable."""
        return self.cost_of_id(self.space.id_of(target))

    def cost_of_id(self, target_id: int) -> float:
        self._settle(target_id)
        return self._best[target_id][0] if target_id in self._settled else math.inf

    def path(self, target: State) -> list[tuple[State, Move, float]] | None:
        """(state before, move, seconds) along the cheapest path, or ``None`` if unreachable."""
        if math.isinf(self.cost(target)):
            return None
        steps = []
        state_id = self.space.id_of(target)
        while state_id != self._source_id:
            before, move, seconds = self._pred[state_id]
            steps.append((self.space.states[before], move, seconds))
            state_id = before
        steps.reverse()
        return steps

    def _settle(self, target_id: int) -> None:
        """Dijkstra until ``target_id`` is settled.

        A candidate replaces a known label when it is cheaper beyond ``TIE_TOLERANCE``, or as
        cheap within it and in fewer steps. This loop prices every reshard of a large model
        (millions of relaxations on 405B), so it binds everything to locals and compares
        without building tuples.
        """
        settled = self._settled
        if target_id in settled:
            return
        heap, best, pred = self._heap, self._best, self._pred
        states, edges = self.space.states, self.space.edges
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            cost, steps, _state, state_id = pop(heap)
            if state_id in settled:
                continue
            known_cost, known_steps = best[state_id]
            if known_cost != cost or known_steps != steps:
                continue
            settled.add(state_id)
            steps += 1
            for after, seconds, move in edges(state_id):
                if after in settled:
                    continue
                candidate = cost + seconds
                known = best.get(after)
                if known is not None:
                    tolerance = TIE_TOLERANCE * abs(known[0])
                    if not (candidate < known[0] - tolerance
                            or (candidate <= known[0] + tolerance and steps < known[1])):
                        continue
                best[after] = (candidate, steps)
                pred[after] = (state_id, move, seconds)
                push(heap, (candidate, steps, states[after], after))
            if state_id == target_id:
                return
