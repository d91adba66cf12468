"""Which physical link every mesh axis rides on, and the level groups collectives see.

``costmodel`` prices a collective over a *group* given as levels ``((size, link), ...)`` from
inner to outer and never hears of mesh axis names; this module is the one place that turns
mesh axes into such groups. Devices are numbered row-major over the mesh (the last axis is the
most minor), and device ``k`` sits in node ``k // node_size``, so the innermost axes fill a node
first. An axis that straddles a level boundary becomes several levels: ``dp=16`` on nodes of 8
is ``((8, nvlink), (2, ib))``.

Worked example, mesh ``dp=4, tp=4`` on nodes of 8 devices (``dgx-h100``)::

    axis  size  inner stride  devices spanned  levels
    tp       4             1                4  ((4, nvlink),)
    dp       4             4               16  ((2, nvlink), (2, ib))

Overrides (``--link tp=nvlink``, a :class:`costmodel.Link`, or the topology's ``axis_links``)
put the whole axis on one link. Claiming a node-bound link (NVLink) for an axis whose devices
span more than one node is an error, because no such link exists between those devices.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autoshard.errors import AutoshardError, TopologyError
from autoshard.sharding.mesh import Mesh
from costmodel import (
    NCCL_BASE_LATENCY_S,
    PROBE_BYTES,
    CostModelError,
    LaunchFloorWarning,
    Link,
    Topology,
    get_preset,
    load_topology,
    parse_link_spec,
    undercut_floor,
)

logger = logging.getLogger(__name__)

Group = tuple[tuple[int, Link], ...]


class MeshLinksError(AutoshardError):
    """A mesh axis cannot be mapped onto the topology's links as asked."""

    def __init__(self, message: str, *, axis: str | None = None, span: int | None = None,
                 node_size: int | None = None) -> None:
        super().__init__(message)
        self.axis, self.span, self.node_size = axis, span, node_size


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisLink:
    """One mesh axis: its size, the devices it spans, and its levels inner→outer.

    ``ranks`` gives, per level, the topology level index it belongs to (``len(levels)`` of the
    topology for an override link bound to no level), used to merge several axes' levels.
    """

    axis: str
    size: int
    stride: int
    levels: Group
    ranks: tuple[int, ...]
    overridden: bool


@dataclass(frozen=True, slots=True)
class MeshLinks:
    """Mesh axes mapped onto a topology; build with :meth:`MeshLinks.build`."""

    mesh: Mesh
    topology_name: str
    axes: tuple[AxisLink, ...]

    @staticmethod
    def build(mesh: Mesh, topology: Topology,
              overrides: Mapping[str, str | Link] | None = None) -> MeshLinks:
        """Map every axis of ``mesh`` onto ``topology``.

        Args:
            mesh: the device mesh, axes major to minor.
            topology: physical levels inner→outer plus optional per-axis links.
            overrides: per-axis link, a spec for :func:`costmodel.parse_link_spec`
                (``"nvlink"``, ``"alpha:5e-6,bw:25e9"``) or a :class:`costmodel.Link`.

        Raises:
            MeshLinksError: unknown axis in ``overrides``; bad link spec; a node-bound link
                claimed by an axis that spans more devices than the node holds; a mesh with
                more devices than a topology whose outermost level is bounded.

        Example:
            >>> from costmodel import get_preset
            >>> links = MeshLinks.build(Mesh(axes=(("dp", 16), ("tp", 8))), get_preset("dgx-h100"))
            >>> [size for size, _ in links.group(("dp",))]
            [16]
        """
        _check_capacity(mesh, topology)
        chosen = _resolve_overrides(mesh, topology, dict(overrides or {}))
        axes, stride = [], 1
        for name, size in reversed(tuple(zip(mesh.axis_names, mesh.axis_sizes, strict=True))):
            link = chosen.get(name)
            if link is None:
                levels, ranks = _natural_levels(topology, stride, size, mesh.size)
            else:
                _check_span(topology, name, size, stride, link)
                rank = _level_rank(topology, link, stride, size, mesh.size)
                levels, ranks = ((size, link),), (rank,)
            axes.append(AxisLink(axis=name, size=size, stride=stride, levels=levels,
                                 ranks=ranks, overridden=link is not None))
            stride *= size
        return MeshLinks(mesh=mesh, topology_name=topology.name, axes=tuple(reversed(axes)))

    def axis(self, name: str) -> AxisLink:
        for item in self.axes:
            if item.axis == name:
                return item
        names = ", ".join(a.axis for a in self.axes)
        message = f'mesh axis "{name}" is not in the mesh (axes: {names})'
        raise MeshLinksError(message, axis=name)

    def group(self, axes: tuple[str, ...] | list[str]) -> Group:
        """The level group of one collective over ``axes`` together, inner→outer.

        Pieces of every axis are ordered by physical level (inner first; within a level, the
        more minor mesh axis first) and adjacent pieces on the same link are merged.

        Example:
            >>> from costmodel import get_preset
            >>> links = MeshLinks.build(Mesh(axes=(("dp", 2), ("tp", 4))), get_preset("dgx-h100"))
            >>> [size for size, _ in links.group(("dp", "tp"))]
            [8]
        """
        pieces = []
        position = {a.axis: i for i, a in enumerate(self.axes)}
        for name in dict.fromkeys(axes):
            item = self.axis(name)
            for (size, link), rank in zip(item.levels, item.ranks, strict=True):
                pieces.append((rank, -position[name], size, link))
        pieces.sort(key=lambda p: (p[0], p[1]))
        merged: list[list[Any]] = []
        for _rank, _pos, size, link in pieces:
            if size == 1:
                continue
            if merged and merged[-1][1] == link:
                merged[-1][0] *= size
            else:
                merged.append([size, link])
        return tuple((int(size), link) for size, link in merged)

    def describe(self) -> tuple[dict[str, Any], ...]:
        """One row per mesh axis for the plan summary: axis, size, link, alpha, bandwidth.

        A multi-level axis names every level (``nvlink×8+ib×2``) and reports the slowest
        level's alpha and bandwidth.
        """
        rows = []
        for item in self.axes:
            names = "+".join(f"{_link_name(link)}×{size}" if len(item.levels) > 1
                             else _link_name(link) for size, link in item.levels)
            slowest = max((link for _, link in item.levels),
                          key=lambda link: (link.beta_s_per_byte, link.alpha_s))
            bandwidth = 1.0 / slowest.beta_s_per_byte if slowest.beta_s_per_byte else math.inf
            rows.append({"axis": item.axis, "size": item.size, "link": names or "local",
                         "alpha_s": float(slowest.alpha_s),
                         "bandwidth_bytes_per_s": float(bandwidth)})
        return tuple(rows)

    def describe_key(self) -> tuple[Any, ...]:
        """A hashable key that changes whenever any axis's levels change (for caches)."""
        return (self.topology_name,
                tuple((a.axis, a.levels, a.ranks) for a in self.axes))


def _link_name(link: Link) -> str:
    return link.name or f"alpha={link.alpha_s:g}s,beta={link.beta_s_per_byte:g}s/B"


def _resolve_overrides(mesh: Mesh, topology: Topology,
                       overrides: dict[str, str | Link]) -> dict[str, Link]:
    names = tuple(mesh.axis_names)
    chosen: dict[str, Link] = {}
    for axis, link in sorted(dict(getattr(topology, "axis_links", {}) or {}).items()):
        if axis in names:
            chosen[axis] = link
    for axis, spec in sorted(overrides.items()):
        if axis not in names:
            message = (f'--link names mesh axis "{axis}", which is not in the mesh '
                       f'(mesh axes: {", ".join(names)}); use one of those names')
            raise MeshLinksError(message, axis=axis)
        if isinstance(spec, Link):
            chosen[axis] = spec
            continue
        chosen[axis] = _parse(spec, axis, topology)
        _warn_below_floor(spec, axis, mesh, chosen[axis], topology)
    return chosen


def _warn_below_floor(spec: str, axis: str, mesh: Mesh, link: Link, topology: Topology) -> None:
    """A written alpha-beta link that prices a small all-reduce over the axis below the
    measured curve of the level the axis's devices cross (the outermost one: an axis inside
    a node is held to NVLink, not to the IB it never reaches) gets a
    :class:`costmodel.LaunchFloorWarning` (once per message: a pipelined plan builds its
    links twice)."""
    size = mesh.axis_size(axis)
    stride = math.prod(mesh.axis_sizes[mesh.axis_names.index(axis) + 1:])
    level = _natural_levels(topology, stride, size, mesh.size)[1][-1]
    gap = undercut_floor(link, size, topology, level=level)
    if gap is None:
        return
    message = (f"--link {axis}={spec} is a textbook alpha-beta link (alpha per algorithm step, "
               f"no per-collective launch floor): an all-reduce of {PROBE_BYTES:g} bytes over "
               f"its {size} ranks costs {gap.textbook_s * 1e6:.3g} us, below the "
               f"{gap.floor_s * 1e6:.3g} us of the measured {gap.floor_link} curve of the "
               f"{topology.levels[level].name} level its devices span on {topology.name}; add "
               f"launch:{NCCL_BASE_LATENCY_S * 1e6:g}us (NCCL's base latency) and "
               f"pipeline:DURATION to price it like the measured links, or name a link "
               f"(nvlink, ib, pcie)")
    warnings.warn(message, LaunchFloorWarning, stacklevel=2)


def _parse(spec: str, axis: str, topology: Topology) -> Link:
    try:
        return parse_link_spec(spec, topology)
    except CostModelError as exc:  # becomes ours, with the axis named
        message = f'--link {axis}={spec}: {exc}'
        raise MeshLinksError(message, axis=axis) from None


def _capacities(topology: Topology) -> list[int | None]:
    """Devices one domain of each level holds (cumulative), ``None`` = unbounded."""
    return [level.devices for level in topology.levels]


def _natural_levels(topology: Topology, stride: int, size: int,
                    mesh_size: int) -> tuple[Group, tuple[int, ...]]:
    """Split an axis of ``size`` at device stride ``stride`` over the levels it crosses.

    The part of the axis inside a level is all of it when every group fits in one unit of
    that level (the unit's device count is a multiple of ``stride × size``, or the whole mesh
    fits in one unit); otherwise the largest factor that keeps groups aligned to units.
    """
    levels, ranks, remaining, covered = [], [], size, stride
    capacities = _capacities(topology)
    for rank, (level, capacity) in enumerate(zip(topology.levels, capacities, strict=True)):
        last = rank == len(capacities) - 1
        if (capacity is None or last or capacity % (covered * remaining) == 0
                or mesh_size <= capacity):
            inner = remaining
        elif capacity % covered == 0:
            inner = math.gcd(remaining, capacity // covered)
        else:
            inner = 1
        if inner > 1:
            levels.append((inner, level.link))
            ranks.append(rank)
        remaining //= inner
        covered *= inner
        if remaining == 1:
            break
    if not levels:
        levels, ranks = [(size, topology.levels[-1].link)], [len(capacities) - 1]
    return tuple(levels), tuple(ranks)


def _bound_level(topology: Topology, link: Link) -> int | None:
    for rank, level in enumerate(topology.levels):
        same_name = bool(link.name) and link.name == level.link.name
        if (link == level.link or same_name) and level.devices is not None:
            return rank
    return None


def _level_rank(topology: Topology, link: Link, stride: int, size: int,
                mesh_size: int) -> int:
    bound = _bound_level(topology, link)
    if bound is not None:
        return bound
    natural = _natural_levels(topology, stride, size, mesh_size)[1]
    return natural[-1] if natural else len(topology.levels) - 1


def _check_span(topology: Topology, axis: str, size: int, stride: int, link: Link) -> None:
    rank = _bound_level(topology, link)
    if rank is None or size == 1:
        return
    level = topology.levels[rank]
    span = stride * size
    if level.devices is not None and span > level.devices:
        message = (f'mesh axis "{axis}" (size {size}) is set to link "{_link_name(link)}", '
                   f'but its devices span {span} devices (stride {stride} × size {size}) and '
                   f'one {level.name} holds {level.devices}; pick a slower link for "{axis}" '
                   f'or move it to the innermost mesh axes so it fits in one {level.name}')
        raise MeshLinksError(message, axis=axis, span=span, node_size=level.devices)


def _check_capacity(mesh: Mesh, topology: Topology) -> None:
    """A topology whose outermost level is bounded (a TOML file describing one 256-chip pod)
    holds that many devices; a larger mesh cannot be placed on it."""
    outer = topology.levels[-1] if topology.levels else None
    if outer is not None and outer.devices is not None and mesh.size > outer.devices:
        raise MeshLinksError(
            f"mesh {mesh} has {mesh.size} devices but topology {topology.name!r} holds "
            f"{outer.devices} (its outermost level {outer.name!r} is bounded); use a smaller "
            "mesh or a topology with an unbounded outer level")


def resolve_topology(topology: Topology | str) -> Topology:
    """A preset by name, a TOML file (``*.toml``), or the topology itself."""
    if isinstance(topology, Topology):
        return topology
    try:
        if topology.endswith(".toml"):
            return load_topology(topology)
        return get_preset(topology)
    except CostModelError as exc:
        raise TopologyError(str(exc)) from None
