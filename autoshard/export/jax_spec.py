"""Export a tensor sharding as a JAX PartitionSpec (source text, or the object when jax is
installed) and the mesh as ``jax.sharding.Mesh`` source.

A PartitionSpec names whole mesh axes only: sub-axes (from strided layouts) are refused, and a
pending reduction is ``unreduced={...}``, which JAX only accepts for a sum over Explicit axes;
other Partial ops are refused. Entries are written for every tensor dim (``None`` when
unsharded), one axis as a plain name, several as a tuple major → minor:
``P(('tp', 'dp'), None)``.
"""

from __future__ import annotations

import logging
from typing import Any

from autoshard.export.errors import NotExpressibleError
from autoshard.export.layout import ShardingLayout, layout_of

logger = logging.getLogger(__name__)

SpecEntry = None | str | tuple[str, ...]


def partition_spec_entries(ts: Any, tensor_name: str = "") -> tuple[SpecEntry, ...]:
    """One PartitionSpec entry per tensor dim.

    Raises:
        NotExpressibleError: a sub-axis (strided layout) shards a dim.
    """
    layout = layout_of(ts, tensor_name)
    return _entries(layout)


def _entries(layout: ShardingLayout) -> tuple[SpecEntry, ...]:
    entries: list[SpecEntry] = []
    for dim, refs in enumerate(layout.dims):
        for ref in refs:
            if not layout.is_whole(ref):
                message = (
                    f'tensor "{layout.tensor_name}" dim {dim} needs part of mesh axis '
                    f'"{ref.name}" (sub-axis ({ref.pre}){ref.size}); a PartitionSpec names whole '
                    "axes only; export Shardy or HloSharding, or reshard to Shard first"
                )
                raise NotExpressibleError(
                    message, format="jax", tensor=layout.tensor_name, dim=dim, axis=ref.name
                )
        names = tuple(ref.name for ref in refs)
        entries.append(None if not names else names[0] if len(names) == 1 else names)
    return tuple(entries)


def _unreduced(layout: ShardingLayout) -> tuple[str, ...]:
    if layout.unreduced and layout.reduce_op != "sum":
        axis = layout.unreduced[0].name
        message = (
            f'tensor "{layout.tensor_name}" is Partial({layout.reduce_op}) on mesh axis "{axis}"; '
            "JAX's unreduced axes are a pending sum only; reduce it (all-reduce) before export"
        )
        raise NotExpressibleError(message, format="jax", tensor=layout.tensor_name, axis=axis)
    return tuple(ref.name for ref in layout.unreduced)


def partition_spec_source(ts: Any, tensor_name: str = "") -> str:
    """Evaluable source, e.g. ``P('dp', None)`` or ``P('x', None, unreduced={'y'})``
    (with ``from jax.sharding import PartitionSpec as P``).

    Example:
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.tensor_sharding import TensorSharding
        >>> mesh = Mesh(axes=(("dp", 2), ("tp", 4)))
        >>> partition_spec_source(TensorSharding.from_partition_spec(mesh, (("tp", "dp"),), 2))
        "P(('tp', 'dp'), None)"
    """
    layout = layout_of(ts, tensor_name)
    parts = [_entry_source(e) for e in _entries(layout)]
    unreduced = _unreduced(layout)
    if unreduced:
        parts.append("unreduced={" + ", ".join(f"'{a}'" for a in unreduced) + "}")
    return "P(" + ", ".join(parts) + ")"


def _entry_source(entry: SpecEntry) -> str:
    if entry is None:
        return "None"
    if isinstance(entry, str):
        return f"'{entry}'"
    return "(" + ", ".join(f"'{a}'" for a in entry) + ")"


def to_jax_partition_spec(ts: Any, tensor_name: str = "") -> Any:
    """The ``jax.sharding.PartitionSpec`` (needs jax)."""
    from jax.sharding import PartitionSpec

    layout = layout_of(ts, tensor_name)
    entries = _entries(layout)
    unreduced = _unreduced(layout)
    if unreduced:
        return PartitionSpec(*entries, unreduced=frozenset(unreduced))
    return PartitionSpec(*entries)


def jax_mesh_source(mesh: Any, explicit_axes: bool = False) -> str:
    """Source that builds the ``jax.sharding.Mesh`` with our device order, e.g.
    ``Mesh(np.asarray(jax.devices()[:8]).reshape(2, 4), ('dp', 'tp'))``. Pass
    ``explicit_axes=True`` when a spec uses ``unreduced`` (JAX requires Explicit axes there)."""
    sizes = ", ".join(str(int(s)) for s in mesh.axis_sizes)
    names = "(" + ", ".join(f"'{n}'" for n in mesh.axis_names)
    names += ",)" if len(mesh.axis_names) == 1 else ")"
    ids = [int(d) for d in mesh.device_ids]
    if ids == list(range(len(ids))):
        devices = f"np.asarray(jax.devices()[:{len(ids)}])"
    else:
        devices = f"np.asarray(jax.devices())[{ids}]"
    text = f"Mesh({devices}.reshape({sizes}), {names}"
    if explicit_axes:
        text += f", axis_types=(jax.sharding.AxisType.Explicit,) * {len(mesh.axis_sizes)}"
    return text + ")"
