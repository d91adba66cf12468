"""Device blocks against the truth: who holds which elements, and how far they are off.

Why apart from :mod:`autoshard.sharding.layout`: the emulator compares after every op and reshard,
so these helpers are memoized per (sharding, shape) and compare each device's block with the
matching slice of the unsharded value directly, which also measures how wrong a replica that
disagrees with the others is (instead of only saying that it does). Partial layouts are
reduced first (:func:`autoshard.sharding.layout.unshard_arrays`), since no single block is
comparable.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autoshard.sharding.layout import held_indices, shard_array, unshard_arrays
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import parse_placement
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.verify.reference import SCALE_FLOOR, Error, as_float64, compare

Coord = tuple[int, ...]


def shard_all(value: np.ndarray, sharding: TensorSharding, seed: int) -> dict[Coord, Any]:
    """Every device's block of ``value`` (one shared read-only array when replicated)."""
    if sharding.is_replicated:
        shared = as_float64(value)
        shared.flags.writeable = False
        return dict.fromkeys(sharding.mesh.all_coords(), shared)
    return {c: as_float64(shard_array(value, sharding, c, seed=seed))
            for c in sharding.mesh.all_coords()}


@functools.lru_cache(maxsize=4096)
def _held(sharding: TensorSharding, shape: tuple[int, ...]) -> dict[Coord, Any]:
    """Per device, the index of its block in the global value: basic slices when every dim's
    indices are one contiguous run (a view, no copy), else an ``np.ix_`` index."""
    out = {}
    for coord in sharding.mesh.all_coords():
        per_dim = held_indices(sharding, shape, coord)
        if all(len(i) == 0 or int(i[-1]) - int(i[0]) + 1 == len(i) for i in per_dim):
            out[coord] = tuple(slice(int(i[0]), int(i[-1]) + 1) if len(i) else slice(0, 0)
                               for i in per_dim)
        else:
            out[coord] = np.ix_(*per_dim)
    return out


@functools.lru_cache(maxsize=4096)
def _shapes(sharding: TensorSharding, shape: tuple[int, ...]) -> dict[Coord, tuple[int, ...]]:
    return {c: tuple(len(i) for i in held_indices(sharding, shape, c))
            for c in sharding.mesh.all_coords()}


def local_shape(sharding: TensorSharding, shape: Sequence[int], coord: Coord
                ) -> tuple[int, ...]:
    """The shape of the block the device at ``coord`` holds (uneven shards included)."""
    return _shapes(sharding, tuple(shape))[coord]


def error_of(local: Mapping[Coord, np.ndarray], sharding: TensorSharding, want: np.ndarray
             ) -> tuple[Error, str]:
    """The error of the devices' blocks against ``want``, and where the worst one is (text
    for messages). Raises ValueError when Partial shares cannot be reduced consistently."""
    if sharding.partial_axes:
        return compare(unshard_arrays(local, sharding, want.shape), want), ""
    index = _held(sharding, tuple(want.shape))
    scale = max(float(np.abs(want).max()) if want.size else 0.0, SCALE_FLOOR)
    worst, where, seen = Error(0.0, 0.0), "", []
    for coord, block in local.items():
        if any(block is other for other in seen):
            continue
        seen.append(block)
        expected = want[index[coord]]
        if tuple(np.shape(block)) != tuple(np.shape(expected)):
            return Error(float("inf"), float("inf")), f" (device {coord} holds a block of " \
                f"shape {np.shape(block)}, not {np.shape(expected)})"
        error = compare(block, expected)
        error = Error(error.abs_err, error.abs_err / scale)
        if error.abs_err > worst.abs_err:
            worst, where = error, f" on device {coord}"
    return worst, where


def same_layout(a: TensorSharding, b: TensorSharding, shape: Sequence[int]) -> bool:
    """True when every device holds the same elements under ``a`` and ``b`` (spellings of one
    layout, e.g. ``_StridedShard`` and a ``shard_order``)."""
    if a == b:
        return True
    if sorted(a.partial_axes) != sorted(b.partial_axes):
        return False
    return all(all(np.array_equal(x, y) for x, y in
                   zip(held_indices(a, shape, c), held_indices(b, shape, c), strict=True))
               for c in a.mesh.all_coords())


def parse_sharding(mesh: Mesh, placements: Sequence[str], ndim: int) -> TensorSharding:
    """A sharding from a plan's short placements (mesh order on every dim)."""
    return TensorSharding(mesh, tuple(parse_placement(p) for p in placements), ndim)
