"""The GEMM calibration as text: ``calibration-gemm.csv`` and the printed summary.

Why a module of its own: :mod:`costmodel.calibrate_gemm` computes, this one only formats, so
the CLI and Python users print the same thing.
"""

from __future__ import annotations

import math

import numpy as np

from costmodel.calibrate_gemm import BOUNDS, GemmCalibration

UNITS = {"gemm_efficiency": "of peak", "gemm_k_overhead": "K elements per tile",
         "launch_s": "s per kernel"}


def gemm_csv(result: GemmCalibration) -> str:
    """One line per measured product: table, shape, dtype, measured and predicted µs, ratio.

    Example:
        >>> from costmodel import check_gemm, get_preset, parse_matmul_table
        >>> table = parse_matmul_table("m,n,k,dtype,tflops\\n4096,4096,4096,bf16,783\\n", "t")
        >>> print(gemm_csv(check_gemm(get_preset("dgx-h100").device, [table])), end="")
        table,batch,m,n,k,dtype,measured_us,predicted_us,ratio
        t,1,4096,4096,4096,bf16,175.529,176.100,1.0033
    """
    lines = ["table,batch,m,n,k,dtype,measured_us,predicted_us,ratio"]
    lines += [f"{row.table},{row.batch},{row.m},{row.n},{row.k},{row.dtype},"
              f"{row.measured_us:.3f},{row.predicted_us:.3f},{row.ratio:.4f}"
              for row in result.rows]
    return "\n".join(lines) + "\n"


def gemm_summary(result: GemmCalibration) -> str:
    """Fitted values (with a note when one sits on its bound) and the error over the rows."""
    errors = np.array([abs(math.log(row.ratio)) for row in result.rows])
    lines = [f"GEMM model on {len(result.rows)} measured products: median error "
             f"{(math.exp(np.median(errors)) - 1) * 100:.1f} %, worst "
             f"{(math.exp(errors.max()) - 1) * 100:.1f} %"]
    for name, value in result.fitted:
        low, high = BOUNDS[name]
        bound = " (at its bound: the table does not pin it)" if any(
            math.isclose(value, b, rel_tol=1e-3, abs_tol=1e-9) for b in (low, high)) else ""
        lines.append(f"  {name} = {value:.4g} {UNITS[name]}{bound}")
    return "\n".join(lines) + "\n"
