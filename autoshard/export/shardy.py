"""Export a tensor sharding as a Shardy ``#sdy.sharding`` attribute, the mesh as ``sdy.mesh``,
and read both back.

Shardy writes one closed ``{...}`` per tensor dim with the mesh (sub-)axes major → minor; a
pending sum is ``unreduced={...}`` (``unreduced=max{...}``/``min{...}`` for max/min), and
``replicated={...}`` lists axes that must stay unsharded (printed before ``unreduced``). Plans
are final, so every dim is emitted closed. Sub-axes ``"x":(pre)size`` appear where a
`StridedShard` splits an axis (see `autoshard.export.layout`).

The parser exists so that our Shardy output can be pushed through our re-implementation of
XLA's Shardy → HloSharding exporter (`shardy_to_hlo_sharding`), and so that upstream Shardy
test strings can be checked against it. Open dims (``?``) and priorities are read and dropped,
as the V2 export drops them.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from autoshard.export.errors import HloParseError, NotExpressibleError
from autoshard.export.hlo import layout_to_hlo_sharding
from autoshard.export.layout import AxisRef, ShardingLayout, layout_of

logger = logging.getLogger(__name__)

_UNREDUCED_OPS = {"sum": "", "max": "max", "min": "min"}


def to_shardy(
    ts: Any, mesh_name: str = "mesh", explicit_replicated: bool = False, tensor_name: str = ""
) -> str:
    """The ``#sdy.sharding<@mesh, [...]>`` attribute of a `TensorSharding`.

    Args:
        ts: the tensor sharding.
        mesh_name: the ``sdy.mesh`` symbol to refer to.
        explicit_replicated: list every unused (sub-)axis in ``replicated={...}`` so that
            propagation may never shard the tensor along it.
        tensor_name: named in error messages.

    Raises:
        NotExpressibleError: a strided view layout, or a Partial op Shardy has no
            unreduced form for (avg, product, bitwise ops).

    Example:
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.placements import Replicate, Shard
        >>> from autoshard.sharding.tensor_sharding import TensorSharding
        >>> mesh = Mesh(axes=(("x", 2), ("y", 4)))
        >>> ts = TensorSharding(mesh, (Replicate(), Shard(0)), 2)
        >>> to_shardy(ts)
        '#sdy.sharding<@mesh, [{"y"}, {}]>'
        >>> to_shardy(ts, explicit_replicated=True)
        '#sdy.sharding<@mesh, [{"y"}, {}], replicated={"x"}>'
    """
    layout = layout_of(ts, tensor_name)
    return layout_to_shardy(layout, mesh_name, explicit_replicated)


def layout_to_shardy(
    layout: ShardingLayout, mesh_name: str = "mesh", explicit_replicated: bool = False
) -> str:
    """`to_shardy` on an already normalized layout."""
    dims = ", ".join("{" + ", ".join(_ref(layout, r) for r in refs) + "}" for refs in layout.dims)
    text = f"#sdy.sharding<@{mesh_name}, [{dims}]"
    if explicit_replicated:
        unused = _unused_refs(layout)
        if unused:
            text += ", replicated={" + ", ".join(_ref(layout, r) for r in unused) + "}"
    if layout.unreduced:
        op = _unreduced_prefix(layout)
        text += f", unreduced={op}{{" + ", ".join(_ref(layout, r) for r in layout.unreduced) + "}"
    return text + ">"


def shardy_dims(ts: Any, tensor_name: str = "") -> tuple[tuple[str, ...], ...]:
    """Per tensor dim, the Shardy axis names (sub-axes as ``x:(1)2``), major → minor."""
    layout = layout_of(ts, tensor_name)
    return tuple(tuple(_ref(layout, r).replace('"', "") for r in refs) for refs in layout.dims)


def shardy_mesh(mesh: Any, name: str = "mesh") -> str:
    """The ``sdy.mesh`` declaration; ``device_ids`` only when the order is not iota.

    Example: ``sdy.mesh @mesh = <["dp"=2, "tp"=4]>``.
    """
    axes = ", ".join(
        f'"{axis}"={size}' for axis, size in zip(mesh.axis_names, mesh.axis_sizes, strict=True)
    )
    ids = [int(d) for d in mesh.device_ids]
    suffix = (
        "" if ids == list(range(len(ids))) else ", device_ids=[" + ", ".join(map(str, ids)) + "]"
    )
    return f"sdy.mesh @{name} = <[{axes}]{suffix}>"


def _ref(layout: ShardingLayout, ref: AxisRef) -> str:
    if layout.is_whole(ref):
        return f'"{ref.name}"'
    return f'"{ref.name}":({ref.pre}){ref.size}'


def _unreduced_prefix(layout: ShardingLayout) -> str:
    op = layout.reduce_op or "sum"
    if op not in _UNREDUCED_OPS:
        axis = layout.unreduced[0].name
        message = (
            f'tensor "{layout.tensor_name}" is Partial({op}) on mesh axis "{axis}"; Shardy\'s '
            "unreduced axes only carry sum, max or min; reduce it (all-reduce) before export"
        )
        raise NotExpressibleError(message, format="shardy", tensor=layout.tensor_name, axis=axis)
    return _UNREDUCED_OPS[op]


def _unused_refs(layout: ShardingLayout) -> list[AxisRef]:
    """The (sub-)axes no dim and no unreduced entry uses, in mesh order, merged."""
    used = [r for refs in layout.dims for r in refs] + list(layout.unreduced)
    out: list[AxisRef] = []
    for name, size in zip(layout.axis_names, layout.axis_sizes, strict=True):
        mine = sorted((r for r in used if r.name == name), key=lambda r: r.pre)
        position = 1
        for ref in [*mine, AxisRef(name, size, 1)]:
            if ref.pre > position:
                out.append(AxisRef(name, position, ref.pre // position))
            position = ref.pre * ref.size
    return out


_MESH = re.compile(
    r"<\s*\[(?P<axes>[^\]]*)\]\s*(?:,\s*device_ids\s*=\s*\[(?P<ids>[\d,\s]*)\])?\s*>\s*$"
)
_AXIS = re.compile(r'"(?P<name>[^"]+)"\s*=\s*(?P<size>\d+)')
_SHARDING = re.compile(
    r"^(?:#sdy\.sharding)?<\s*@(?P<mesh>[\w.$-]+)\s*,\s*\[(?P<dims>.*?)\]\s*"
    r"(?:,\s*replicated=\{(?P<replicated>[^}]*)\})?\s*"
    r"(?:,\s*unreduced=(?P<op>max|min)?\{(?P<unreduced>[^}]*)\})?\s*>$"
)
_REF = re.compile(r'"(?P<name>[^"]+)"(?::\((?P<pre>\d+)\)(?P<size>\d+))?')


def parse_shardy_mesh(text: str) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...] | None]:
    """``sdy.mesh @m = <["x"=2, "y"=4]>`` (or just ``<[...]>``) → (names, sizes, device_ids)."""
    match = _MESH.search(text.strip())
    if match is None:
        raise HloParseError(f"cannot parse Shardy mesh {text!r}", format="shardy")
    axes = _AXIS.findall(match.group("axes"))
    names = tuple(name for name, _ in axes)
    sizes = tuple(int(size) for _, size in axes)
    ids = match.group("ids")
    device_ids = tuple(int(i) for i in re.findall(r"\d+", ids)) if ids else None
    if device_ids == tuple(range(len(device_ids or ()))):
        device_ids = None
    return names, sizes, device_ids


def parse_shardy(text: str, mesh: str) -> ShardingLayout:
    """Parse a Shardy sharding (``#sdy.sharding<@m, [...]>`` or ``<@m, [...]>``) on `mesh`
    (an ``sdy.mesh`` string). Open dims and priorities are dropped; ``replicated`` is implied."""
    names, sizes, device_ids = parse_shardy_mesh(mesh)
    match = _SHARDING.match(text.strip())
    if match is None:
        raise HloParseError(f"cannot parse Shardy sharding {text!r}", format="shardy")
    sizes_by_name = dict(zip(names, sizes, strict=True))
    dims = tuple(
        _parse_refs(dim, sizes_by_name, text) for dim in re.findall(r"\{([^}]*)\}", match["dims"])
    )
    unreduced = _parse_refs(match["unreduced"] or "", sizes_by_name, text)
    return ShardingLayout(
        axis_names=names,
        axis_sizes=sizes,
        device_ids=device_ids,
        dims=dims,
        unreduced=unreduced,
        reduce_op=(match["op"] or "sum") if unreduced else None,
    )


def _parse_refs(text: str, sizes: dict[str, int], whole: str) -> tuple[AxisRef, ...]:
    refs = []
    for match in _REF.finditer(text):
        name = match["name"]
        if name not in sizes:
            raise HloParseError(f"axis {name!r} of {whole!r} is not in the mesh", format="shardy")
        if match["pre"] is None:
            refs.append(AxisRef(name, 1, sizes[name]))
        else:
            refs.append(AxisRef(name, int(match["pre"]), int(match["size"])))
    return tuple(refs)


def shardy_to_hlo_sharding(text: str, mesh: str, version: int = 2) -> str:
    """XLA's Shardy → HloSharding export of one sharding (V1 forced by explicit device ids)."""
    layout = parse_shardy(text, mesh)
    if layout.device_ids is not None:
        version = 1
    return layout_to_hlo_sharding(layout, version)
