"""Fit the GEMM model of :mod:`costmodel.gemm` to a matmul benchmark table, or check it.

Why: the ceiling (``gemm_efficiency``), the small-K penalty (``gemm_k_overhead``) and the
per-kernel launch cost (``launch_s``) are what a machine and its BLAS make of the tile/wave
structure; a table of measured products (:mod:`costmodel.matmul_table`) pins them. The SM
count and the peak stay the base's (vendor facts), as link rates stay fixed in
:mod:`costmodel.calibrate`. The tile shape stays the base's too: a table of power-of-two
shapes cannot tell the tiles apart (on the shipped H100 table every tile of the guide from
64×64 to 256×128 fits within 2.4-4.1 % median error).

The fit: each row's residual is ``log(predicted / measured)`` (times span decades, so errors
are relative), minimised by ``scipy.optimize.least_squares`` with a ``soft_l1`` loss (a
shape the closed form cannot follow, e.g. one where cuBLAS picks a split-K kernel, weighs
linearly, not quadratically) over log(efficiency), k_overhead / 1000 and log(launch), each
bounded to :data:`BOUNDS`. Rows whose memory traffic would bound the product are priced with
the base's HBM terms as the model does; a table of only small products pins the floor, one of
only big ones the ceiling.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from costmodel.compute import KNOWN_DTYPES, kernel_seconds, peak_flops
from costmodel.errors import CalibrationError
from costmodel.kernel_params import KernelParams
from costmodel.link import DeviceSpec
from costmodel.matmul_table import MatmulRow, MatmulTable

PARAMETERS = ("gemm_efficiency", "gemm_k_overhead", "launch_s")
BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_efficiency": (0.05, 1.0),     # fraction of the dense peak
    "gemm_k_overhead": (0.0, 4096.0),   # K elements of fixed cost per tile
    "launch_s": (1e-7, 1e-3),           # 0.1 µs .. 1 ms per kernel
}
START = {"gemm_efficiency": 0.8, "gemm_k_overhead": 64.0, "launch_s": 4e-6}

LOSS_SCALE = 0.05


@dataclass(frozen=True, slots=True)
class GemmRow:
    """One measured product against the model: the ``calibration-gemm.csv`` row."""

    table: str
    batch: int
    m: int
    n: int
    k: int
    dtype: str
    measured_us: float
    predicted_us: float

    @property
    def ratio(self) -> float:
        return self.predicted_us / self.measured_us


@dataclass(frozen=True, slots=True)
class GemmCalibration:
    """The (fitted or checked) device, the rows compared, and the fitted values by name."""

    device: DeviceSpec
    rows: tuple[GemmRow, ...]
    fitted: tuple[tuple[str, float], ...] = ()

    @property
    def median_abs_log_error(self) -> float:
        return float(np.median([abs(math.log(row.ratio)) for row in self.rows]))


def _bytes(row: MatmulRow, itemsize: int) -> float:
    g = row.gemm
    return float(g.batch * (g.m * g.k + g.k * g.n + g.m * g.n) * itemsize)


# a measured rate may exceed the vendor's peak by this much (boost clocks, timer rounding)
PEAK_SLACK = 0.05
_ITEMSIZE = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "f8e4m3": 1, "f8e5m2": 1, "int8": 1}


def _entries(tables: Sequence[MatmulTable]) -> list[tuple[str, MatmulRow]]:
    entries = [(table.name, row) for table in tables for row in table.rows]
    if not entries:
        raise CalibrationError("no matmul table rows to compare with")
    return entries


def _require_kernels(device: DeviceSpec) -> KernelParams:
    if device.kernels is None:
        raise CalibrationError(f"device {device.name!r} has no kernel-model parameters "
                               "(sm_count, gemm_tile): start from a preset that has them "
                               "(dgx-h100, dgx-a100) or add [device.kernels] to the TOML")
    return device.kernels


def check_gemm(device: DeviceSpec, tables: Sequence[MatmulTable]) -> GemmCalibration:
    """Compare ``device``'s GEMM prices with the tables (no fitting).

    Raises:
        CalibrationError: no rows, or a device without kernel parameters.
    """
    _require_kernels(device)
    rows = []
    for name, row in _entries(tables):
        seconds = kernel_seconds(row.gemm, float(row.gemm.flops),
                                 _bytes(row, _ITEMSIZE.get(row.dtype, 2)), row.dtype, device)
        g = row.gemm
        rows.append(GemmRow(table=name, batch=g.batch, m=g.m, n=g.n, k=g.k, dtype=row.dtype,
                            measured_us=row.seconds * 1e6, predicted_us=seconds * 1e6))
    return GemmCalibration(device=device, rows=tuple(rows))


def _with(device: DeviceSpec, values: dict[str, float],
          tile: tuple[int, int] | None = None) -> DeviceSpec:
    params = _require_kernels(device)
    kernels = dataclasses.replace(params, gemm_efficiency=min(values["gemm_efficiency"], 1.0),
                                  gemm_k_overhead=max(values["gemm_k_overhead"], 0.0),
                                  launch_s=values["launch_s"],
                                  gemm_tile=tile or params.gemm_tile)
    return dataclasses.replace(device, kernels=kernels)


def _to_x(values: dict[str, float]) -> np.ndarray:
    return np.array([math.log(values["gemm_efficiency"]), values["gemm_k_overhead"] / 1e3,
                     math.log(values["launch_s"])])


def _from_x(x: np.ndarray) -> dict[str, float]:
    return {"gemm_efficiency": float(math.exp(x[0])), "gemm_k_overhead": float(x[1] * 1e3),
            "launch_s": float(math.exp(x[2]))}


def calibrate_gemm(base: DeviceSpec, tables: Sequence[MatmulTable]) -> GemmCalibration:
    """Fit ``gemm_efficiency``, ``gemm_k_overhead`` and ``launch_s`` of ``base`` (its SM
    count, tile and peaks kept).

    Raises:
        CalibrationError: no rows, a base without kernel parameters, an unknown dtype, or a
            fit that does not converge.
    """
    entries = _entries(tables)
    params = _require_kernels(base)
    for name, row in entries:
        _check_row(name, row, base)
    return _fit_tile(base, tables, entries, params.gemm_tile)


def _check_row(name: str, row: MatmulRow, base: DeviceSpec) -> None:
    """A row no kernel on ``base`` can have measured: a dtype with no name we know (its peak
    would be a silent fallback to f32's), or a rate above the device's peak for the dtype
    (wrong units, or the wrong --base): refused rather than fitted into the TOML."""
    if row.dtype not in KNOWN_DTYPES:
        raise CalibrationError(f"{name}: dtype {row.dtype!r} is not one of "
                               f"{', '.join(KNOWN_DTYPES)}", table=name)
    try:
        peak = peak_flops(row.dtype, base)
    except ValueError as exc:
        raise CalibrationError(f"{name}: {exc}", table=name) from None
    rate = float(row.gemm.flops) / row.seconds
    if rate > peak * (1 + PEAK_SLACK):
        g = row.gemm
        raise CalibrationError(
            f"{name}: the {g.m}x{g.n}x{g.k} {row.dtype} row measures {rate / 1e12:,.0f} "
            f"TFLOP/s, above {base.name}'s {row.dtype} peak of {peak / 1e12:,.0f}; check the "
            "units (seconds, us or TFLOP/s as the header says) or pass the measured device "
            "as --base", table=name)


def _fit_tile(base: DeviceSpec, tables: Sequence[MatmulTable],
              entries: list[tuple[str, MatmulRow]], tile: tuple[int, int]) -> GemmCalibration:
    from scipy.optimize import least_squares  # slow to import

    measured = np.log([row.seconds for _, row in entries])
    low = _to_x({key: bound[0] for key, bound in BOUNDS.items()} | {"gemm_k_overhead": 0.0})
    high = _to_x({key: bound[1] for key, bound in BOUNDS.items()})

    def residuals(x: np.ndarray) -> np.ndarray:
        device = _with(base, _from_x(x), tile)
        predicted = [kernel_seconds(row.gemm, float(row.gemm.flops),
                                    _bytes(row, _ITEMSIZE.get(row.dtype, 2)), row.dtype,
                                    device) for _, row in entries]
        return np.log(predicted) - measured

    result = least_squares(residuals, np.clip(_to_x(START), low, high), bounds=(low, high),
                           loss="soft_l1", f_scale=LOSS_SCALE, max_nfev=2000,
                           diff_step=1e-3)
    if not result.success:
        raise CalibrationError(f"the GEMM fit did not converge: {result.message}")
    values = _from_x(result.x)
    checked = check_gemm(_with(base, values, tile), tables)
    return dataclasses.replace(checked, fitted=tuple((key, values[key]) for key in PARAMETERS))
