"""``autoshard bench kernels``: what it writes, and what the measured H100 table says.

Oracle: OpenXLA's measured sm_90 matmul times (not produced by this code). The kernel model
must explain unseen rows (fit on the even rows, priced on the odd ones) far better than the
flat roofline explains any of them.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from autoshard.bench import kernels


def test_bench_writes_its_tables_and_the_kernel_model_beats_the_flat_roofline(
        tmp_path: Path) -> None:
    written = kernels.run(tmp_path)
    assert sorted(p.name for p in written) == [
        "kernels.csv", "kernels.txt", "kernels_mamf.csv", "kernels_summary.csv"]
    summary = pd.read_csv(tmp_path / "kernels_summary.csv", comment="#").set_index("study")
    assert summary.loc["holdout", "rows"] == 52 and summary.loc["flat", "rows"] == 105
    assert summary.loc["holdout", "median_error_pct"] < 5.0
    assert summary.loc["flat", "median_error_pct"] > 5 * summary.loc["holdout",
                                                                     "median_error_pct"]
    mamf = pd.read_csv(tmp_path / "kernels_mamf.csv", comment="#")
    assert ((mamf.ratio - 1).abs() < 0.01).all()
    assert "gemm_efficiency" in (tmp_path / "kernels.txt").read_text()
