"""The cheapest way to turn one sharding of a tensor into another, as named collectives.

Every producer→consumer edge of a plan whose shardings differ pays a reshard; this module finds
the cheapest sequence of steps and prices it with ``costmodel``. Steps act on the current
local shape (DTensor ``_redistribute.py``, Shardy ``reshard_to_collectives.cc``): all-gather (S→R,
popping a suffix of a dim's axes, one axis or several at once), all-reduce (P→R), reduce-scatter
(P→S), all-to-all (S(i)→S(j)), local slice (R→S), replicated-to-partial (R→P, free) and
collective-permute (swap equal-sized axes). Nested shardings of a dim are undone minor axis first,
because only a suffix can be gathered. ``_StridedShard`` placements are handled through the dim
axis order they encode.

Promises: A→A costs 0 with no steps; the result is the cheapest under these steps (shortest
paths from all sources at once, ``reshard_search``: within a 1e-12 relative tie the fewest
steps win, then the first move in a canonical order); same inputs give the same steps,
whatever was priced before. Local
slices cost a read and a write of the output at ``device_hbm_bw`` when given, else nothing.
Only evenly divisible layouts are visited; uneven endpoints are reported as unreachable.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoshard.errors import AutoshardError
from autoshard.reshard.convert import state_of, to_sharding
from autoshard.reshard.search import PricedSpace, Pricer, StateGraph, divisibility_shape
from autoshard.reshard.state import Move, State, clear_move_cache, is_divisible
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.tensor_sharding import TensorSharding

logger = logging.getLogger(__name__)


class ReshardError(AutoshardError):
    """No sequence of steps turns the source sharding into the target."""

    def __init__(self, message: str, *, src: str = "", dst: str = "",
                 shape: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.src, self.dst, self.shape = src, dst, shape


@dataclass(frozen=True, slots=True, kw_only=True)
class Collective:
    """One step of a reshard, priced.

    ``kind`` is one of ``all_gather``, ``all_reduce``, ``reduce_scatter``, ``all_to_all``,
    ``collective_permute`` (communication) or ``all_slice``, ``replicated_to_partial``
    (local). ``bytes`` follows costmodel's per-device conventions: the gathered output for an
    all-gather, the full input for a reduce-scatter, the local buffer otherwise (the output
    for a slice). ``src_dim`` is the dim gathered or sent from, ``dst_dim`` the dim sliced or
    scattered into; ``reduce_op`` is set for reductions and R→P.
    """

    kind: str
    axes: tuple[str, ...]
    group_size: int
    bytes: float
    seconds: float
    src_dim: int | None = None
    dst_dim: int | None = None
    reduce_op: str | None = None

    @property
    def is_local(self) -> bool:
        return self.kind in ("all_slice", "replicated_to_partial")


@dataclass(frozen=True, slots=True)
class ReshardStep:
    """A collective with the shardings before and after it."""

    collective: Collective
    before: TensorSharding
    after: TensorSharding


@dataclass(frozen=True, slots=True, kw_only=True)
class Reshard:
    """A priced path from ``src`` to ``dst``; ``seconds`` is the sum of the steps' seconds."""

    src: TensorSharding
    dst: TensorSharding
    steps: tuple[ReshardStep, ...]
    seconds: float

    @property
    def collectives(self) -> tuple[Collective, ...]:
        """Every step's collective in order, local steps included (they cost 0 or a copy)."""
        return tuple(step.collective for step in self.steps)


_PRICERS: dict[tuple[Any, ...], Pricer] = {}
_GRAPHS: dict[tuple[Any, ...], StateGraph] = {}
_SPACES: dict[tuple[Any, ...], PricedSpace] = {}
_MATRICES: dict[tuple[Any, ...], np.ndarray] = {}
_AXIS_MATRICES: dict[tuple[Any, ...], np.ndarray] = {}


def clear_caches() -> None:
    """Forget every memoized search (for benchmarks measuring cold runs, and memory)."""
    for cache in (_PRICERS, _GRAPHS, _SPACES, _MATRICES, _AXIS_MATRICES):
        cache.clear()
    clear_move_cache()


def find_reshard(src: TensorSharding, dst: TensorSharding, global_shape: Sequence[int],
                 itemsize: int, links: MeshLinks,
                 device_hbm_bw: float | None = None) -> Reshard:
    """The cheapest sequence of collectives turning ``src`` into ``dst``.

    Args:
        src, dst: shardings of the same tensor on the same mesh.
        global_shape: the tensor's global shape.
        itemsize: bytes per element.
        links: the mesh's axes mapped to links (prices the collectives).
        device_hbm_bw: bytes/s to price local slices as a copy; ``None`` makes them free.

    Returns:
        A :class:`Reshard` whose steps go from ``src`` to ``dst``; no steps when equal.

    Raises:
        ReshardError: different meshes, ``global_shape`` not matching the shardings, or no
            path (a layout that does not divide the shape evenly).

    Example:
        >>> from costmodel import get_preset
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.placements import Replicate, Shard
        >>> mesh = Mesh(axes=(("x", 4),))
        >>> links = MeshLinks.build(mesh, get_preset("dgx-h100"))
        >>> src = TensorSharding(mesh, (Shard(0),), 2)
        >>> dst = TensorSharding(mesh, (Replicate(),), 2)
        >>> [c.kind for c in find_reshard(src, dst, (8, 8), 4, links).collectives]
        ['all_gather']
    """
    shape = _check(src, dst, global_shape, links)
    if src == dst:
        return Reshard(src=src, dst=dst, steps=(), seconds=0.0)
    target = state_of(dst)
    space = _space_for(src, target[1], shape, itemsize, links, device_hbm_bw)
    divisible = is_divisible(target[0], space.graph.sizes, shape) if space else False
    path = space.path(state_of(src), target) if space is not None and divisible else None
    if path is None:
        raise _unreachable(src, dst, shape)
    steps = [_step(src.mesh, before, move, seconds, itemsize, shape)
             for before, move, seconds in path]
    if not steps:  # equal layouts spelled differently (e.g. _StridedShard vs shard_order)
        return Reshard(src=src, dst=dst, steps=(), seconds=0.0)
    steps[0] = ReshardStep(steps[0].collective, src, steps[0].after)
    steps[-1] = ReshardStep(steps[-1].collective, steps[-1].before, dst)
    seconds = 0.0
    for step in steps:  # the search's own order of additions: equals the matrix entry exactly
        seconds += step.collective.seconds
    return Reshard(src=src, dst=dst, steps=tuple(steps), seconds=seconds)


def reshard_cost_matrix(srcs: Sequence[TensorSharding], dsts: Sequence[TensorSharding],
                        global_shape: Sequence[int], itemsize: int, links: MeshLinks,
                        device_hbm_bw: float | None = None) -> np.ndarray:
    """Seconds of the cheapest reshard for every (src, dst) pair, shape ``(len(srcs), len(dsts))``.

    Equal to ``find_reshard(src, dst, ...).seconds`` entry by entry, except that pairs with no
    path (an uneven layout) are ``inf`` here instead of an error. Shardings are deduplicated;
    each source's row of prices is memoized per (shape's divisibility, bytes, links), and the
    matrix between the distinct shardings is memoized too, so a repeated layer costs one
    dictionary lookup and overlapping matrices share their searches.
    """
    if not srcs or not dsts:
        return np.zeros((len(srcs), len(dsts)))
    shape = _check(srcs[0], dsts[0], global_shape, links)
    unique_src = list(dict.fromkeys(srcs))
    unique_dst = list(dict.fromkeys(dsts))
    key = (tuple(unique_src), tuple(unique_dst), shape, itemsize, links.describe_key(),
           device_hbm_bw)
    small = _MATRICES.get(key)
    if small is None:
        small = _small_matrix(unique_src, unique_dst, shape, itemsize, links, device_hbm_bw)
        small.setflags(write=False)
        _MATRICES[key] = small
    src_index = {s: i for i, s in enumerate(unique_src)}
    dst_index = {d: j for j, d in enumerate(unique_dst)}
    rows = np.fromiter((src_index[s] for s in srcs), dtype=np.intp, count=len(srcs))
    cols = np.fromiter((dst_index[d] for d in dsts), dtype=np.intp, count=len(dsts))
    return small[np.ix_(rows, cols)]


def reshard_axis_matrices(srcs: Sequence[TensorSharding], dsts: Sequence[TensorSharding],
                          global_shape: Sequence[int], itemsize: int, links: MeshLinks,
                          device_hbm_bw: float | None = None) -> np.ndarray:
    """Where the seconds of each cheapest reshard are spent, shape ``(len(srcs), len(dsts),
    axes + 1)``: per mesh axis (a collective over several axes counts on each, since it holds
    all their links) and, last, in local steps. Along the very path ``find_reshard`` takes, so
    ``find_reshard(src, dst).collectives`` split the same way give the same numbers; zero
    where ``reshard_cost_matrix`` is inf.

    Why: an overlap model runs each mesh axis's collectives on a stream of their own, so it
    needs each axis's busy time, not only the total.
    """
    axes = len(links.mesh.axis_names)
    if not srcs or not dsts:
        return np.zeros((len(srcs), len(dsts), axes + 1))
    shape = _check(srcs[0], dsts[0], global_shape, links)
    unique_src = list(dict.fromkeys(srcs))
    unique_dst = list(dict.fromkeys(dsts))
    key = (tuple(unique_src), tuple(unique_dst), shape, itemsize, links.describe_key(),
           device_hbm_bw)
    small = _AXIS_MATRICES.get(key)
    if small is None:
        small = _small_axis_matrix(unique_src, unique_dst, shape, itemsize, links,
                                   device_hbm_bw)
        small.setflags(write=False)
        _AXIS_MATRICES[key] = small
    src_index = {s: i for i, s in enumerate(unique_src)}
    dst_index = {d: j for j, d in enumerate(unique_dst)}
    rows = np.fromiter((src_index[s] for s in srcs), dtype=np.intp, count=len(srcs))
    cols = np.fromiter((dst_index[d] for d in dsts), dtype=np.intp, count=len(dsts))
    return small[np.ix_(rows, cols)]


def _small_axis_matrix(unique_src: list[TensorSharding], unique_dst: list[TensorSharding],
                       shape: tuple[int, ...], itemsize: int, links: MeshLinks,
                       device_hbm_bw: float | None) -> np.ndarray:
    """``reshard_axis_matrices`` between distinct shardings (as ``_small_matrix`` does)."""
    axes = len(links.mesh.axis_names)
    small = np.zeros((len(unique_src), len(unique_dst), axes + 1))
    targets = [state_of(dst) for dst in unique_dst]
    sources = [state_of(src) for src in unique_src]
    sizes = tuple(int(n) for n in unique_src[0].mesh.axis_sizes)
    rows = [i for i, source in enumerate(sources) if is_divisible(source[0], sizes, shape)]
    columns: dict[Any, list[int]] = {}
    for j, target in enumerate(targets):
        columns.setdefault(target[1], []).append(j)
    for allowed, js in columns.items():
        space = _space_for(unique_src[rows[0]], allowed, shape, itemsize, links,
                           device_hbm_bw) if rows else None
        if space is None:
            continue
        parts = space.axis_costs([sources[i] for i in rows])
        index = space.graph.index
        ids = np.array([index.get(targets[j], -1)
                        if is_divisible(targets[j][0], sizes, shape) else -1 for j in js],
                       dtype=np.intp)
        found = ids >= 0
        block = np.zeros((len(rows), len(js), axes + 1))
        block[:, found] = parts[:, ids[found]]
        small[np.ix_(rows, js)] = block
    return small


def _small_matrix(unique_src: list[TensorSharding], unique_dst: list[TensorSharding],
                  shape: tuple[int, ...], itemsize: int, links: MeshLinks,
                  device_hbm_bw: float | None) -> np.ndarray:
    """Costs between distinct shardings: one all-sources search per target Partial set.

    Targets are grouped by their Partial axes (which R→P steps may create) and looked up once
    per group as state ids, not once per pair."""
    small = np.full((len(unique_src), len(unique_dst)), math.inf)
    if not unique_src:
        return small
    targets = [state_of(dst) for dst in unique_dst]
    columns: dict[Any, list[int]] = {}
    for j, target in enumerate(targets):
        columns.setdefault(target[1], []).append(j)
    sources = [state_of(src) for src in unique_src]
    sizes = tuple(int(n) for n in unique_src[0].mesh.axis_sizes)
    rows = [i for i, source in enumerate(sources) if is_divisible(source[0], sizes, shape)]
    for allowed, js in columns.items():
        space = _space_for(unique_src[rows[0]], allowed, shape, itemsize, links,
                           device_hbm_bw) if rows else None
        if space is None:
            continue
        costs = space.costs([sources[i] for i in rows])
        index = space.graph.index
        ids = np.array([index.get(targets[j], -1)
                        if is_divisible(targets[j][0], sizes, shape) else -1 for j in js],
                       dtype=np.intp)
        found = ids >= 0
        block = np.full((len(rows), len(js)), math.inf)
        block[:, found] = costs[:, ids[found]]
        small[np.ix_(rows, js)] = block
    dst_index = {dst: j for j, dst in enumerate(unique_dst)}
    for i, src in enumerate(unique_src):  # equal shardings cost nothing, even uneven ones
        j = dst_index.get(src)
        if j is not None:
            small[i, j] = 0.0
    return small


def _check(src: TensorSharding, dst: TensorSharding, global_shape: Sequence[int],
           links: MeshLinks) -> tuple[int, ...]:
    shape = tuple(int(n) for n in global_shape)
    if src.mesh != dst.mesh or src.mesh != links.mesh:
        message = (f"cannot reshard between meshes: source on {src.mesh!r}, target on "
                   f"{dst.mesh!r}, links built for {links.mesh!r}; use one mesh for all three")
        raise ReshardError(message, src=str(src), dst=str(dst), shape=shape)
    if src.ndim != len(shape) or dst.ndim != len(shape):
        message = (f"shape {shape} has {len(shape)} dims but the shardings have {src.ndim} "
                   f"and {dst.ndim}; pass the tensor's global shape")
        raise ReshardError(message, src=str(src), dst=str(dst), shape=shape)
    return shape


def _space_for(src: TensorSharding, allowed: tuple[tuple[int, str], ...],
               shape: tuple[int, ...], itemsize: int, links: MeshLinks,
               device_hbm_bw: float | None) -> PricedSpace | None:
    """The memoized priced space of ``src`` (``None`` when ``src`` itself is uneven).

    ``allowed`` are the target's Partial (axis, op) pairs, which R→P steps may create.
    """
    source = state_of(src)
    mesh = src.mesh
    sizes = tuple(int(n) for n in mesh.axis_sizes)
    if not is_divisible(source[0], sizes, shape):
        return None
    links_key = (links.describe_key(), device_hbm_bw)
    pricer = _PRICERS.get(links_key)
    if pricer is None:
        pricer = Pricer(links=links, axis_names=tuple(mesh.axis_names),
                        device_hbm_bw=device_hbm_bw)
        _PRICERS[links_key] = pricer
    multi_axis = device_hbm_bw is not None
    graph_key = (sizes, divisibility_shape(sizes, shape), allowed, multi_axis)
    graph = _GRAPHS.get(graph_key)
    if graph is None:
        graph = StateGraph(sizes=sizes, shape=graph_key[1], allowed_partial=allowed,
                           multi_axis_slices=multi_axis)
        _GRAPHS[graph_key] = graph
    total = float(math.prod(shape) * itemsize)
    space_key = (links_key, graph_key, total)
    space = _SPACES.get(space_key)
    if space is None:
        space = PricedSpace(graph=graph, total_bytes=total, pricer=pricer)
        _SPACES[space_key] = space
    return space


def _unreachable(src: TensorSharding, dst: TensorSharding,
                 shape: tuple[int, ...]) -> ReshardError:
    message = (f"no reshard from {src} to {dst} for shape {shape}: one of them does not divide "
               f"the shape evenly over its mesh axes; pick shardings whose mesh axis sizes "
               f"divide the dims they shard")
    return ReshardError(message, src=str(src), dst=str(dst), shape=shape)


def _step(mesh: Any, before: State, move: Move, seconds: float, itemsize: int,
          shape: tuple[int, ...]) -> ReshardStep:
    names = tuple(mesh.axis_names)
    total = float(math.prod(shape) * itemsize)
    collective = Collective(
        kind=move.kind, axes=tuple(names[a] for a in move.axes),
        group_size=math.prod(int(mesh.axis_sizes[a]) for a in move.axes),
        bytes=total / move.bytes_divisor, seconds=seconds,
        src_dim=move.src_dim, dst_dim=move.dst_dim, reduce_op=move.reduce_op)
    return ReshardStep(collective=collective, before=to_sharding(mesh, len(shape), before),
                       after=to_sharding(mesh, len(shape), move.after))
