"""Execute a reshard's collectives on per-device NumPy shards.

Why: a price is only trustworthy if the steps it prices really turn the source shards into
the target shards. Each step here computes every device's new local array from the local
arrays of the devices in its group and the step's description alone (kind, axes, dims,
reduce op), exactly as the collective would on hardware; nothing ever rebuilds the global
tensor. This is the basis of the SPMD emulator.

Devices are mesh positions in row-major order; ``local_arrays[k]`` belongs to the device at
position ``k``. A group over axes ``A`` is the devices that agree on every other axis; its
members are ordered by the mixed-radix number of their coordinates on ``A`` (first axis most
significant), which is the order blocks concatenate in. Worked example, mesh ``x=2, y=2``,
all-gather of dim 0 over ``("y",)``::

    position  coords(x,y)  group (ordered)   result
    0         (0, 0)       [0, 1]            concat(local[0], local[1])
    1         (0, 1)       [0, 1]            same as position 0
    2         (1, 0)       [2, 3]            concat(local[2], local[3])
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from functools import reduce

import numpy as np

from autoshard.reshard.convert import state_of
from autoshard.reshard.find import Collective, Reshard, ReshardStep
from autoshard.reshard.state import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_SLICE,
    ALL_TO_ALL,
    COLLECTIVE_PERMUTE,
    REDUCE_SCATTER,
    REPLICATED_TO_PARTIAL,
)

logger = logging.getLogger(__name__)

_REDUCERS = {
    "sum": lambda arrays: reduce(np.add, arrays),
    "avg": lambda arrays: reduce(np.add, arrays) / len(arrays),
    "max": lambda arrays: reduce(np.maximum, arrays),
    "min": lambda arrays: reduce(np.minimum, arrays),
    "product": lambda arrays: reduce(np.multiply, arrays),
}


def apply_reshard(local_arrays: Sequence[np.ndarray], reshard: Reshard,
                  global_shape: Sequence[int]) -> list[np.ndarray]:
    """Run every step of ``reshard`` on the devices' local arrays.

    Args:
        local_arrays: one local array per mesh position, laid out as ``reshard.src``.
        reshard: the steps to run (from :func:`autoshard.reshard.find.find_reshard`).
        global_shape: the tensor's global shape (checks the local shapes at every step).

    Returns:
        One local array per mesh position, laid out as ``reshard.dst``.

    Example:
        >>> from costmodel import get_preset
        >>> from autoshard.sharding.links import MeshLinks
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.placements import Replicate, Shard
        >>> from autoshard.reshard.find import find_reshard
        >>> from autoshard.sharding.tensor_sharding import TensorSharding
        >>> mesh = Mesh(axes=(("x", 2),))
        >>> links = MeshLinks.build(mesh, get_preset("dgx-h100"))
        >>> plan = find_reshard(TensorSharding(mesh, (Shard(0),), 1),
        ...                     TensorSharding(mesh, (Replicate(),), 1), (4,), 8, links)
        >>> [a.tolist() for a in apply_reshard([np.arange(2), np.arange(2, 4)], plan, (4,))]
        [[0, 1, 2, 3], [0, 1, 2, 3]]
    """
    arrays = list(local_arrays)
    for step in reshard.steps:
        arrays = apply_step(arrays, step, global_shape)
    return arrays


def apply_step(local_arrays: Sequence[np.ndarray], step: ReshardStep,
               global_shape: Sequence[int]) -> list[np.ndarray]:
    """Run one collective of a reshard on the devices' local arrays."""
    mesh = step.before.mesh
    sizes = tuple(int(n) for n in mesh.axis_sizes)
    _check_local_shapes(local_arrays, step, sizes, global_shape)
    collective = step.collective
    axes = tuple(int(mesh.axis_index(name)) for name in collective.axes)
    coords = [tuple(int(c) for c in np.unravel_index(p, sizes))
              for p in range(math.prod(sizes))]
    kind = collective.kind
    if kind == COLLECTIVE_PERMUTE:
        return _permute(local_arrays, coords, sizes, axes)
    if kind == REPLICATED_TO_PARTIAL:
        return _to_partial(local_arrays, coords, axes[0], collective.reduce_op or "sum")
    out = []
    for position, coord in enumerate(coords):
        members, rank = _group(coord, sizes, axes)
        out.append(_one_device(local_arrays, position, members, rank, collective))
    return out


def _one_device(arrays: Sequence[np.ndarray], position: int, members: list[int], rank: int,
                collective: Collective) -> np.ndarray:
    kind, size = collective.kind, len(members)
    src_dim, dst_dim = collective.src_dim, collective.dst_dim
    if kind == ALL_GATHER:
        return np.concatenate([arrays[q] for q in members], axis=src_dim)
    if kind == ALL_SLICE:
        return np.split(arrays[position], size, axis=dst_dim)[rank]
    if kind == ALL_TO_ALL:
        pieces = [np.split(arrays[q], size, axis=dst_dim)[rank] for q in members]
        return np.concatenate(pieces, axis=src_dim)
    reduced = _REDUCERS[collective.reduce_op or "sum"]([arrays[q] for q in members])
    if kind == ALL_REDUCE:
        return reduced
    if kind == REDUCE_SCATTER:
        return np.split(reduced, size, axis=dst_dim)[rank]
    message = f'unknown collective kind "{kind}" in a reshard step'
    raise AssertionError(message)


def _group(coord: tuple[int, ...], sizes: tuple[int, ...],
           axes: tuple[int, ...]) -> tuple[list[int], int]:
    """Positions of ``coord``'s group over ``axes`` in mixed-radix order, and its own rank."""
    members = []
    for values in itertools.product(*(range(sizes[a]) for a in axes)):
        other = list(coord)
        for axis, value in zip(axes, values, strict=True):
            other[axis] = value
        members.append(int(np.ravel_multi_index(tuple(other), sizes)))
    rank = 0
    for axis in axes:
        rank = rank * sizes[axis] + coord[axis]
    return members, rank


def _permute(arrays: Sequence[np.ndarray], coords: list[tuple[int, ...]],
             sizes: tuple[int, ...], axes: tuple[int, ...]) -> list[np.ndarray]:
    """Swap two equal-sized axes: device p takes the block of the device with p's coordinates
    on the two axes exchanged (that device's source tile is p's target tile)."""
    first, second = axes
    out = []
    for coord in coords:
        source = list(coord)
        source[first], source[second] = coord[second], coord[first]
        out.append(arrays[int(np.ravel_multi_index(tuple(source), sizes))])
    return out


def _to_partial(arrays: Sequence[np.ndarray], coords: list[tuple[int, ...]], axis: int,
                reduce_op: str) -> list[np.ndarray]:
    """R→P without communication: for a sum, coordinate 0 keeps the value and the others hold
    zeros (exact, unlike DTensor's division by n); avg, max and min keep the value."""
    if reduce_op != "sum":
        return [np.array(a, copy=True) for a in arrays]
    return [np.array(a, copy=True) if c[axis] == 0 else np.zeros_like(a)
            for a, c in zip(arrays, coords, strict=True)]


def _check_local_shapes(arrays: Sequence[np.ndarray], step: ReshardStep,
                        sizes: tuple[int, ...], global_shape: Sequence[int]) -> None:
    dims, _ = state_of(step.before)
    if len(arrays) != math.prod(sizes):
        message = f"{len(arrays)} local arrays for a mesh of {math.prod(sizes)} devices"
        raise ValueError(message)
    expected = tuple(int(n) // math.prod(sizes[a] for a in axes)
                     for n, axes in zip(global_shape, dims, strict=True))
    for position, array in enumerate(arrays):
        if tuple(array.shape) != expected:
            message = (f"device {position} holds a local array of shape {array.shape}, but "
                       f"{step.before} of global shape {tuple(global_shape)} needs {expected}")
            raise ValueError(message)
