"""Export a tensor sharding as an XLA HloSharding string, V2 (iota) or V1 (device list).

This is XLA's own Shardy → HloSharding exporter (``convertToHloSharding``) re-done in Python
on our `ShardingLayout`, which for whole axes is also what JAX's
``named_sharding_to_xla_hlo_sharding`` computes:

1. Split every mesh axis into pieces at each sub-axis boundary the sharding uses; the pieces in
   mesh order are the iota ``reshape_dims``.
2. Tile dim d is the product of the pieces that shard d; the perm lists those pieces, dims
   first, then the pending-sum (``unreduced``) pieces as one trailing tile dim, then every
   unused piece (mesh order) as one trailing replicated tile dim.
3. XLA normalizes (``hlo_value.HloShardingValue.normalized``) and prints.

Worked example, mesh ``x=2, y=4``, dim 0 sharded by y, dim 1 unsharded: pieces ``[x:2, y:4]``,
tile dims ``[4, 1, 2]``, perm ``(1, 0)`` → ``{devices=[4,1,2]<=[2,4]T(1,0)
last_tile_dim_replicate}``, whose V1 device list is ``0,4,1,5,2,6,3,7``.

Size-1 axes are dropped first, as JAX does. A mesh with a custom device order only has a V1
form here: its device ids replace the iota positions (Shardy ``device_ids``).
"""

from __future__ import annotations

import itertools
import logging
import math
from typing import Any

from autoshard.export.errors import NotExpressibleError
from autoshard.export.hlo_value import (
    HloKind,
    HloShardingValue,
    SubgroupType,
    TileAssignment,
    make_iota,
)
from autoshard.export.layout import AxisRef, ShardingLayout, layout_of

logger = logging.getLogger(__name__)


def to_hlo_sharding(ts: Any, version: int = 2, tensor_name: str = "") -> str:
    """The HloSharding string XLA prints for this `TensorSharding`.

    Args:
        ts: the tensor sharding.
        version: 2 for the iota form, 1 for the explicit device list.
        tensor_name: named in error messages.

    Raises:
        NotExpressibleError: custom device order with ``version=2``; a strided view layout;
            a Partial whose reduce op is not sum (HloSharding's unreduced is a pending sum).

    Example:
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.placements import Replicate, Shard
        >>> from autoshard.sharding.tensor_sharding import TensorSharding
        >>> mesh = Mesh(axes=(("x", 2), ("y", 4)))
        >>> ts = TensorSharding(mesh, (Replicate(), Shard(0)), 2)
        >>> to_hlo_sharding(ts)
        '{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}'
        >>> to_hlo_sharding(ts, version=1)
        '{devices=[4,1,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}'
    """
    return layout_to_hlo_sharding(layout_of(ts, tensor_name), version)


def layout_to_hlo_sharding(layout: ShardingLayout, version: int = 2) -> str:
    """`to_hlo_sharding` on an already normalized layout (also used for parsed Shardy)."""
    return hlo_value_of(layout, version).to_string()


def hlo_value_of(layout: ShardingLayout, version: int = 2) -> HloShardingValue:
    """The normalized HloSharding value of a layout; see the module docstring."""
    if version not in (1, 2):
        raise ValueError(f"HloSharding version must be 1 or 2, not {version!r}")
    _check_reduce_op(layout)
    dims = tuple(tuple(r for r in refs if r.size > 1) for refs in layout.dims)
    unreduced = tuple(r for r in layout.unreduced if r.size > 1)
    if not unreduced and not any(dims):
        return HloShardingValue(kind=HloKind.REPLICATED)
    _check_device_order(layout, version)
    pieces = _pieces(layout, [r for refs in dims for r in refs] + list(unreduced))
    index = {(name, pre): i for i, (name, pre, _) in enumerate(pieces)}
    tile_dims: list[int] = []
    perm: list[int] = []
    for refs in dims:
        perm.extend(index[(r.name, r.pre)] for r in refs)
        tile_dims.append(math.prod(r.size for r in refs))
    types: list[SubgroupType] = []
    if unreduced:
        perm.extend(index[(r.name, r.pre)] for r in unreduced)
        tile_dims.append(math.prod(r.size for r in unreduced))
        types.append(SubgroupType.UNREDUCED)
    rest = [i for i in range(len(pieces)) if i not in set(perm)]
    perm.extend(rest)
    if math.prod(pieces[i][2] for i in rest) > 1:
        tile_dims.append(math.prod(pieces[i][2] for i in rest))
        types.append(SubgroupType.REPLICATED)
    tile = make_iota(tuple(tile_dims), tuple(size for _, _, size in pieces), tuple(perm))
    value = HloShardingValue(kind=HloKind.TILED, tile=tile, subgroup_types=tuple(types))
    if layout.device_ids is not None:
        value = _with_device_ids(value, layout.device_ids)
    value = value.normalized()
    return value.explicit() if version == 1 else value


def _check_device_order(layout: ShardingLayout, version: int) -> None:
    if version == 2 and layout.device_ids is not None:
        message = (
            f'tensor "{layout.tensor_name}": the mesh has a custom device order '
            f"{list(layout.device_ids)}, which HloSharding V2 (iota) cannot express; "
            "use version=1 (--format hlo-v1)"
        )
        raise NotExpressibleError(message, format="hlo", tensor=layout.tensor_name)


def _check_reduce_op(layout: ShardingLayout) -> None:
    if layout.unreduced and layout.reduce_op != "sum":
        axis = layout.unreduced[0].name
        message = (
            f'tensor "{layout.tensor_name}" is Partial({layout.reduce_op}) on mesh axis "{axis}"; '
            "HloSharding's last_tile_dims={unreduced} only means a pending sum; reduce it "
            "(all-reduce) before export"
        )
        raise NotExpressibleError(message, format="hlo", tensor=layout.tensor_name, axis=axis)


def _pieces(layout: ShardingLayout, used: list[AxisRef]) -> list[tuple[str, int, int]]:
    """Mesh axes in mesh order, split at every boundary a used (sub-)axis needs."""
    pieces: list[tuple[str, int, int]] = []
    for name, size in zip(layout.axis_names, layout.axis_sizes, strict=True):
        cuts = {1, size}
        for ref in used:
            if ref.name == name:
                cuts |= {ref.pre, ref.pre * ref.size}
        bounds = sorted(cuts)
        if any(b % a for a, b in itertools.pairwise(bounds)) or bounds[-1] != size:
            message = f'sub-axes of mesh axis "{name}" (size {size}) are inconsistent: {bounds}'
            raise NotExpressibleError(message, format="hlo", tensor=layout.tensor_name, axis=name)
        pieces.extend((name, a, b // a) for a, b in itertools.pairwise(bounds))
        if size == 1:
            pieces.append((name, 1, 1))
    index = {(name, pre): size for name, pre, size in pieces}
    for ref in used:
        if index.get((ref.name, ref.pre)) != ref.size:
            message = f'sub-axis "{ref.name}":({ref.pre}){ref.size} overlaps another use'
            raise NotExpressibleError(
                message, format="hlo", tensor=layout.tensor_name, axis=ref.name
            )
    return pieces


def _with_device_ids(value: HloShardingValue, device_ids: tuple[int, ...]) -> HloShardingValue:
    """Map iota positions to the mesh's device ids (Shardy ``device_ids``, JAX logical ids)."""
    if value.tile is None:
        return value
    positions = value.tile.array()
    devices = tuple(device_ids[int(p)] for p in positions.flat)
    return HloShardingValue(
        kind=value.kind,
        tile=TileAssignment(dims=value.tile.dims, devices=devices),
        subgroup_types=value.subgroup_types,
    )
