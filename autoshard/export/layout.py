"""The one normal form every exporter starts from: per tensor dim, the mesh (sub-)axes that
shard it, major to minor.

DTensor placements are one per mesh axis and apply left to right; Shardy, HloSharding and
PartitionSpec are one entry per tensor dim. `layout_of` converts the first into the second once,
so the exporters never reason about placements. Plain `Shard`s read their order from
`TensorSharding.dim_axes` (which honours `shard_order`). When a `StridedShard` is present the
dim is *simulated*: the dim is a mixed-radix number whose digits are either local (untagged) or
owned by a mesh (sub-)axis, and each placement carves its digits out of the local ones.

Worked example (mesh ``a=4, b=4``, placements ``(_S(0,2), S(0))``, rows ``0..L-1``)::

    start             [ L ]                         all local
    a: _S(0, 2)       [ 2 | a:4 | L/8 ]             skip a block of 2, then 4 digits for a
    b: S(0)           [ b:(1)2 | a:4 | b:(2)2 | L/16 ]   b takes the top 4 of the local
                                                    digits (2 · L/8), split around a

so the dim is Shardy ``{"b":(1)2, "a", "b":(2)2}``. A local digit above an owned one (a view's
strided layout, e.g. ``_S(0, 2)`` alone) is not a contiguous tile in any format and is refused.
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass
from typing import Any

from autoshard.export.errors import NotExpressibleError

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AxisRef:
    """A mesh axis, or Shardy's sub-axis ``"name":(pre)size`` (pre = product of more-major
    pieces of that axis). A whole axis is ``AxisRef(name, 1, axis_size)``."""

    name: str
    pre: int
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardingLayout:
    """Per-dim axis lists plus the pending reduction, on a mesh given by names and sizes.

    ``device_ids`` is ``None`` for the row-major iota order. ``unreduced`` are the axes (whole, in
    mesh order, when they come from a `TensorSharding`) holding a pending reduction, and
    ``reduce_op`` is its DTensor reduce op (``None`` when nothing is pending).
    """

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]
    device_ids: tuple[int, ...] | None
    dims: tuple[tuple[AxisRef, ...], ...]
    unreduced: tuple[AxisRef, ...] = ()
    reduce_op: str | None = None
    tensor_name: str = ""

    def axis_size(self, name: str) -> int:
        return self.axis_sizes[self.axis_names.index(name)]

    def is_whole(self, ref: AxisRef) -> bool:
        return ref.pre == 1 and ref.size == self.axis_size(ref.name)

    @property
    def num_devices(self) -> int:
        return math.prod(self.axis_sizes)


@dataclass(frozen=True, slots=True)
class _Digit:
    size: int
    ref: AxisRef | None = None


class _Uneven(Exception):
    """Internal: a placement's block boundary falls inside a digit."""


def layout_of(ts: Any, tensor_name: str = "") -> ShardingLayout:
    """Normalize a `TensorSharding` into per-dim (sub-)axis lists.

    Raises:
        NotExpressibleError: a `StridedShard` whose layout is not a contiguous tile.

    Example:
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.placements import Shard, StridedShard
        >>> from autoshard.sharding.tensor_sharding import TensorSharding
        >>> mesh = Mesh(axes=(("a", 4), ("b", 4)))
        >>> layout = layout_of(TensorSharding(mesh, (StridedShard(0, 2), Shard(0)), 1))
        >>> [(ref.name, ref.pre, ref.size) for ref in layout.dims[0]]
        [('b', 1, 2), ('a', 1, 4), ('b', 2, 2)]
    """
    mesh = ts.mesh
    names = tuple(mesh.axis_names)
    sizes = tuple(int(s) for s in mesh.axis_sizes)
    ids = tuple(int(d) for d in mesh.device_ids)
    device_ids = None if ids == tuple(range(len(ids))) else ids
    if any(_is_strided(p) for p in ts.placements):
        dims = _simulated_dims(ts, names, sizes, tensor_name)
    else:
        dims = tuple(
            tuple(AxisRef(name, 1, sizes[names.index(name)]) for name in axes)
            for axes in ts.dim_axes
        )
    partial = tuple(ts.partial_axes)
    ops = sorted({str(_op_name(op)) for _, op in partial})
    return ShardingLayout(
        axis_names=names,
        axis_sizes=sizes,
        device_ids=device_ids,
        dims=dims,
        unreduced=tuple(
            AxisRef(name, 1, size)
            for name, size in zip(names, sizes, strict=True)
            if name in {axis for axis, _ in partial}
        ),
        reduce_op=None if not ops else "+".join(ops),
        tensor_name=tensor_name,
    )


def _op_name(op: Any) -> str:
    return str(getattr(op, "value", op))


def _is_strided(placement: Any) -> bool:
    return type(placement).__name__ == "StridedShard"


def _simulated_dims(
    ts: Any, names: tuple[str, ...], sizes: tuple[int, ...], tensor_name: str
) -> tuple[tuple[AxisRef, ...], ...]:
    steps: list[list[tuple[str, int, int]]] = [[] for _ in range(ts.ndim)]
    for name, size, placement in zip(names, sizes, ts.placements, strict=True):
        dim = getattr(placement, "dim", None)
        if dim is not None:
            split = int(getattr(placement, "split_factor", 1))
            steps[dim].append((name, size, split))
    return tuple(_simulate_dim(d, s, tensor_name) for d, s in enumerate(steps))


def _simulate_dim(
    dim: int, steps: list[tuple[str, int, int]], tensor_name: str
) -> tuple[AxisRef, ...]:
    """Apply (axis, axis_size, split_factor) steps in DTensor order to one dim."""
    big = math.prod(size * split for _, size, split in steps) or 1
    digits = [_Digit(big)]
    for name, size, split in steps:
        if size == 1:
            continue  # a size-1 axis splits nothing, strided or not
        try:
            digits = _cut(_cut(_merge_local(digits), split), split * size)
        except _Uneven:
            message = (
                f'tensor "{tensor_name}" dim {dim}: the block of mesh axis "{name}" '
                f"(size {size}, split_factor {split}) straddles the blocks of the axes applied "
                "before it, so no mixed-radix layout describes it; reshard to Shard before export"
            )
            raise NotExpressibleError(
                message, format="layout", tensor=tensor_name, dim=dim, axis=name
            ) from None
        digits = _tag(digits, name, split, split * size)
    kept = [d for d in digits if d.size > 1]
    _require_contiguous(kept, dim, tensor_name)
    return _merge_adjacent(tuple(d.ref for d in kept if d.ref is not None))


def _cut(digits: list[_Digit], position: int) -> list[_Digit]:
    """Make `position` (a product of the most-major local digits) a digit boundary."""
    cum = 1
    for index, digit in enumerate(digits):
        if digit.ref is not None:
            continue
        if cum == position:
            return digits
        following = cum * digit.size
        if position < following:
            if position % cum or following % position:
                raise _Uneven
            head = position // cum
            return [*digits[:index], _Digit(head), _Digit(digit.size // head), *digits[index + 1 :]]
        cum = following
    if cum == position:
        return digits
    raise _Uneven


def _merge_local(digits: list[_Digit]) -> list[_Digit]:
    """Fuse neighbouring local digits: earlier cuts between them are not layout."""
    out: list[_Digit] = []
    for digit in digits:
        if out and out[-1].ref is None and digit.ref is None:
            out[-1] = _Digit(out[-1].size * digit.size)
        else:
            out.append(digit)
    return out


def _tag(digits: list[_Digit], name: str, start: int, stop: int) -> list[_Digit]:
    """Give the local digits between positions start and stop to mesh axis `name`."""
    out: list[_Digit] = []
    cum, pre = 1, 1
    for digit in digits:
        if digit.ref is None:
            if cum >= start and cum * digit.size <= stop:
                digit = _Digit(digit.size, AxisRef(name, pre, digit.size))
                pre *= digit.size
            cum *= digit.size
        out.append(digit)
    return out


def _require_contiguous(digits: list[_Digit], dim: int, tensor_name: str) -> None:
    for upper, lower in itertools.pairwise(digits):
        if upper.ref is None and lower.ref is not None:
            message = (
                f'tensor "{tensor_name}" dim {dim} is sharded by mesh axis "{lower.ref.name}" '
                "in a strided (view) layout: each device holds several separate blocks, which "
                "Shardy, HloSharding and PartitionSpec cannot express; export the tensor before "
                "the view or reshard it to Shard first"
            )
            raise NotExpressibleError(
                message, format="layout", tensor=tensor_name, dim=dim, axis=lower.ref.name
            )


def _merge_adjacent(refs: tuple[AxisRef, ...]) -> tuple[AxisRef, ...]:
    """Merge consecutive pieces of one axis, as Shardy requires (x:(1)2, x:(2)4 → x:(1)8)."""
    merged: list[AxisRef] = []
    for ref in refs:
        last = merged[-1] if merged else None
        if last is not None and last.name == ref.name and last.pre * last.size == ref.pre:
            merged[-1] = AxisRef(ref.name, last.pre, last.size * ref.size)
        else:
            merged.append(ref)
    return tuple(merged)
