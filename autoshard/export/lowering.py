"""Explicit reshards lowered to named collectives over named mesh axes, in Shardy's syntax.

A plan's reshard is priced as the steps `autoshard.reshard.find.find_reshard` returns; this module
writes exactly those steps, one Shardy collective per step, each with the sharding it leaves
(``-sdy-reshard-to-collectives`` prints them the same way), so what is emitted is what was
priced. `lower_reshard` does it for one `Reshard`; `lower_plan_reshards` re-runs
``find_reshard`` for every reshard of a plan and refuses (`ReshardMismatchError`) when the
plan's priced list (kind and axes of each collective) differs from it, or when a reshard does
not start from the layout its tensor is recorded in.

Worked example, mesh ``x=2, y=2``, tensor ``16x8``, ``[{"x"}, {}]`` → ``[{}, {"y"}]``::

    step          axes  dims           Shardy op
    all_slice     y     dst 1          sdy.all_slice [{}, {"y"}] -> [{"x"}, {"y"}]
    all_gather    x     src 0          sdy.all_gather [{"x"}, {}] -> [{}, {"y"}]

Local steps are emitted too (``all_slice``; ``replicated_to_partial`` is Shardy's
``replicated_to_unreduced``): they cost a copy or nothing but are part of the priced path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.export.errors import ExportError
from autoshard.export.layout import layout_of
from autoshard.export.shardy import _ref
from autoshard.planning.record_check import check_reshard_endpoints
from autoshard.reshard.find import find_reshard

logger = logging.getLogger(__name__)

SHARDY_NAMES = {
    "all_gather": "all_gather",
    "all_slice": "all_slice",
    "all_to_all": "all_to_all",
    "all_reduce": "all_reduce",
    "reduce_scatter": "reduce_scatter",
    "collective_permute": "collective_permute",
    "replicated_to_partial": "replicated_to_unreduced",
}


class ReshardMismatchError(ExportError):
    """A plan's priced collectives differ from the ones its reshard lowers to.

    Attributes (besides ExportError's): ``priced`` and ``emitted``, each a tuple of
    ``(kind, axes)`` pairs.
    """

    def __init__(
        self,
        message: str,
        *,
        tensor: str,
        priced: tuple[tuple[str, tuple[str, ...]], ...],
        emitted: tuple[tuple[str, tuple[str, ...]], ...],
    ) -> None:
        super().__init__(message, format="reshard", tensor=tensor)
        self.priced, self.emitted = priced, emitted


@dataclass(frozen=True, slots=True, kw_only=True)
class LoweredCollective:
    """One emitted collective: our kind, its mesh axes (major → minor where they shard a
    dim), the Shardy op text, and what a runtime needs to execute it on local blocks: the dim
    gathered or sent from (``src_dim``), the dim sliced or scattered into (``dst_dim``) and the
    reduction (``reduce_op``), as in :class:`autoshard.reshard.find.Collective`."""

    kind: str
    axes: tuple[str, ...]
    shardy: str
    src_dim: int | None = None
    dst_dim: int | None = None
    reduce_op: str | None = None

    @property
    def step(self) -> tuple[str, tuple[str, ...], int | None, int | None, str | None]:
        """``(kind, axes, src_dim, dst_dim, reduce_op)``: a step as the exported scripts'
        runtimes (:mod:`autoshard.export.jax_runtime`, :mod:`autoshard.export.dtensor_runtime`)
        take it."""
        return (self.kind, self.axes, self.src_dim, self.dst_dim, self.reduce_op)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoweredReshard:
    """A plan reshard with its shardings and the collectives that implement it, in order."""

    tensor: str
    producer: str
    consumer: str
    src: Any
    dst: Any
    collectives: tuple[LoweredCollective, ...]


def sharding_text(ts: Any) -> str:
    """Shardy's per-dim text of a sharding, e.g. ``[{"x"}, {}], unreduced={"y"}``.

    A pending reduction other than a sum is prefixed with its op (``unreduced=max{"y"}``, as
    Shardy writes max and min; ``avg{...}`` has no Shardy form and only documents the plan).

    Example:
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.placements import Partial, Shard
        >>> from autoshard.sharding.tensor_sharding import TensorSharding
        >>> mesh = Mesh(axes=(("x", 2), ("y", 2)))
        >>> sharding_text(TensorSharding(mesh, (Shard(0), Partial("sum")), 2))
        '[{"x"}, {}], unreduced={"y"}'
    """
    layout = layout_of(ts)
    text = "[" + ", ".join(_dim_text(layout, refs) for refs in layout.dims) + "]"
    if layout.unreduced:
        op = "" if layout.reduce_op == "sum" else layout.reduce_op or ""
        refs = ", ".join(_ref(layout, r) for r in layout.unreduced)
        text += f", unreduced={op}{{{refs}}}"
    return text


def _dim_text(layout: Any, refs: Sequence[Any]) -> str:
    return "{" + ", ".join(_ref(layout, r) for r in refs) + "}"


def _axes_set(axes: Sequence[str]) -> str:
    return "{" + ", ".join(f'"{a}"' for a in axes) + "}"


def _per_dim(ndim: int, dim: int | None, axes: Sequence[str]) -> str:
    return "[" + ", ".join(_axes_set(axes) if d == dim else "{}" for d in range(ndim)) + "]"


def shardy_op(collective: Any, after: Any) -> str:
    """The Shardy op text of one step, e.g. ``sdy.all_to_all [{"x"}: 0->2] -> [...]``.

    Example:
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.placements import Replicate, Shard
        >>> from autoshard.reshard.find import Collective
        >>> from autoshard.sharding.tensor_sharding import TensorSharding
        >>> after = TensorSharding(Mesh(axes=(("x", 2),)), (Replicate(),), 2)
        >>> step = Collective(kind="all_gather", axes=("x",), group_size=2, bytes=0.0,
        ...                   seconds=0.0, src_dim=0)
        >>> shardy_op(step, after)
        'sdy.all_gather [{"x"}, {}] -> [{}, {}]'
    """
    kind, axes, ndim = collective.kind, tuple(collective.axes), after.ndim
    out = sharding_text(after)
    if kind not in SHARDY_NAMES:
        raise ExportError(f"unknown collective kind {kind!r}", format="shardy")
    name = "sdy." + SHARDY_NAMES[kind]
    if kind == "all_gather":
        return f"{name} {_per_dim(ndim, collective.src_dim, axes)} -> {out}"
    if kind in ("all_slice", "reduce_scatter"):
        return f"{name} {_per_dim(ndim, collective.dst_dim, axes)} -> {out}"
    if kind == "all_to_all":
        move = f"{_axes_set(axes)}: {collective.src_dim}->{collective.dst_dim}"
        return f"{name} [{move}] -> {out}"
    if kind in ("all_reduce", "replicated_to_partial"):
        return f"{name} {_axes_set(axes)} -> {out}"
    return f"{name} -> {out}"


def lower_reshard(reshard: Any) -> tuple[LoweredCollective, ...]:
    """Every step of a `Reshard` as a `LoweredCollective`, in the priced order.

    Example:
        >>> from costmodel import get_preset
        >>> from autoshard.sharding.links import MeshLinks
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.placements import Partial, Replicate
        >>> from autoshard.reshard.find import find_reshard
        >>> from autoshard.sharding.tensor_sharding import TensorSharding
        >>> mesh = Mesh(axes=(("x", 2), ("y", 2)))
        >>> links = MeshLinks.build(mesh, get_preset("dgx-h100"))
        >>> src = TensorSharding(mesh, (Replicate(), Partial("sum")), 2)
        >>> dst = TensorSharding(mesh, (Replicate(), Replicate()), 2)
        >>> [c.shardy for c in lower_reshard(find_reshard(src, dst, (8, 8), 4, links))]
        ['sdy.all_reduce {"y"} -> [{}, {}]']
    """
    return tuple(
        LoweredCollective(
            kind=step.collective.kind,
            axes=tuple(step.collective.axes),
            shardy=shardy_op(step.collective, step.after),
            src_dim=step.collective.src_dim,
            dst_dim=step.collective.dst_dim,
            reduce_op=step.collective.reduce_op,
        )
        for step in reshard.steps
    )


def lower_plan_reshards(
    plan: Any, shardings: Any, links: Any, device_hbm_bw: float | None
) -> tuple[LoweredReshard, ...]:
    """Lower every reshard of `plan`, checking it against what the plan priced.

    Args:
        plan: an `autoshard.planning.record.Plan`.
        shardings: the plan's `PlanShardings` (mesh and per-tensor shapes).
        links: the `MeshLinks` the plan was priced with (same topology and overrides).
        device_hbm_bw: the device's HBM bandwidth (prices local slices, as the planner does).

    Raises:
        PlanRecordError: a reshard that does not start from the layout its tensor is recorded
            in, or a reduction to ``<output>`` that does not end in it (a hand-edited plan;
            :func:`~autoshard.planning.record_check.check_reshard_endpoints`).
        ReshardMismatchError: a reshard whose priced (kind, axes) list differs from the
            collectives ``find_reshard`` gives for its src and dst (priced but not emitted, or
            emitted but not priced).
    """
    check_reshard_endpoints(plan)
    out = []
    for record in plan.reshards:
        src = shardings.parse(record.tensor, record.src)
        dst = shardings.parse(record.tensor, record.dst)
        tensor = plan.tensors[record.tensor]
        itemsize = shardings.itemsize(record.tensor)
        found = find_reshard(src, dst, tensor.shape, itemsize, links, device_hbm_bw)
        lowered = lower_reshard(found)
        _check_priced(record, lowered)
        out.append(
            LoweredReshard(
                tensor=record.tensor,
                producer=record.producer,
                consumer=record.consumer,
                src=src,
                dst=dst,
                collectives=lowered,
            )
        )
    return tuple(out)


def _check_priced(record: Any, lowered: tuple[LoweredCollective, ...]) -> None:
    priced = tuple((c.kind, tuple(c.axes)) for c in record.collectives)
    emitted = tuple((c.kind, c.axes) for c in lowered)
    if priced == emitted:
        return
    message = (
        f'reshard of tensor "{record.tensor}" ({record.producer} -> {record.consumer}, '
        f"{' '.join(record.src)} -> {' '.join(record.dst)}): the plan priced {list(priced)} "
        f"but the reshard lowers to {list(emitted)}; re-plan with this autoshard version or "
        "pass the --topology/--link options the plan was made with"
    )
    raise ReshardMismatchError(message, tensor=record.tensor, priced=priced, emitted=emitted)
