"""Graph outputs must not be left Partial: the cheapest reduction of each, priced per option.

A strategy may leave a graph output as a pending sum (``Partial``); the plan then owes the
collective that completes it. That price belongs to the producing op's option (a node cost),
and the chosen reduction is reported as a reshard to ``<output>``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from autoshard.errors import AutoshardError
from autoshard.reshard.find import ReshardError, find_reshard
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.placements import Partial, Replicate, Shard
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import Strategy
from graphs import Op, OpGraph, TensorRole


def without_partial(sharding: TensorSharding) -> TensorSharding:
    placements = tuple(Replicate() if isinstance(p, Partial) else p
                       for p in sharding.placements)
    if placements == sharding.placements:
        return sharding
    return TensorSharding(sharding.mesh, placements, sharding.ndim, sharding.shard_order)


_FIX_CACHE: dict[tuple[Any, ...], tuple[TensorSharding, Any]] = {}


@dataclass(frozen=True, slots=True)
class _Unreachable:
    """The fix-up of a Partial output no collective can complete: an impossible option."""

    seconds: float = float("inf")
    collectives: tuple = ()


UNREACHABLE = _Unreachable()


def output_fix(sharding: TensorSharding, shape: tuple[int, ...], itemsize: int,
               links: MeshLinks, hbm_bw: float | None) -> tuple[TensorSharding, Any]:
    """The cheapest non-Partial layout a graph output can be reduced to, and the reshard.

    Each Partial axis becomes Replicate (all-reduce) or shards a dim (reduce-scatter): a graph
    output need not be replicated, only complete. Returns ``(sharding, None)`` when nothing is
    Partial.
    """
    partial_axes = [a for a, p in enumerate(sharding.placements) if isinstance(p, Partial)]
    if not partial_axes:
        return sharding, None
    key = (sharding, shape, itemsize, links.describe_key(), hbm_bw)
    if key in _FIX_CACHE:
        return _FIX_CACHE[key]
    choices = [Replicate(), *(Shard(d) for d in range(sharding.ndim))]
    best: tuple[TensorSharding, Any] | None = None
    for combo in itertools.product(choices, repeat=len(partial_axes)):
        placements = list(sharding.placements)
        for axis, placement in zip(partial_axes, combo, strict=True):
            placements[axis] = placement
        try:
            target = TensorSharding(sharding.mesh, tuple(placements), sharding.ndim)
        except AutoshardError:
            continue
        if not target.is_divisible(shape):
            continue
        reshard = find_reshard(sharding, target, shape, itemsize, links, hbm_bw)
        if best is None or reshard.seconds < best[1].seconds:
            best = (target, reshard)
    if best is None:  # nothing divides: replicate, if even that is reachable
        target = without_partial(sharding)
        try:
            best = (target, find_reshard(sharding, target, shape, itemsize, links, hbm_bw))
        except ReshardError:  # an uneven dim that no collective can move: never choose it
            best = (target, UNREACHABLE)
    _FIX_CACHE[key] = best
    return best


def output_fixups(graph: OpGraph, op: Op, strat: Strategy, links: MeshLinks,
                   hbm_bw: float | None) -> list[Any]:
    fixes = []
    for name, sharding in zip(op.outputs, strat.outputs, strict=True):
        tensor = graph.tensors[name]
        if tensor.role is TensorRole.OUTPUT:
            _target, reshard = output_fix(sharding, tensor.shape, tensor.dtype.itemsize, links,
                                          hbm_bw)
            if reshard is not None:
                fixes.append(reshard)
    return fixes
