"""A TensorSharding as the objects the frameworks take: PyTorch DTensor placements and a JAX
``PartitionSpec``.

Why in the value layer: a plan's tensor records (:class:`autoshard.planning.record.
TensorRecord`) hand these objects straight to the framework (``NamedSharding(mesh,
record.jax_partition_spec())``, ``distribute_tensor(t, mesh, record.dtensor_placements())``),
and the exporters write the same objects as source text (:mod:`autoshard.export.dtensor`,
:mod:`autoshard.export.jax_spec`). torch and jax are imported only inside the functions that
return their objects.

DTensor shards left to right over mesh dims, so a dim whose axes are ordered against mesh order
is written with ``_StridedShard``, following ``DTensorSpec._convert_shard_order_to_StridedShard``
(torch/distributed/tensor/_dtensor_spec.py, torch 2.13):
``split_factor(m) = prod(size(i) for i earlier in the dim's order and i > m)``. Worked example,
mesh ``(dp=2, tp=2)``, dim 0 sharded tp-major then dp (``P(('tp','dp'))``): dp comes first in
the mesh but is minor, so it gets ``_StridedShard(0, split_factor=2)`` (``|tp|``) and tp gets
``Shard(0)``.

A JAX PartitionSpec names per dim the mesh axes that shard it (one name, or a tuple major →
minor); a pending sum is ``unreduced={...}``, which JAX accepts with Explicit mesh axes only
(https://docs.jax.dev/en/latest/notebooks/explicit-sharding.html).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autoshard.errors import PlacementError


@dataclass(frozen=True, slots=True, kw_only=True)
class DTensorPlacement:
    """One DTensor placement, independent of torch: kind is ``Replicate``, ``Shard``,
    ``_StridedShard`` or ``Partial``."""

    kind: str
    dim: int | None = None
    split_factor: int = 1
    reduce_op: str = "sum"

    def source(self) -> str:
        if self.kind == "Replicate":
            return "Replicate()"
        if self.kind == "Shard":
            return f"Shard({self.dim})"
        if self.kind == "_StridedShard":
            return f"_StridedShard({self.dim}, split_factor={self.split_factor})"
        return f'Partial("{self.reduce_op}")'

    def to_torch(self) -> Any:
        from torch.distributed.tensor import Partial, Replicate, Shard
        from torch.distributed.tensor.placement_types import _StridedShard

        if self.kind == "Replicate":
            return Replicate()
        if self.kind == "Shard":
            return Shard(self.dim)
        if self.kind == "_StridedShard":
            return _StridedShard(self.dim, split_factor=self.split_factor)
        return Partial(self.reduce_op)


def dtensor_placements(ts: Any) -> tuple[DTensorPlacement, ...]:
    """One placement per mesh axis, with shard order encoded as `_StridedShard`."""
    if any(type(p).__name__ == "StridedShard" for p in ts.placements):
        return tuple(_verbatim(p) for p in ts.placements)
    names = tuple(ts.mesh.axis_names)
    sizes = dict(zip(names, ts.mesh.axis_sizes, strict=True))
    dim_of = {axis: dim for dim, axes in enumerate(ts.dim_axes) for axis in axes}
    out = []
    for index, (name, placement) in enumerate(zip(names, ts.placements, strict=True)):
        if name not in dim_of:
            out.append(_verbatim(placement))
            continue
        dim = dim_of[name]
        order = list(ts.dim_axes[dim])
        earlier = order[: order.index(name)]
        split = math.prod(sizes[a] for a in earlier if names.index(a) > index)
        kind = "_StridedShard" if split > 1 else "Shard"
        out.append(DTensorPlacement(kind=kind, dim=dim, split_factor=split))
    return tuple(out)


def _verbatim(placement: Any) -> DTensorPlacement:
    kind = type(placement).__name__
    if kind == "Replicate":
        return DTensorPlacement(kind="Replicate")
    if kind == "Shard":
        return DTensorPlacement(kind="Shard", dim=int(placement.dim))
    if kind == "StridedShard":
        split = int(placement.split_factor)
        return DTensorPlacement(kind="_StridedShard", dim=int(placement.dim), split_factor=split)
    if kind == "Partial":
        op = placement.reduce_op
        return DTensorPlacement(kind="Partial", reduce_op=str(getattr(op, "value", op)))
    raise TypeError(f"unknown placement {placement!r}")


def jax_partition_spec(ts: Any) -> Any:
    """The ``jax.sharding.PartitionSpec`` (needs jax): one entry per dim, Partial sum axes as
    ``unreduced``.

    Raises:
        PlacementError: a strided view layout (no per-dim axis order), or a pending reduction
            other than a sum (JAX's unreduced axes are sums only).
    """
    from jax.sharding import PartitionSpec

    entries = tuple(None if not axes else axes[0] if len(axes) == 1 else axes
                    for axes in ts.dim_axes)
    other = [(axis, op) for axis, op in ts.partial_axes if op != "sum"]
    if other:
        raise PlacementError(f"{ts.short()} is Partial({other[0][1]}) on mesh axis "
                             f'"{other[0][0]}"; a JAX PartitionSpec holds a pending sum only')
    unreduced = frozenset(axis for axis, _ in ts.partial_axes)
    if unreduced:
        return PartitionSpec(*entries, unreduced=unreduced)
    return PartitionSpec(*entries)
