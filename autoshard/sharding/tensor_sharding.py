"""TensorSharding: how one tensor lies on a mesh, convertible to every ecosystem's spelling.

DTensor spells a sharding per mesh axis (placements); JAX, Shardy and XLA spell it per tensor
dim (which axes shard each dim, major to minor). The two agree except for the *order* of axes
on a dim that several shard: placements alone say "mesh order". ``shard_order`` carries the
other orders, as DTensor's ``DTensorSpec.shard_order`` does, and ``StridedShard`` placements
that encode an order (DTensor's ``_convert_shard_order_to_StridedShard``) are decoded into it.
``dim_axes`` is the per-dim view every consumer (reshard search, exporters) works from.

A ``StridedShard`` that comes from a view (its split factor is a tensor size, not a product of
mesh sizes) is a real strided layout: no axis order describes it, ``dim_axes`` refuses it, and
only :mod:`autoshard.sharding.layout` (the NumPy emulation) and the exporters' simulation handle it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.errors import NotDivisibleError, PlacementError
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import (
    Partial,
    Placement,
    Replicate,
    Shard,
    StridedShard,
    shard_dim,
)

ShardOrder = tuple[tuple[int, tuple[int, ...]], ...]
"""``((tensor_dim, (mesh_axis_index, ...)), ...)``: axes major→minor on that dim."""

PartitionSpec = tuple[str | tuple[str, ...] | None, ...]


@dataclass(frozen=True)
class TensorSharding:
    """Mesh + one placement per mesh axis + the order of axes on dims several axes shard.

    ``shard_order`` is None when every such dim is sharded in mesh order; otherwise it lists
    ``(dim, axis indices major→minor)`` for the dims it covers (sorted by dim).

    Example:
        >>> mesh = Mesh(axes=(("dp", 2), ("tp", 4)))
        >>> ts = TensorSharding.from_partition_spec(mesh, (("tp", "dp"), None), 2)
        >>> ts.placements, ts.dim_axes
        ((Shard(dim=0), Shard(dim=0)), (('tp', 'dp'), ()))
        >>> ts.to_partition_spec(), ts.local_shape((16, 3))
        ((('tp', 'dp'), None), (2, 3))
    """

    mesh: Mesh
    placements: tuple[Placement, ...]
    ndim: int
    shard_order: ShardOrder | None = None

    def __post_init__(self) -> None:
        placements = tuple(self.placements)
        object.__setattr__(self, "placements", placements)
        if len(placements) != self.mesh.ndim:
            raise PlacementError(f"{len(placements)} placements for mesh {self.mesh} with "
                                 f"{self.mesh.ndim} axes; give one placement per axis")
        for axis, p in zip(self.mesh.axis_names, placements, strict=True):
            if not isinstance(p, Replicate | Shard | StridedShard | Partial):
                raise PlacementError(f'mesh axis "{axis}": {p!r} is not a placement')
            dim = shard_dim(p)
            if dim is not None and not 0 <= dim < self.ndim:
                raise PlacementError(f'mesh axis "{axis}" shards dim {dim} of a tensor with '
                                     f"{self.ndim} dims")
        if self.shard_order is not None:
            order = tuple(sorted((int(d), tuple(int(a) for a in axes))
                                 for d, axes in self.shard_order if axes))
            self._check_order(order)
            default = all(list(axes) == sorted(axes) for _, axes in order)
            object.__setattr__(self, "shard_order", None if default else order)

    def __hash__(self) -> int:
        # shardings key the reshard and strategy caches (hundreds of thousands of lookups in
        # a 3-axis plan): the hash is computed once; never pickled (it hashes the mesh's axis
        # names, and string hashes are salted per process), see __getstate__
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.mesh, self.placements, self.ndim, self.shard_order))
            self.__dict__["_hash"] = cached
        return cached

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    def _check_order(self, order: ShardOrder) -> None:
        for dim, axes in order:
            on_dim = tuple(i for i, p in enumerate(self.placements) if shard_dim(p) == dim)
            if sorted(axes) != list(on_dim) or any(
                    isinstance(self.placements[i], StridedShard) for i in on_dim):
                raise PlacementError(f"shard_order {dim}:{axes} does not match the Shard "
                                     f"placements {self.short()} on dim {dim}")

    # -- constructors ---------------------------------------------------------------------
    @staticmethod
    def replicated(mesh: Mesh, ndim: int) -> TensorSharding:
        return TensorSharding(mesh, tuple(Replicate() for _ in mesh.axis_names), ndim)

    @staticmethod
    def from_dim_axes(mesh: Mesh, dim_axes: Sequence[Sequence[str]],
                      partial: Sequence[tuple[str, str]] = ()) -> TensorSharding:
        """Per-dim axis names major→minor (+ Partial axes) → TensorSharding."""
        placements: list[Placement] = [Replicate() for _ in mesh.axis_names]
        order: list[tuple[int, tuple[int, ...]]] = []
        for dim, axes in enumerate(dim_axes):
            indices = tuple(mesh.axis_index(a) for a in axes)
            for i in indices:
                if not isinstance(placements[i], Replicate):
                    raise PlacementError(f'mesh axis "{mesh.axis_names[i]}" is used twice')
                placements[i] = Shard(dim)
            if indices:
                order.append((dim, indices))
        for axis, op in partial:
            i = mesh.axis_index(axis)
            if not isinstance(placements[i], Replicate):
                raise PlacementError(f'mesh axis "{axis}" is used twice')
            placements[i] = Partial(op)
        return TensorSharding(mesh, tuple(placements), len(dim_axes), tuple(order))

    @staticmethod
    def from_partition_spec(mesh: Mesh, spec: Sequence[Any], ndim: int) -> TensorSharding:
        """A JAX PartitionSpec (``('y', None)``, ``(('x', 'y'), None)``) → TensorSharding;
        missing trailing entries are None, as in JAX."""
        if len(spec) > ndim:
            raise PlacementError(f"PartitionSpec {tuple(spec)} has {len(spec)} entries for a "
                                 f"tensor with {ndim} dims")
        dims = [_spec_entry(entry) for entry in spec]
        dims.extend(() for _ in range(ndim - len(dims)))
        return TensorSharding.from_dim_axes(mesh, dims)

    # -- views ------------------------------------------------------------------------------
    @property
    def dim_axes(self) -> tuple[tuple[str, ...], ...]:
        """For each tensor dim, the mesh axes sharding it, major → minor."""
        names = self.mesh.axis_names
        return tuple(tuple(names[i] for i in axes) for axes in self._dim_indices())

    def _dim_indices(self) -> tuple[tuple[int, ...], ...]:
        explicit = dict(self.shard_order or ())
        out = []
        for dim in range(self.ndim):
            on_dim = tuple(i for i, p in enumerate(self.placements) if shard_dim(p) == dim)
            if dim in explicit:
                out.append(explicit[dim])
            elif any(isinstance(self.placements[i], StridedShard) for i in on_dim):
                out.append(self._decode_strided(dim, on_dim))
            else:
                out.append(on_dim)
        return tuple(out)

    def _decode_strided(self, dim: int, on_dim: tuple[int, ...]) -> tuple[int, ...]:
        """DTensor's ``_maybe_convert_StridedShard_to_shard_order`` for one dim: walk the mesh
        axes right to left, inserting each where the size of the axes after it equals its
        split factor."""
        sizes = self.mesh.axis_sizes
        order: list[int] = []
        for i in reversed(on_dim):
            p = self.placements[i]
            split = p.split_factor if isinstance(p, StridedShard) else 1
            acc, pos = 1, len(order)
            for pos in range(len(order) + 1):
                if acc == split:
                    break
                if pos < len(order):
                    acc *= sizes[order[pos]]
            if acc != split:
                raise PlacementError(
                    f"{self.short()}: _StridedShard on mesh axis "
                    f'"{self.mesh.axis_names[i]}" has split_factor {split}, which is no '
                    f"product of the mesh axes sharding dim {dim} (a view's strided layout); it "
                    "has no per-dim axis order")
            order.insert(pos, i)
        return tuple(order)

    @property
    def is_view_strided(self) -> bool:
        """True for a StridedShard layout that no axis order describes (from a view)."""
        try:
            self._dim_indices()
        except PlacementError:
            return True
        return False

    @property
    def partial_axes(self) -> tuple[tuple[str, str], ...]:
        """``(axis name, reduce op)`` of every Partial axis, in mesh order."""
        return tuple((name, p.reduce_op) for name, p in
                     zip(self.mesh.axis_names, self.placements, strict=True)
                     if isinstance(p, Partial))

    @property
    def is_replicated(self) -> bool:
        return all(isinstance(p, Replicate) for p in self.placements)

    def shards_per_dim(self) -> tuple[int, ...]:
        cached = self.__dict__.get("_shards")  # once per sharding: local shapes ask per op
        if cached is None:
            sizes = self.mesh.axis_sizes
            counts = [1] * self.ndim
            for i, p in enumerate(self.placements):
                dim = shard_dim(p)
                if dim is not None:
                    counts[dim] *= sizes[i]
            cached = self.__dict__["_shards"] = tuple(counts)
        return cached

    def local_shape(self, global_shape: Sequence[int], *, even: bool = True) -> tuple[int, ...]:
        """Shape of one device's shard: exact when even; the largest (ceil) shard otherwise.

        With ``even=True`` a dim that does not divide raises NotDivisibleError naming it.
        """
        out = []
        for dim, (size, n) in enumerate(zip(global_shape, self.shards_per_dim(), strict=True)):
            if size % n:
                if even:
                    raise NotDivisibleError(f"dim {dim} of size {size} does not divide into {n} "
                                            f"shards under {self.short()}", dim=dim, size=size,
                                            shards=n)
                out.append(-(-size // n))
            else:
                out.append(size // n)
        return tuple(out)

    def is_divisible(self, global_shape: Sequence[int]) -> bool:
        return all(size % n == 0 for size, n in
                   zip(global_shape, self.shards_per_dim(), strict=True))

    def to_partition_spec(self) -> PartitionSpec:
        """Per dim None, one axis name, or a tuple of names major→minor. Partial axes and view
        layouts have no PartitionSpec: PlacementError."""
        if self.partial_axes:
            raise PlacementError(f"{self.short()} is Partial; a PartitionSpec cannot say so")
        return tuple(None if not axes else axes[0] if len(axes) == 1 else axes
                     for axes in self.dim_axes)

    def short(self) -> str:
        """``[S(0), R]`` plus the non-default order, e.g. ``[S(0), S(0)] 0:(tp,dp)``."""
        text = "[" + ", ".join(str(p) for p in self.placements) + "]"
        if self.shard_order:
            names = self.mesh.axis_names
            text += " " + " ".join(f"{d}:({','.join(names[a] for a in axes)})"
                                   for d, axes in self.shard_order)
        return text

    def __repr__(self) -> str:
        order = "" if self.shard_order is None else f", {self.shard_order!r}"
        return (f"TensorSharding(Mesh(axes={self.mesh.axes!r}), {self.placements!r}, "
                f"{self.ndim}{order})")


def _spec_entry(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(str(a) for a in entry)


def total_shards(sharding: TensorSharding) -> int:
    return math.prod(sharding.shards_per_dim())
