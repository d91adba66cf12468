"""XLA HloSharding values: tile assignments (V1 explicit, V2 iota), XLA's normalization and
printing, and a parser.

The exporter and the parser share this so that "what we print" and "what XLA would print for
the same value" are one code path: `HloShardingValue.normalized()` applies
``HloSharding::Subgroup``/``PartialTile`` normalization and ``CanonicalizeIotaDims``, and
`to_string` prints like ``HloSharding::ToString``.

V2 worked example: ``[4,2]<=[2,4]T(1,0)`` is
``arange(8).reshape(2, 4).transpose(1, 0).reshape(4, 2)`` = ``[[0,4],[1,5],[2,6],[3,7]]``;
its V1 form is ``{devices=[4,2]0,4,1,5,2,6,3,7}``. ``[3,4,5]T(1,2,0)`` canonicalizes to
``[3,20]T(1,0)`` because the transposed dims 4 and 5 stay adjacent and in order.
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
import re
from dataclasses import dataclass, replace

import numpy as np

logger = logging.getLogger(__name__)


@enum.unique
class SubgroupType(enum.Enum):
    """Trailing tile dims that are not data tiling.

    MANUAL: devices in the group run manual (shard_map) code.
    UNREDUCED: devices in the group hold addends of a pending sum (DTensor ``Partial``).
    REPLICATED: devices in the group hold the same data.
    """

    MANUAL = "manual"
    UNREDUCED = "unreduced"
    REPLICATED = "replicated"

    def __repr__(self) -> str:
        return f"SubgroupType.{self.name}"


_TYPE_ORDER = {SubgroupType.MANUAL: 0, SubgroupType.UNREDUCED: 1, SubgroupType.REPLICATED: 2}


@enum.unique
class HloKind(enum.Enum):
    """The shapes an HloSharding can take: ``{replicated}``, ``{manual}``, ``{unreduced}``,
    ``{maximal device=N}``, or a tiled ``{devices=...}``."""

    REPLICATED = "replicated"
    MANUAL = "manual"
    UNREDUCED = "unreduced"
    MAXIMAL = "maximal"
    TILED = "tiled"

    def __repr__(self) -> str:
        return f"HloKind.{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TileAssignment:
    """The device array: explicit (``devices``) or iota (``reshape_dims`` + ``perm``)."""

    dims: tuple[int, ...]
    reshape_dims: tuple[int, ...] | None = None
    perm: tuple[int, ...] | None = None
    devices: tuple[int, ...] | None = None

    @property
    def is_iota(self) -> bool:
        return self.devices is None

    def array(self) -> np.ndarray:
        if self.devices is not None:
            return np.asarray(self.devices, dtype=np.int64).reshape(self.dims)
        if self.reshape_dims is None or self.perm is None:
            raise AssertionError("an iota tile assignment needs reshape_dims and perm")
        iota = np.arange(math.prod(self.reshape_dims), dtype=np.int64)
        return iota.reshape(self.reshape_dims).transpose(self.perm).reshape(self.dims)

    def explicit(self) -> TileAssignment:
        return TileAssignment(dims=self.dims, devices=tuple(int(d) for d in self.array().flat))


@dataclass(frozen=True, slots=True, kw_only=True)
class HloShardingValue:
    """One (non-tuple) HloSharding. ``tile`` is set only for TILED, ``device`` for MAXIMAL."""

    kind: HloKind
    tile: TileAssignment | None = None
    subgroup_types: tuple[SubgroupType, ...] = ()
    device: int | None = None

    def normalized(self) -> HloShardingValue:
        """XLA's canonical form of this value (what XLA would print after parsing it)."""
        if self.kind is not HloKind.TILED or self.tile is None:
            return self
        return _normalize_tiled(self.tile, self.subgroup_types)

    def explicit(self) -> HloShardingValue:
        """The V1 (explicit device list) form of the same value."""
        if self.tile is None:
            return self
        value = replace(self, tile=self.tile.explicit())
        return value.normalized()

    def to_string(self) -> str:
        if self.kind is HloKind.MAXIMAL:
            return f"{{maximal device={self.device}}}"
        if self.kind is not HloKind.TILED or self.tile is None:
            return f"{{{self.kind.value}}}"
        tile = self.tile
        text = "{devices=[" + ",".join(map(str, tile.dims)) + "]"
        if tile.devices is not None:
            text += ",".join(map(str, tile.devices))
        else:
            text += _iota_suffix(tile)
        if self.subgroup_types == (SubgroupType.REPLICATED,):
            text += " last_tile_dim_replicate"
        elif self.subgroup_types:
            text += " last_tile_dims={" + ", ".join(t.value for t in self.subgroup_types) + "}"
        return text + "}"

    def __str__(self) -> str:
        return self.to_string()


def _iota_suffix(tile: TileAssignment) -> str:
    reshape, perm = tile.reshape_dims or (), tile.perm or ()
    text = "<=[" + ",".join(map(str, reshape)) + "]"
    if list(perm) != list(range(len(perm))):
        text += "T(" + ",".join(map(str, perm)) + ")"
    return text


def canonical_iota(
    reshape_dims: tuple[int, ...], perm: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """XLA's ``CanonicalizeIotaDims``: drop size-1 reshape dims, merge runs kept in order.

    >>> canonical_iota((3, 4, 5), (1, 2, 0))
    ((3, 20), (1, 0))
    >>> canonical_iota((1, 3, 1, 4, 1, 5), (4, 3, 2, 5, 1, 0))
    ((3, 20), (1, 0))
    """
    dims, order = list(reshape_dims), list(perm)
    keep = [i for i, size in enumerate(dims) if size != 1] or [0]
    renumber = {old: new for new, old in enumerate(keep)}
    dims = [dims[i] for i in keep]
    order = [renumber[p] for p in order if p in renumber]
    merged = True
    while merged:
        merged = False
        for i in range(len(order) - 1):
            major = order[i]
            if order[i + 1] == major + 1:
                dims[major : major + 2] = [dims[major] * dims[major + 1]]
                del order[i + 1]
                order = [p - 1 if p > major else p for p in order]
                merged = True
                break
    return tuple(dims), tuple(order)


def make_iota(
    dims: tuple[int, ...], reshape_dims: tuple[int, ...], perm: tuple[int, ...]
) -> TileAssignment:
    """An iota tile assignment with canonical reshape dims and perm."""
    if math.prod(dims) != math.prod(reshape_dims) or sorted(perm) != list(range(len(perm))):
        message = f"iota tile [{dims}]<=[{reshape_dims}]T({perm}) is inconsistent"
        raise ValueError(message)
    reshape, order = canonical_iota(tuple(reshape_dims), tuple(perm))
    return TileAssignment(dims=tuple(dims), reshape_dims=reshape, perm=order)


def _normalize_tiled(tile: TileAssignment, types: tuple[SubgroupType, ...]) -> HloShardingValue:
    rank = len(tile.dims) - len(types)
    keep = [i for i, t in enumerate(types) if tile.dims[rank + i] != 1]
    tile = _with_dims(tile, tile.dims[:rank] + tuple(tile.dims[rank + i] for i in keep))
    types = tuple(types[i] for i in keep)
    order = sorted(range(len(types)), key=lambda i: _TYPE_ORDER[types[i]])
    if order != list(range(len(types))):
        tile = _transpose(tile, tuple(range(rank)) + tuple(rank + i for i in order))
        types = tuple(types[i] for i in order)
    tile, types = _merge_same_types(tile, types, rank)
    if math.prod(tile.dims[:rank]) == 1 and len(types) == 1:
        return HloShardingValue(kind=HloKind(types[0].value))
    if types and types[-1] is SubgroupType.REPLICATED:
        tile = _sort_replica_groups(tile)
    if tile.is_iota and tile.reshape_dims is not None and tile.perm is not None:
        tile = make_iota(tile.dims, tile.reshape_dims, tile.perm)
    return HloShardingValue(kind=HloKind.TILED, tile=tile, subgroup_types=types)


def _with_dims(tile: TileAssignment, dims: tuple[int, ...]) -> TileAssignment:
    return replace(tile, dims=dims)


def _merge_same_types(
    tile: TileAssignment, types: tuple[SubgroupType, ...], rank: int
) -> tuple[TileAssignment, tuple[SubgroupType, ...]]:
    dims, merged = list(tile.dims[:rank]), []
    for i, kind in enumerate(types):
        size = tile.dims[rank + i]
        if merged and merged[-1] is kind:
            dims[-1] *= size
        else:
            dims.append(size)
            merged.append(kind)
    return _with_dims(tile, tuple(dims)), tuple(merged)


def _sort_replica_groups(tile: TileAssignment) -> TileAssignment:
    array = tile.array()
    ordered = np.sort(array, axis=-1)
    if tile.is_iota and np.array_equal(array, ordered):
        return tile
    return TileAssignment(dims=tile.dims, devices=tuple(int(d) for d in ordered.flat))


def _transpose(tile: TileAssignment, order: tuple[int, ...]) -> TileAssignment:
    """Transpose the tile dims, staying in iota form when the dims refine each other."""
    dims = tuple(tile.dims[i] for i in order)
    if not tile.is_iota or tile.reshape_dims is None or tile.perm is None:
        devices = tile.array().transpose(order)
        return TileAssignment(dims=dims, devices=tuple(int(d) for d in devices.flat))
    refined = _refine_iota(tile)
    if refined is None:
        return _transpose(tile.explicit(), order)
    pieces, groups = refined
    new_perm = tuple(p for i in order for p in groups[i])
    return make_iota(dims, pieces, new_perm)


def _refine_iota(
    tile: TileAssignment,
) -> tuple[tuple[int, ...], list[list[int]]] | None:
    """Split the reshape dims so every tile dim is a run of whole transposed pieces.

    Returns (piece sizes in reshape order, per tile dim the piece indices it covers) or None
    when the tile dims and the transposed reshape dims have no common refinement.
    """
    reshape, perm = tile.reshape_dims or (), tile.perm or ()
    transposed = [reshape[p] for p in perm]
    cuts = sorted(set(_prefix_products(transposed)) | set(_prefix_products(tile.dims)))
    if any(b % a for a, b in itertools.pairwise(cuts)):
        return None
    factors = [b // a for a, b in itertools.pairwise(cuts)]
    owner = _runs(transposed, factors)  # transposed dim of each factor
    by_reshape = sorted(range(len(factors)), key=lambda f: (perm[owner[f]], f))
    position = {factor: index for index, factor in enumerate(by_reshape)}
    pieces = tuple(factors[f] for f in by_reshape)
    tile_owner = _runs(list(tile.dims), factors)
    groups: list[list[int]] = [[] for _ in tile.dims]
    for factor, dim in enumerate(tile_owner):
        groups[dim].append(position[factor])
    return pieces, groups


def _prefix_products(sizes: list[int] | tuple[int, ...]) -> list[int]:
    out, running = [1], 1
    for size in sizes:
        running *= size
        out.append(running)
    return out


def _runs(sizes: list[int] | tuple[int, ...], factors: list[int]) -> list[int]:
    """For each factor, the index of the size (dim) whose run contains it."""
    owner, dim, filled = [], 0, 1
    for factor in factors:
        while dim < len(sizes) and filled == sizes[dim]:
            dim, filled = dim + 1, 1
        owner.append(dim)
        filled *= factor
    return owner


_SIMPLE = {"replicated", "manual", "unreduced"}
_TILED = re.compile(
    r"^devices=\[(?P<dims>[\d,]+)\]\s*(?P<assign>(?:<=\[[\d,]+\](?:T\([\d,]+\))?)|[\d,\s]+?)"
    r"(?:\s+(?P<rep>last_tile_dim_replicate)|\s+last_tile_dims=\{(?P<types>[a-z_,\s]+)\})?$"
)
_IOTA = re.compile(r"^<=\[(?P<reshape>[\d,]+)\](?:T\((?P<perm>[\d,]+)\))?$")


def parse_hlo_sharding(text: str) -> HloShardingValue:
    """Parse an HloSharding string as XLA prints it (V1 or V2; metadata is ignored).

    >>> parse_hlo_sharding("{devices=[2,2]<=[2,2]T(1,0)}").explicit().to_string()
    '{devices=[2,2]0,2,1,3}'
    """
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        raise ValueError(f"HloSharding {text!r} must be enclosed in braces")
    body = re.sub(r"\s+metadata=\{.*\}$", "", body[1:-1].strip())
    if body in _SIMPLE:
        return HloShardingValue(kind=HloKind(body))
    maximal = re.fullmatch(r"maximal device=(\d+)", body)
    if maximal:
        return HloShardingValue(kind=HloKind.MAXIMAL, device=int(maximal.group(1)))
    match = _TILED.match(body)
    if match is None:
        raise ValueError(f"cannot parse HloSharding {text!r}")
    dims = _ints(match.group("dims"))
    tile = _parse_assignment(match.group("assign").strip(), dims, text)
    if match.group("rep"):
        types: tuple[SubgroupType, ...] = (SubgroupType.REPLICATED,)
    elif match.group("types"):
        types = tuple(SubgroupType(t.strip()) for t in match.group("types").split(","))
    else:
        types = ()
    return HloShardingValue(kind=HloKind.TILED, tile=tile, subgroup_types=types)


def _parse_assignment(assign: str, dims: tuple[int, ...], text: str) -> TileAssignment:
    iota = _IOTA.match(assign)
    if iota is None:
        devices = _ints(assign)
        if len(devices) != math.prod(dims):
            raise ValueError(f"HloSharding {text!r} lists {len(devices)} devices for {dims}")
        return TileAssignment(dims=dims, devices=devices)
    reshape = _ints(iota.group("reshape"))
    perm = _ints(iota.group("perm")) if iota.group("perm") else tuple(range(len(reshape)))
    return TileAssignment(dims=dims, reshape_dims=reshape, perm=perm)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.split(r"[,\s]+", text.strip()) if part)


def hlo_shardings_equal(first: str, second: str) -> bool:
    """Semantic equality, as ``HloSharding::operator==``: same kind, tile dims, subgroup types
    and device array after normalization (V1 and V2 spellings compare equal)."""
    a = parse_hlo_sharding(first).explicit()
    b = parse_hlo_sharding(second).explicit()
    return a == b
