"""Which elements each device holds: shard a NumPy array per a TensorSharding, and put it back.

This is the ground truth the rest of the project is tested against: strategies are proven by
running an op's NumPy reference on these local shards, reshard steps by executing them here.
It follows DTensor to the element: placements apply left to right over the mesh axes (or in
``shard_order`` on dims that have one), each chunking the current local block with
``torch.chunk`` sizes; ``StridedShard`` takes sub-piece ``r`` of each of ``split_factor``
blocks. Partial values are split into random parts whose reduction is the original, so a
strategy that wrongly treats a Partial as complete fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autoshard.sharding.placements import Partial, Shard, StridedShard, chunk_sizes, shard_dim
from autoshard.sharding.tensor_sharding import TensorSharding

Coord = tuple[int, ...]


def held_indices(sharding: TensorSharding, global_shape: Sequence[int], coord: Coord
                 ) -> tuple[np.ndarray, ...]:
    """Per dim, the global indices the device at ``coord`` holds, in local order."""
    sizes = sharding.mesh.axis_sizes
    explicit = dict(sharding.shard_order or ())
    out = []
    for dim, size in enumerate(global_shape):
        index = np.arange(size)
        if dim in explicit:
            steps = [(a, Shard(dim)) for a in explicit[dim]]
        else:
            steps = [(a, p) for a, p in enumerate(sharding.placements) if shard_dim(p) == dim]
        for axis, placement in steps:
            index = _take(index, placement, sizes[axis], coord[axis])
        out.append(index)
    return tuple(out)


def _take(index: np.ndarray, placement: Shard | StridedShard, n: int, rank: int) -> np.ndarray:
    if isinstance(placement, StridedShard):
        pieces = _chunks(index, placement.split_factor)
        return np.concatenate([_chunks(piece, n)[rank] for piece in pieces])
    return _chunks(index, n)[rank]


def _chunks(index: np.ndarray, parts: int) -> list[np.ndarray]:
    bounds = np.cumsum((0, *chunk_sizes(len(index), parts)))
    return [index[bounds[i]:bounds[i + 1]] for i in range(parts)]


def partial_part(value: np.ndarray, reduce_op: str, parts: int, rank: int, seed: int
                 ) -> np.ndarray:
    """Rank ``rank``'s share of ``value`` under Partial(reduce_op): random, but the shares
    reduce back to ``value`` exactly (up to rounding)."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((parts, *value.shape))
    noise -= noise.mean(axis=0)
    if reduce_op == "sum":
        return value / parts + noise[rank]
    if reduce_op == "avg":
        return value + noise[rank]
    gap = np.abs(noise[rank]) + 1.0
    if rank == 0:
        return value.copy()
    return value - gap if reduce_op == "max" else value + gap


def shard_array(array: np.ndarray, sharding: TensorSharding, coord: Coord | None = None, *,
                seed: int = 0) -> Any:
    """The local block the device at mesh coordinate ``coord`` holds; without ``coord``, the
    list of every device's block in row-major mesh order."""
    if coord is None:
        return [shard_array(array, sharding, c, seed=seed) for c in sharding.mesh.all_coords()]
    value = np.asarray(array)
    for axis, placement in enumerate(sharding.placements):
        if isinstance(placement, Partial):
            value = partial_part(value, placement.reduce_op, sharding.mesh.axis_sizes[axis],
                                 coord[axis], seed * 1009 + axis)
    index = held_indices(sharding, value.shape, coord)
    return value[np.ix_(*index)] if index else value.copy()


def shard_all(array: np.ndarray, sharding: TensorSharding, *, seed: int = 0
              ) -> dict[Coord, np.ndarray]:
    """Every device's block, keyed by mesh coordinate."""
    return {c: shard_array(array, sharding, c, seed=seed) for c in sharding.mesh.all_coords()}


_REDUCE = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min}


def unshard_arrays(local: Mapping[Coord, np.ndarray] | Sequence[np.ndarray],
                   sharding: TensorSharding, global_shape: Sequence[int]) -> np.ndarray:
    """Reassemble the global array from every device's block, reducing Partial axes.

    Replicas must agree: a device whose copy of an element differs from another replica's by
    more than rounding raises ValueError, since that is a wrong program, not a layout detail.
    """
    mesh = sharding.mesh
    if not isinstance(local, Mapping):
        local = dict(zip(mesh.all_coords(), local, strict=True))
    partial = [(a, p.reduce_op) for a, p in enumerate(sharding.placements)
               if isinstance(p, Partial)]
    groups: dict[Coord, np.ndarray] = {}
    filled: dict[Coord, np.ndarray] = {}
    for coord in mesh.all_coords():
        key = tuple(coord[a] for a, _ in partial)
        block = np.asarray(local[coord])
        if key not in groups:
            groups[key] = np.zeros(tuple(global_shape), dtype=np.result_type(block, np.float64))
            filled[key] = np.zeros(tuple(global_shape), dtype=bool)
        index = np.ix_(*held_indices(sharding, global_shape, coord)) if global_shape else ()
        seen = filled[key][index]
        if seen.any() and not np.allclose(groups[key][index][seen], block[seen],
                                          rtol=1e-6, atol=1e-8):
            raise ValueError(f"replicas disagree at mesh coordinate {coord}")
        groups[key][index] = block
        filled[key][index] = True
    # Undo the Partial splits in reverse order of shard_array's sequential splitting.
    values = groups
    for position in reversed(range(len(partial))):
        op = partial[position][1]
        merged: dict[Coord, list[np.ndarray]] = {}
        for key in sorted(values):
            merged.setdefault(key[:position], []).append(values[key])
        values = {k: _REDUCE[op](np.stack(v), axis=0) for k, v in merged.items()}
    return values[()]
