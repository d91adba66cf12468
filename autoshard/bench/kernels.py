"""``autoshard bench kernels``: the compute models against measured H100 matmuls.

Studies on OpenXLA's measured sm_90 bf16 table (``costmodel/data/gemm/xla-sm90-bf16.csv``, 105
products): ``flat`` prices every product with the flat roofline (dgx-h100 without kernel
parameters: what the planner priced before the kernel model); ``preset`` with the dgx-h100
kernel model as shipped (its GEMM terms were fitted on this very table: an in-sample number);
``holdout`` fits the terms on the even rows and prices the odd rows it never saw (the
out-of-sample error); ``fit`` refits on the whole table (must give the preset's terms back).
``mamf`` prices the maximum-achievable-matmul-FLOPS shapes stas00/ml-engineering measured
(H100 not fitted on; A100's ceiling set from it). Writes ``kernels.csv`` (every product and
study), ``kernels_summary.csv`` (one row per study) and ``kernels.txt`` (fitted values), each
stating the command, commit and machine.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from autoshard.provenance import header_lines, write_csv
from costmodel import (
    DeviceSpec,
    Gemm,
    GemmCalibration,
    MatmulTable,
    calibrate_gemm,
    check_gemm,
    get_preset,
    kernel_seconds,
    read_matmul_table,
)
from costmodel.calibrate_gemm import GemmRow
from costmodel.gemm_report import gemm_summary

logger = logging.getLogger(__name__)

TABLE = "xla-sm90-bf16.csv"
# stas00/ml-engineering compute/accelerator/README.md at 7bc7c3054eb93c277a4755c597ae0864d77a63f1:
# preset, (m, n, k) of the best shape, measured bf16 TFLOP/s
MAMF = (("dgx-h100", (2048, 2048, 13312), 794.5), ("dgx-a100", (1024, 10240, 5120), 271.2))


def shipped_table() -> MatmulTable:
    return read_matmul_table(Path(str(resources.files("costmodel") / "data" / "gemm" / TABLE)))


def studies() -> list[tuple[str, GemmCalibration]]:
    """(study, the table priced by that study's device) in the module docstring's order."""
    table = shipped_table()
    h100 = get_preset("dgx-h100").device
    flat = dataclasses.replace(h100, kernels=None)
    even = dataclasses.replace(table, rows=table.rows[0::2], name=f"{TABLE} (even rows)")
    odd = dataclasses.replace(table, rows=table.rows[1::2], name=f"{TABLE} (odd rows)")
    held = calibrate_gemm(h100, [even])
    return [("flat", _flat(flat, table)), ("preset", check_gemm(h100, [table])),
            ("holdout", dataclasses.replace(check_gemm(held.device, [odd]),
                                            fitted=held.fitted)),
            ("fit", calibrate_gemm(h100, [table]))]


def _flat(device: DeviceSpec, table: MatmulTable) -> GemmCalibration:
    """The flat roofline's prices: check_gemm needs kernel parameters, so price directly."""
    rows = []
    for row in table.rows:
        g = row.gemm
        nbytes = 2.0 * g.batch * (g.m * g.k + g.k * g.n + g.m * g.n)
        seconds = kernel_seconds(g, float(g.flops), nbytes, row.dtype, device)
        rows.append(GemmRow(table=table.name, batch=g.batch, m=g.m, n=g.n, k=g.k,
                            dtype=row.dtype, measured_us=row.seconds * 1e6,
                            predicted_us=seconds * 1e6))
    return GemmCalibration(device=device, rows=tuple(rows))


def mamf_rows() -> list[dict[str, object]]:
    out = []
    for preset, (m, n, k), measured in MAMF:
        gemm = Gemm(m=m, n=n, k=k)
        seconds = kernel_seconds(gemm, float(gemm.flops), 2.0 * (m * k + k * n + m * n),
                                 "bf16", get_preset(preset).device)
        predicted = gemm.flops / seconds / 1e12
        out.append({"preset": preset, "m": m, "n": n, "k": k, "measured_tflops": measured,
                    "predicted_tflops": round(predicted, 2),
                    "ratio": round(predicted / measured, 4)})
    return out


def _summary(study: str, result: GemmCalibration) -> dict[str, object]:
    ratios = np.array([row.ratio for row in result.rows])
    errors = np.abs(np.log(ratios))
    return {"study": study, "rows": len(ratios), "median_ratio": round(float(np.median(ratios)), 4),
            "median_error_pct": round((math.exp(float(np.median(errors))) - 1) * 100, 2),
            "p90_error_pct": round((math.exp(float(np.quantile(errors, 0.9))) - 1) * 100, 2),
            "worst_error_pct": round((math.exp(float(errors.max())) - 1) * 100, 2)}


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    """Write kernels.csv, kernels_summary.csv, kernels_mamf.csv and kernels.txt."""
    results = studies()
    rows = [{"study": study, "batch": r.batch, "m": r.m, "n": r.n, "k": r.k, "dtype": r.dtype,
             "measured_us": r.measured_us, "predicted_us": round(r.predicted_us, 4),
             "ratio": round(r.ratio, 5)} for study, result in results for r in result.rows]
    out_dir = Path(out_dir)
    written = [_csv(out_dir / "kernels.csv", rows),
               _csv(out_dir / "kernels_summary.csv", [_summary(s, r) for s, r in results]),
               _csv(out_dir / "kernels_mamf.csv", mamf_rows())]
    text = out_dir / "kernels.txt"
    text.write_text("\n".join(header_lines()) + "\n\n" + "\n".join(
        f"== {study}\n{gemm_summary(result)}" for study, result in results if result.fitted))
    return [*written, text]


def _csv(path: Path, rows: list[dict[str, object]]) -> Path:
    return write_csv(path, pd.DataFrame(rows))
