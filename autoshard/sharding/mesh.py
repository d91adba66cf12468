"""The device mesh: named axes with sizes, major to minor, over a list of device ids.

A mesh is a value (frozen, hashable) because strategies, reshard costs and plans are cached and
fingerprinted by it. Device ids are the row-major iota ``0..n-1`` unless given, exactly as
``jax.sharding.Mesh(np.arange(n).reshape(sizes), names)`` and DTensor's
``init_device_mesh`` lay them out, so coordinates mean the same thing in every exporter.
Shardy's sub-axes (``"x":(1)2``) are not mesh axes: they are pieces of one, described by the
exporters' ``AxisRef``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from autoshard.errors import MeshError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# a parsed mesh's device count at most: 2^20, ten times the largest GPU clusters announced;
# beyond it a typo (an extra digit) would only spend minutes before failing somewhere else
MAX_DEVICES = 2**20


@dataclass(frozen=True)
class Mesh:
    """Named axes ``((name, size), ...)`` major to minor, and the device ids in row-major order.

    Example:
        >>> mesh = Mesh.parse("dp=2,tp=4")
        >>> mesh.axis_names, mesh.axis_sizes, mesh.size
        (('dp', 'tp'), (2, 4), 8)
        >>> mesh.coords(6)
        (1, 2)
    """

    axes: tuple[tuple[str, int], ...]
    devices: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        axes = tuple((str(name), int(size)) for name, size in self.axes)
        object.__setattr__(self, "axes", axes)
        if not axes:
            raise MeshError("a mesh needs at least one axis, e.g. --mesh dp=8")
        names = [name for name, _ in axes]
        for name, size in axes:
            if not _NAME.match(name):
                raise MeshError(f'mesh axis name "{name}" must be an identifier like dp or tp',
                                axis=name)
            if size < 1:
                raise MeshError(f'mesh axis "{name}" has size {size}; sizes must be at least 1',
                                axis=name)
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise MeshError(f'mesh axis "{duplicated[0]}" appears twice; axis names must be '
                            "unique", axis=duplicated[0])
        if self.devices is not None:
            devices = tuple(int(d) for d in self.devices)
            object.__setattr__(self, "devices", devices)
            total = math.prod(size for _, size in axes)
            if len(devices) != total or sorted(devices) != list(range(total)):
                raise MeshError(f"the device list must be a permutation of 0..{total - 1} for "
                                f"mesh {self}; got {len(devices)} ids")
            if devices == tuple(range(total)):
                object.__setattr__(self, "devices", None)

    @staticmethod
    def parse(text: str) -> Mesh:
        """``"dp=2,tp=4"`` (major axis first) → Mesh; a malformed part names itself."""
        axes: list[tuple[str, int]] = []
        for part in (p.strip() for p in text.split(",")):
            name, sep, size = part.partition("=")
            size = size.strip()
            if not sep or not (size.isascii() and size.isdigit()):  # "٢".isdigit() is True
                raise MeshError(f'mesh part "{part}" must look like NAME=SIZE, e.g. '
                                '"dp=2,tp=4"', axis=name.strip() or None)
            axes.append((name.strip(), int(size)))
        devices = math.prod(size for _, size in axes)
        if devices > MAX_DEVICES:
            raise MeshError(f'mesh "{text}" has {devices:,} devices; plan meshes of at most '
                            f"{MAX_DEVICES:,}")
        return Mesh(axes=tuple(axes))

    @staticmethod
    def from_shape(sizes: Sequence[int], names: Sequence[str]) -> Mesh:
        return Mesh(axes=tuple(zip(names, sizes, strict=True)))

    def __str__(self) -> str:
        return ",".join(f"{name}={size}" for name, size in self.axes)

    def __hash__(self) -> int:
        # a mesh keys most of the planner's caches (inside every TensorSharding): its hash is
        # computed once, not once per dict lookup; never pickled (string hashes are salted
        # per process), see __getstate__
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.axes, self.devices))
            self.__dict__["_hash"] = cached
        return cached

    def __getstate__(self) -> dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @cached_property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.axes)

    @cached_property
    def axis_sizes(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.axes)

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def size(self) -> int:
        return math.prod(self.axis_sizes)

    def axis_index(self, name: str) -> int:
        """Position of an axis; an unknown name is a MeshError listing the axes."""
        try:
            return self.axis_names.index(name)
        except ValueError:
            raise MeshError(f'mesh {self} has no axis "{name}" (axes: '
                            f'{", ".join(self.axis_names)})', axis=name) from None

    def axis_size(self, name: str) -> int:
        return self.axes[self.axis_index(name)][1]

    @cached_property
    def device_ids(self) -> tuple[int, ...]:
        """Device id at every mesh position, row-major over the axes."""
        return self.devices if self.devices is not None else tuple(range(self.size))

    def coords(self, device: int) -> tuple[int, ...]:
        """Mesh coordinates of a device id."""
        position = self.device_ids.index(device)
        coord = []
        for size in reversed(self.axis_sizes):
            coord.append(position % size)
            position //= size
        return tuple(reversed(coord))

    def device_at(self, coord: Sequence[int]) -> int:
        position = 0
        for c, size in zip(coord, self.axis_sizes, strict=True):
            position = position * size + int(c)
        return self.device_ids[position]

    def all_coords(self) -> tuple[tuple[int, ...], ...]:
        """Every coordinate, in row-major (device position) order."""
        return tuple(itertools.product(*(range(s) for s in self.axis_sizes)))
