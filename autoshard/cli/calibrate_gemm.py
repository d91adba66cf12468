"""The matmul half of ``autoshard calibrate``: ``--matmul TABLE`` fits the GEMM kernel model.

Why a module of its own: the collective half (nccl-tests tables) and this one share only the
command line; here the tables are matmul benchmark CSVs (:mod:`costmodel.matmul_table`), the
fit is :func:`costmodel.calibrate_gemm` (``gemm_efficiency``, ``gemm_k_overhead``,
``launch_s`` of the base device's ``[device.kernels]``; SM count, tile and peaks kept) and the
report is ``calibration-gemm.csv`` (table, batch, m, n, k, dtype, measured_us, predicted_us,
ratio) plus the printed summary (:mod:`costmodel.gemm_report`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from costmodel import (
    GemmCalibration,
    MatmulTable,
    Topology,
    calibrate_gemm,
    check_gemm,
    read_matmul_table,
)
from costmodel.calibrate_gemm import BOUNDS

GEMM_CSV_NAME = "calibration-gemm.csv"


def read_matmul_tables(paths: Sequence[Path]) -> tuple[MatmulTable, ...]:
    """Every ``--matmul`` table, parsed (a bad one raises ``MatmulTableError`` naming it)."""
    return tuple(read_matmul_table(path) for path in paths)


def fit_gemm(topology: Topology, tables: Sequence[MatmulTable]
             ) -> tuple[Topology, GemmCalibration]:
    """``topology`` with its device's GEMM terms fitted to ``tables``, and the fit's report.

    Raises:
        CalibrationError: a device without kernel parameters, an unknown dtype, no rows.
    """
    result = calibrate_gemm(topology.device, tables)
    return dataclasses.replace(topology, device=result.device), result


def check_gemm_tables(topology: Topology, tables: Sequence[MatmulTable]) -> GemmCalibration:
    """``topology``'s GEMM prices against ``tables`` (nothing fitted)."""
    return check_gemm(topology.device, tables)


def gemm_toml_header(tables: Sequence[MatmulTable]) -> str:
    """Comment lines naming the matmul tables the kernel terms were fitted on."""
    lines = ["# [device.kernels] gemm_efficiency, gemm_k_overhead and launch fitted to these "
             "matmul tables (bounds: "
             + ", ".join(f"{key} {low:g}..{high:g}" for key, (low, high) in BOUNDS.items())
             + ")"]
    lines += [f"#   {table.name}: {len(table.rows)} products" for table in tables]
    return "\n".join(lines) + "\n"
