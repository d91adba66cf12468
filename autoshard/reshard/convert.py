"""Conversion between :class:`~autoshard.sharding.tensor_sharding.TensorSharding` and the search's
layout state.

Kept apart so that the search and the executor only ever see the compact state of
:mod:`autoshard.reshard.state`, and only this module knows how placements, ``shard_order`` and
``_StridedShard`` spell a dim's ordered mesh axes. Both directions are memoized: the cost
matrix converts the same shardings millions of times.
"""

from __future__ import annotations

import functools

from autoshard.reshard.state import State
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import Partial, Replicate, Shard
from autoshard.sharding.tensor_sharding import TensorSharding


@functools.lru_cache(maxsize=65536)
def state_of(sharding: TensorSharding) -> State:
    """(per-dim mesh axis indices major→minor, sorted (axis, reduce op) Partial pairs)."""
    mesh = sharding.mesh
    dims = tuple(tuple(int(mesh.axis_index(name)) for name in axes)
                 for axes in sharding.dim_axes)
    partial = tuple(sorted((int(mesh.axis_index(name)), str(op))
                           for name, op in sharding.partial_axes))
    return dims, partial


@functools.lru_cache(maxsize=65536)
def to_sharding(mesh: Mesh, ndim: int, state: State) -> TensorSharding:
    """The TensorSharding of a state; ``shard_order`` only when some dim is not in mesh order."""
    dims, partial = state
    placements: list[object] = [Replicate() for _ in mesh.axis_names]
    for dim, axes in enumerate(dims):
        for axis in axes:
            placements[axis] = Shard(dim)
    for axis, op in partial:
        placements[axis] = Partial(op)
    in_mesh_order = all(list(axes) == sorted(axes) for axes in dims)
    shard_order = None if in_mesh_order else tuple(
        (dim, axes) for dim, axes in enumerate(dims) if axes)
    return TensorSharding(mesh, tuple(placements), ndim, shard_order)
