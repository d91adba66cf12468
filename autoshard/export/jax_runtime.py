"""The JAX side of an exported plan: each priced reshard step as exactly one collective.

Why: under ``jax.jit`` with sharding constraints XLA's SPMD partitioner picks its own
collectives, and a value with a pending reduction (Partial) has no ``NamedSharding`` that
``jax.device_put`` accepts, so a reshard from a Partial tensor would only name its target
and the reduction would never run. Here every step of the priced path runs inside
``jax.shard_map`` on the device's local block, as the collective it was priced as:

=====================  ==================================================================
step                   inside ``shard_map`` (axes ``A``, major → minor)
=====================  ==================================================================
all_gather             ``lax.all_gather(x, A, axis=src_dim, tiled=True)``
reduce_scatter         ``lax.psum_scatter(x, A, scatter_dimension=dst_dim, tiled=True)``
all_reduce             ``lax.psum`` (``pmax`` / ``pmin``; avg: ``psum`` then ÷ group size)
all_to_all             ``lax.all_to_all(x, A, split_axis=dst_dim, concat_axis=src_dim,
                       tiled=True)``
collective_permute     ``lax.ppermute`` over the two swapped axes
all_slice              local ``dynamic_slice`` at the device's index on ``A``
replicated_to_partial  local: the device at index 0 on the axis keeps the value, the others
                       hold zeros (a sum; avg, max and min keep the value)
=====================  ==================================================================

A device's index on ``A`` is the mixed-radix number of its coordinates, first axis most
significant (JAX's order for a tuple of axis names), which is the tile order of a dim sharded
by ``A``; so the blocks move exactly as :mod:`autoshard.verify.collectives` moves them.
The one substitution: JAX has no max/min reduce-scatter, so a ``reduce_scatter`` of a max or
min runs as one all-to-all of the pieces and a local max/min (:func:`executed_kind` says so).

A Partial value crosses the ``shard_map`` boundary *stacked*: one extra leading dim with one
entry per device of the Partial axes, sharded over them, so ``stacked.sum(0)`` (or max, min,
mean) is the value; :func:`stack_partial` builds one from a full value and :func:`unstack`
reduces it on the host. Nothing here imports autoshard: ``autoshard export --format jax``
copies this module into the script it writes (with :mod:`autoshard.export.hlo_collectives`,
which counts the collectives of each compiled reshard), so the script runs where only JAX is
installed. jax is imported inside the functions.

Sources: ``jax.shard_map`` and the ``jax.lax`` collectives (https://docs.jax.dev/en/latest/
notebooks/shard_map.html); the mixed-radix tile order is Shardy's axis-list order
(https://openxla.org/shardy/sharding_representation).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

REDUCE_OPS = ("sum", "avg", "max", "min")
LOCAL_KINDS = ("all_slice", "replicated_to_partial")


def executed_kind(kind: str, reduce_op: str | None) -> str:
    """The collective a priced step runs as under JAX: itself, except a max/min reduce-scatter
    (JAX's ``psum_scatter`` only sums), which runs as an all-to-all plus a local max/min.

    Example:
        >>> executed_kind("reduce_scatter", "sum"), executed_kind("reduce_scatter", "max")
        ('reduce_scatter', 'all_to_all')
    """
    if kind == "reduce_scatter" and reduce_op in ("max", "min"):
        return "all_to_all"
    return kind


def group_index(axes: tuple[str, ...], sizes: dict[str, int]) -> Any:
    """The device's index on ``axes`` (first axis most significant), inside ``shard_map``."""
    import jax

    index = 0
    for axis in axes:
        index = index * sizes[axis] + jax.lax.axis_index(axis)
    return index


def run_step(x: Any, step: tuple, sizes: dict[str, int]) -> Any:
    """One priced step on the device's local block ``x`` (call inside ``shard_map``).

    ``step`` is ``(kind, axes, src_dim, dst_dim, reduce_op)``; ``sizes`` maps axis → size.
    """
    from jax import lax

    kind, axes, src_dim, dst_dim, reduce_op = step
    names = tuple(axes)
    count = math.prod(sizes[a] for a in names)
    if kind == "all_gather":
        return lax.all_gather(x, names, axis=src_dim, tiled=True)
    if kind == "all_reduce":
        return _all_reduce(x, names, reduce_op, count)
    if kind == "reduce_scatter":
        return _reduce_scatter(x, names, dst_dim, reduce_op, count)
    if kind == "all_to_all":
        return lax.all_to_all(x, names, split_axis=dst_dim, concat_axis=src_dim, tiled=True)
    if kind == "collective_permute":
        first, second = names
        n = sizes[first]
        swap = [(i * n + j, j * n + i) for i in range(n) for j in range(n)]
        return lax.ppermute(x, (first, second), swap)
    if kind == "all_slice":
        piece = x.shape[dst_dim] // count
        start = group_index(names, sizes) * piece
        return lax.dynamic_slice_in_dim(x, start, piece, axis=dst_dim)
    if kind == "replicated_to_partial":
        if reduce_op != "sum":
            return x
        import jax.numpy as jnp

        return jnp.where(lax.axis_index(names[0]) == 0, x, jnp.zeros_like(x))
    raise ValueError(f"unknown reshard step {kind!r}")


def _all_reduce(x: Any, names: tuple[str, ...], reduce_op: str, count: int) -> Any:
    from jax import lax

    if reduce_op == "max":
        return lax.pmax(x, names)
    if reduce_op == "min":
        return lax.pmin(x, names)
    total = lax.psum(x, names)
    return total / count if reduce_op == "avg" else total


def _reduce_scatter(x: Any, names: tuple[str, ...], dim: int, reduce_op: str,
                    count: int) -> Any:
    import jax.numpy as jnp
    from jax import lax

    if reduce_op in ("sum", "avg"):
        total = lax.psum_scatter(x, names, scatter_dimension=dim, tiled=True)
        return total / count if reduce_op == "avg" else total
    shape = x.shape
    pieces = x.reshape((*shape[:dim], count, shape[dim] // count, *shape[dim + 1:]))
    pieces = jnp.moveaxis(pieces, dim, 0)
    pieces = lax.all_to_all(pieces, names, split_axis=0, concat_axis=0, tiled=True)
    return pieces.max(axis=0) if reduce_op == "max" else pieces.min(axis=0)


def stacked_spec(entries: tuple, partial: tuple[tuple[str, str], ...]) -> Any:
    """The PartitionSpec of a tensor with per-dim ``entries`` (None, an axis or a tuple),
    stacked over its Partial ``(axis, op)`` pairs when there are any."""
    from jax.sharding import PartitionSpec

    if not partial:
        return PartitionSpec(*entries)
    axes = tuple(axis for axis, _ in partial)
    return PartitionSpec(axes[0] if len(axes) == 1 else axes, *entries)


def reshard_function(mesh: Any, row: dict) -> Any:
    """A jittable function applying reshard ``row`` (``src``/``dst`` entries, ``src_partial``/
    ``dst_partial`` pairs and ``steps``) to the source array (stacked when Partial)."""
    import jax

    sizes = dict(zip(mesh.axis_names, mesh.devices.shape, strict=True))
    steps = row["steps"]

    def local(x: Any) -> Any:
        x = x[0] if row["src_partial"] else x
        for step in steps:
            x = run_step(x, step, sizes)
        return x[None] if row["dst_partial"] else x

    return jax.shard_map(local, mesh=mesh, in_specs=stacked_spec(row["src"], row["src_partial"]),
                         out_specs=stacked_spec(row["dst"], row["dst_partial"]),
                         check_vma=False)


def stack_partial(full: np.ndarray, partial: tuple[tuple[str, str], ...],
                  sizes: dict[str, int]) -> np.ndarray:
    """A full value as Partial shares stacked on a new leading dim: a sum puts the value in
    entry 0 and zeros elsewhere (exact, like :func:`run_step`'s R→P); avg, max and min repeat
    it. Without Partial axes, the value itself.

    Example:
        >>> stack_partial(np.array([1.0, 2.0]), (("tp", "sum"),), {"tp": 2}).tolist()
        [[1.0, 2.0], [0.0, 0.0]]
    """
    if not partial:
        return full
    count = math.prod(sizes[axis] for axis, _ in partial)
    stacked = np.repeat(full[None], count, axis=0)
    if partial[0][1] == "sum":
        stacked[1:] = 0
    return stacked


def unstack(array: np.ndarray, partial: tuple[tuple[str, str], ...]) -> np.ndarray:
    """The value a (stacked) result stands for, reduced on the host in float64.

    Example:
        >>> unstack(np.array([[1.0, 2.0], [3.0, 4.0]]), (("tp", "sum"),)).tolist()
        [4.0, 6.0]
    """
    array = np.asarray(array)
    if array.dtype.kind == "f" or array.dtype.name == "bfloat16":
        array = array.astype(np.float64)
    if not partial:
        return array
    reduce = {"sum": np.sum, "avg": np.mean, "max": np.max, "min": np.min}[partial[0][1]]
    return reduce(array, axis=0)
