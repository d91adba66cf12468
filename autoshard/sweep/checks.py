"""A sweep's options checked against the points they apply to, before any point runs.

Why: a sweep is a cross product, so a value that applies to no point (a ``--link`` override of
an axis no mesh has, a ``--pp`` size that divides no device count) used to vanish from it
without a word, and a topology or link spec that does not parse failed every point, one error
row each, after the whole sweep ran. Each such mistake is one :class:`UsageError` here naming
the value and what is allowed.

Two strengths, on purpose: :func:`check_before_work` (what no point could use: an unknown
topology, a link spec that does not parse, an axis no mesh has) runs in every ``sweep()``;
:func:`check_given_sizes` (a ``--pp`` or ``--micro-batch`` size that gives no point) only
checks sizes the user typed, because a cross product a program builds (``--pp auto``: 2,4,8
on every device count) is meant to apply where it fits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from autoshard.errors import AutoshardError, UsageError
from autoshard.sharding.links import resolve_topology
from autoshard.sweep.points import (
    PP_AXIS,
    SweepSpec,
    axis_names_for,
    enumerate_points,
    factorizations,
    parse_link_variant,
    pipeline_meshes,
)
from costmodel import CostModelError, parse_link_spec


def sweep_axes(spec: SweepSpec) -> tuple[str, ...]:
    """Every axis name some mesh of the sweep has, in mesh order of first appearance.

    Example:
        >>> sweep_axes(SweepSpec(model="mlp", devices=(8,), max_axes=2))
        ('dp', 'tp')
        >>> sweep_axes(SweepSpec(model="mlp", devices=(8,), training=True, pipeline=(2,)))
        ('dp', 'tp', 'fsdp', 'pp')
    """
    names: dict[str, None] = {}
    for devices in spec.devices:
        for sizes in factorizations(devices, spec.min_axes, spec.max_axes):
            names.update(dict.fromkeys(axis_names_for(len(sizes), spec.axis_names)))
        if spec.training:
            for mesh in pipeline_meshes(devices, spec):
                names.update(dict.fromkeys(name for name, _ in mesh))
    return tuple(names)


def check_before_work(spec: SweepSpec) -> None:
    """Every topology loads, every link spec parses on each of them, and every axis a link
    variant names is an axis of some mesh of the sweep.

    Raises:
        UsageError: naming the option, the value and what is allowed, e.g. ``--link
            "zz=ib": no mesh of this sweep has an axis "zz" (its axes: dp, tp, fsdp); name
            one of those``.
    """
    topologies = []
    for name in spec.topologies:
        try:
            topologies.append(resolve_topology(name))
        except AutoshardError as exc:
            raise UsageError(f'--topology "{name}": {exc}') from None
    axes = sweep_axes(spec)
    for variant in spec.links:
        for axis, link_spec in parse_link_variant(variant).items():
            if axis not in axes:
                raise UsageError(f'--link "{variant}": no mesh of this sweep has an axis '
                                 f'"{axis}" (its axes: {", ".join(axes)}); name one of those')
            for topology in topologies:
                try:
                    parse_link_spec(link_spec, topology)
                except CostModelError as exc:
                    raise UsageError(f'--link "{variant}", axis {axis}: {exc}') from None


def fitting_pipeline_sizes(spec: SweepSpec, sizes: Iterable[int]) -> tuple[int, ...]:
    """Those of ``sizes`` that give a pipelined mesh on some device count of ``spec``.

    Example:
        >>> spec = SweepSpec(model="mlp", devices=(4,), training=True)
        >>> fitting_pipeline_sizes(spec, (2, 3, 4, 8))
        (2, 4)
    """
    return tuple(size for size in sizes
                 if any(pipeline_meshes(devices, _with_pipeline(spec, (size,)))
                        for devices in spec.devices))


def check_given_sizes(spec: SweepSpec, *, pipeline_given: bool,
                      micro_batch_given: bool) -> None:
    """The ``--pp`` and ``--micro-batch`` sizes the user typed each give at least one point.

    Raises:
        UsageError: a pp size no device count takes (it must divide one, with room for the
            mesh's other axes within ``--axes``); a micro-batch size no batch splits into on
            any mesh.
    """
    if pipeline_given:
        idle = [size for size in spec.pipeline if not fitting_pipeline_sizes(spec, (size,))]
        if idle:
            fits = fitting_pipeline_sizes(spec, _divisors(spec.devices))
            raise UsageError(
                f"--pp {idle[0]}: no mesh of {_devices_text(spec)} with {spec.min_axes}-"
                f"{spec.max_axes} axes has a {PP_AXIS} axis of size {idle[0]} (a {PP_AXIS} "
                f"size must divide a device count); sizes that fit: {_list(fits)}")
    if not micro_batch_given or all(batch is None for batch in spec.batches):
        return  # without a --batch every size fits (the batch is then made of them)
    idle = [size for size in spec.micro_batch_sizes if not _micro_batch_fits(spec, size)]
    if idle:
        largest = max(b for b in spec.batches if b is not None)
        fits = [s for s in range(1, largest + 1) if _micro_batch_fits(spec, s)]
        raise UsageError(
            f"--micro-batch {idle[0]}: no --batch ({_list(spec.batches)}) splits into whole "
            f"micro-batches of {idle[0]} per data-parallel replica on any mesh of "
            f"{_devices_text(spec)}; sizes that fit: {_list(fits)}")


def _micro_batch_fits(spec: SweepSpec, size: int) -> bool:
    """Whether some point of ``spec`` runs micro-batches of ``size``."""
    sized = dataclasses.replace(spec, micro_batch_sizes=(size,))
    return any(point.micro_batch == size for point in enumerate_points(sized))


def _with_pipeline(spec: SweepSpec, sizes: tuple[int, ...]) -> SweepSpec:
    return dataclasses.replace(spec, pipeline=sizes)


def _divisors(devices: Iterable[int]) -> list[int]:
    return sorted({d for count in devices for d in range(2, count + 1) if count % d == 0})


def _devices_text(spec: SweepSpec) -> str:
    return f"{','.join(map(str, spec.devices))} devices"  # a sweep's counts are at least 2


def _list(values: Iterable[object]) -> str:
    return ", ".join(str(v) for v in values) or "none"
