"""Fit a topology's measured-curve parameters to nccl-tests tables, or check it against them.

Why: a preset is someone else's cluster. ``calibrate`` turns the user's own nccl-tests runs
into the per-level parameters of :mod:`costmodel.measured` (``launch_s``, ``alpha_s``,
``pipeline_s``, ``bus_efficiency``); ``check`` says how wrong a topology is on those runs.

The fit: every measured row gives a residual ``log(predicted / measured)`` (time spans five
decades, so errors are relative), minimised by ``scipy.optimize.least_squares`` with a robust
``soft_l1`` loss (a protocol switch that the closed form cannot follow weighs linearly, not
quadratically) over the parameters in log space, each bounded to physical values (see
:data:`BOUNDS`). The link rates ``1/beta`` stay the base's (vendor specs): the fit explains the
measured curve with the overheads below them. A weak prior (weight :data:`PRIOR_WEIGHT` per
parameter, in log space) pulls each parameter that the base sets toward the base's value, so
combinations one table cannot separate (the launch floor and the hop latency of one group
size) stay where the base put them.

Which levels are fitted (:mod:`costmodel.calibration_levels`): a level is fitted when some
table crosses it and no level outside it, so a single-node table fits the node level and a
multi-node table the network level; one table of each fits both, jointly. A level that the
tables cross only together with an outer level (the node level under multi-node tables alone)
cannot be told apart from that level on them, so it is kept from the base exactly and the outer
level is fitted given it; :attr:`Calibration.origins` records which, and the summary says so.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.calibration_levels import (
    LevelOrigin,
    fitted_indices,
    kept_indices,
    level_origins,
    spanned_levels,
)
from costmodel.collectives import collective_seconds
from costmodel.errors import CalibrationError
from costmodel.link import Link, Topology
from costmodel.measured import Group, compute_curve_terms, level_bus_bytes
from costmodel.nccl_tests import NcclTable

logger = logging.getLogger(__name__)

PARAMETERS = ("launch_s", "alpha_s", "pipeline_s", "bus_efficiency")
"""The per-level parameters a calibration fits (``beta_s_per_byte`` stays the base's)."""

UNITS = {"launch_s": "s", "alpha_s": "s", "pipeline_s": "s", "bus_efficiency": "1"}

BOUNDS: dict[str, tuple[float, float]] = {
    "launch_s": (1e-7, 1e-2),        # 0.1 µs .. 10 ms per collective
    "alpha_s": (1e-8, 1e-4),         # 10 ns .. 100 µs per hop
    "pipeline_s": (1e-8, 1e-2),      # 10 ns .. 10 ms pipeline fill
    "bus_efficiency": (0.05, 1.0),   # bus bandwidth never above the link rate
}
"""Physical bounds of the fitted parameters."""

START = {"launch_s": 1e-5, "alpha_s": 1e-6, "pipeline_s": 1e-5, "bus_efficiency": 0.8}
"""Starting values for parameters the base leaves at their alpha-beta default."""

PRIOR_WEIGHT = 0.05
LOSS_SCALE = 0.05  # soft_l1 switches from quadratic to linear near 5 % relative error


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    """One measured size against the model: the ``calibration.csv`` row."""

    table: str
    collective: str
    ranks: int
    nbytes: int
    measured_us: float
    predicted_us: float

    @property
    def ratio(self) -> float:
        return self.predicted_us / self.measured_us


@dataclass(frozen=True, slots=True)
class FittedParameter:
    """One fitted value, with the level it belongs to and where it started."""

    level: str
    link: str
    name: str
    value: float
    start: float
    unit: str

    @property
    def at_bound(self) -> bool:
        low, high = BOUNDS[self.name]
        return math.isclose(self.value, low, rel_tol=1e-2) or math.isclose(
            self.value, high, rel_tol=1e-2)


@dataclass(frozen=True, slots=True)
class Calibration:
    """A topology, the tables it was fitted on or checked against, and the comparison.

    A fit also records ``origins`` (per level: fitted, kept from the base, or crossed by no
    table, and by which tables) and the name of the ``base`` it started from.
    """

    topology: Topology
    tables: tuple[NcclTable, ...]
    rows: tuple[CalibrationRow, ...]
    fitted: tuple[FittedParameter, ...]
    notes: tuple[str, ...] = ()
    origins: tuple[LevelOrigin, ...] = ()
    base: str = ""

    def table_rows(self, name: str) -> tuple[CalibrationRow, ...]:
        return tuple(row for row in self.rows if row.table == name)


def group_for(table: NcclTable, topology: Topology) -> Group:
    """The level group ``table``'s ranks form on ``topology``: its GPUs per node on the
    innermost level, its nodes on the next.

    Raises:
        CalibrationError: more GPUs per node than the innermost level holds, or several nodes
            on a topology with one level.
    """
    levels = topology.levels
    inner = levels[0]
    if inner.devices is not None and table.gpus_per_node > inner.devices:
        raise CalibrationError(f"{table.name}: {table.gpus_per_node} GPUs per node, but a "
                               f"{inner.name!r} of {topology.name!r} holds {inner.devices}",
                               table=table.name)
    if table.nodes == 1:
        return ((table.ranks, inner.link),) if table.ranks > 1 else ()
    if len(levels) < 2:
        raise CalibrationError(f"{table.name}: {table.nodes} nodes, but {topology.name!r} has "
                               "a single level", table=table.name)
    outer = levels[1]
    if outer.devices is not None and inner.devices and outer.devices // inner.devices < \
            table.nodes:
        raise CalibrationError(f"{table.name}: {table.nodes} nodes do not fit in a "
                               f"{outer.name!r} of {topology.name!r}", table=table.name)
    group = ((table.gpus_per_node, inner.link), (table.nodes, outer.link))
    return tuple(level for level in group if level[0] > 1)


def check(topology: Topology, tables: Sequence[NcclTable]) -> Calibration:
    """Compare ``topology``'s prices with ``tables`` (no fitting).

    Raises:
        CalibrationError: no table, or a table's ranks do not fit the topology.
    """
    tables = _non_empty(tables)
    rows = []
    for table in tables:
        group = group_for(table, topology)
        seconds = collective_seconds(table.collective, np.array(table.nbytes, dtype=float),
                                     group)
        rows += [CalibrationRow(table=table.name, collective=table.collective.value,
                                ranks=table.ranks, nbytes=size, measured_us=measured,
                                predicted_us=float(predicted) * 1e6)
                 for size, measured, predicted in zip(table.nbytes, table.time_us, seconds,
                                                      strict=True)]
    return Calibration(topology=topology, tables=tables, rows=tuple(rows), fitted=())


def calibrate(base: Topology, tables: Sequence[NcclTable], name: str | None = None
              ) -> Calibration:
    """Fit the measured-curve parameters of the levels of ``base`` that ``tables`` determine;
    keep the others' exactly (see the module docstring).

    Raises:
        CalibrationError: no table, a table that does not fit ``base``, or a fit that fails.
    """
    from scipy.optimize import least_squares  # scipy.optimize is slow to import

    tables = _non_empty(tables)
    for table in tables:
        group_for(table, base)
    origins = level_origins(tables, len(base.levels))
    fitted_levels = list(fitted_indices(origins))
    keys = [(level, param) for level in fitted_levels for param in PARAMETERS]
    start = np.array([math.log(_start_value(base, level, param)) for level, param in keys])
    prior = np.array([_has_prior(base, level, param) for level, param in keys], dtype=float)
    low = np.log([BOUNDS[param][0] for _, param in keys])
    high = np.log([BOUNDS[param][1] for _, param in keys])
    data = [(np.array(t.nbytes, dtype=float), np.log(np.array(t.time_us) * 1e-6), t)
            for t in tables]

    def residuals(x: np.ndarray) -> np.ndarray:
        topology = _with_parameters(base, keys, np.exp(x))
        parts = []
        for nbytes, log_measured, table in data:
            terms = compute_curve_terms(table.collective, group_for(table, topology))
            parts.append(np.log(terms.seconds(nbytes)) - log_measured)
        parts.append(PRIOR_WEIGHT * prior * (x - start))
        return np.concatenate(parts)

    result = None
    for begin in _starts(base, keys, tables, origins, start):
        tried = least_squares(residuals, np.clip(begin, low, high), bounds=(low, high),
                              loss="soft_l1", f_scale=LOSS_SCALE, max_nfev=2000)
        if not tried.success:
            raise CalibrationError(f"the fit did not converge: {tried.message}")
        if result is None or tried.cost < result.cost:
            result = tried
    assert result is not None
    values = np.exp(result.x)
    topology = _with_parameters(base, keys, values)
    topology = dataclasses.replace(topology, name=name or f"{base.name}-calibrated")
    fitted = tuple(
        FittedParameter(level=base.levels[level].name, link=base.levels[level].link.name,
                        name=param, value=float(value), start=float(math.exp(begin)),
                        unit=UNITS[param])
        for (level, param), value, begin in zip(keys, values, start, strict=True))
    checked = check(topology, tables)
    return dataclasses.replace(checked, fitted=fitted, origins=origins, base=base.name,
                               notes=_identifiability(topology, tables, fitted_levels))


def _starts(base: Topology, keys: list[tuple[int, str]], tables: tuple[NcclTable, ...],
            origins: tuple[LevelOrigin, ...], start: np.ndarray) -> list[np.ndarray]:
    """The base's values and, when some level is kept and the result differs, the same with
    each fitted level's bus efficiency read off the slope of its tables' two largest sizes.

    Why: the bus rate is the max over levels of ``bus·beta/eff``; a kept level's term is a
    fixed floor under that max, and a fitted level that starts below it (an EFA network under
    the base's IB rate, behind the base's NVLink) sits where the max does not depend on it, so
    the fit never moves it. Starting it where the measured slope says it binds lets the fit
    find that; the lower cost wins, ties the base's start. Fits that keep no level start from
    the base alone, as the shipped presets were fitted.
    """
    if not kept_indices(origins):
        return [start]
    fitted_from = {origin.index: origin.tables for origin in origins}
    by_name = {table.name: table for table in tables}
    sloped = start.copy()
    for position, (level, param) in enumerate(keys):
        if param != "bus_efficiency":
            continue
        estimates = [_slope_efficiency(by_name[name], base, level)
                     for name in fitted_from.get(level, ())]
        estimates = [value for value in estimates if value is not None]
        if estimates:
            low, high = BOUNDS[param]
            sloped[position] = math.log(min(max(min(estimates), low), high * (1 - 1e-9)))
    return [start] if np.allclose(sloped, start, rtol=0, atol=1e-2) else [start, sloped]


def _slope_efficiency(table: NcclTable, base: Topology, level: int) -> float | None:
    """``bus·beta / c`` of ``level`` with ``c`` the time per byte between ``table``'s two
    largest sizes: the efficiency at which that level alone sets the large-message slope."""
    if len(table.nbytes) < 2 or table.nbytes[-1] <= table.nbytes[-2]:
        return None
    slope = (table.time_us[-1] - table.time_us[-2]) * 1e-6 / (table.nbytes[-1]
                                                               - table.nbytes[-2])
    if slope <= 0:
        return None
    group = group_for(table, base)
    position = spanned_levels(table).index(level)
    bus = level_bus_bytes(table.collective, tuple(size for size, _ in group))[position]
    return bus * group[position][1].beta_s_per_byte / slope


def _non_empty(tables: Sequence[NcclTable]) -> tuple[NcclTable, ...]:
    tables = tuple(tables)
    if not tables:
        raise CalibrationError("no nccl-tests table to compare with")
    return tables


def _start_value(base: Topology, level: int, param: str) -> float:
    value = float(getattr(base.levels[level].link, param))
    if not _has_prior(base, level, param):
        value = START[param]
    low, high = BOUNDS[param]
    return min(max(value, low), high * (1 - 1e-9) if param == "bus_efficiency" else high)


def _has_prior(base: Topology, level: int, param: str) -> bool:
    """The base says something about ``param`` (a set curve field, or any alpha)."""
    link = base.levels[level].link
    if param == "alpha_s":
        return link.alpha_s > 0
    return not link.is_alpha_beta


def _with_parameters(base: Topology, keys: list[tuple[int, str]], values: np.ndarray
                     ) -> Topology:
    """``base`` with the fitted values written into its levels' links."""
    changes: dict[int, dict[str, float]] = {}
    for (level, param), value in zip(keys, values, strict=True):
        changes.setdefault(level, {})[param] = float(value)
    levels = list(base.levels)
    for level, fields in changes.items():
        fields["bus_efficiency"] = min(fields.get("bus_efficiency", 1.0), 1.0)
        link: Link = dataclasses.replace(levels[level].link, **fields)
        levels[level] = dataclasses.replace(levels[level], link=link)
    return dataclasses.replace(base, levels=tuple(levels))


def _identifiability(topology: Topology, tables: tuple[NcclTable, ...],
                     fitted_levels: list[int]) -> tuple[str, ...]:
    """Say which fitted parameters the tables could not pin, instead of implying they did."""
    notes = []
    binding = {_binding_link(table, topology) for table in tables}
    for level in fitted_levels:
        link = topology.levels[level].link
        if link not in binding:
            notes.append(f"bus_efficiency of level {topology.levels[level].name!r} "
                         f"({link.name or 'unnamed'}) is not constrained: another level bounds "
                         "the bandwidth on every table, so it stays near its starting value")
    return tuple(notes)


def _binding_link(table: NcclTable, topology: Topology) -> Link:
    """The level link whose bandwidth sets ``table``'s large-message time (the max in c)."""
    group = group_for(table, topology)
    buses = level_bus_bytes(table.collective, tuple(size for size, _ in group))
    costs = [bus * link.beta_s_per_byte / link.bus_efficiency
             for bus, (_, link) in zip(buses, group, strict=True)]
    return group[int(np.argmax(costs))][1]
