"""``autoshard bench calibration``: registered, and its quick run writes what it says, with the
targets met on the shipped tables (measured data, not our output)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from autoshard.bench import calibration
from autoshard.bench.runner import BENCHMARKS, run_benchmark


def test_quick_run_writes_csvs_and_plots_with_provenance(tmp_path: Path) -> None:
    assert BENCHMARKS["calibration"] == "autoshard.bench.calibration"
    written = run_benchmark("calibration", tmp_path, quick=True)
    names = sorted(path.name for path in written)
    assert names == ["calibration.csv", "calibration.txt", "calibration_fit.png",
                     "calibration_preset.png", "calibration_summary.csv",
                     "calibration_textbook.png"]
    for name in ("calibration.csv", "calibration_summary.csv", "calibration.txt"):
        head = (tmp_path / name).read_text().splitlines()[:3]
        assert head[0].startswith("# command: ") and head[2].startswith("# machine: ")
    summary = pd.read_csv(tmp_path / "calibration_summary.csv", comment="#")
    assert set(summary["study"]) == {"preset", "textbook", "fit"}
    assert summary.loc[summary["study"] != "textbook", "target_met"].astype(bool).all()
    # the textbook alpha-beta links are the "before": far too optimistic on every table
    assert (summary.loc[summary["study"] == "textbook", "median_ratio"] < 0.5).all()
    rows = pd.read_csv(tmp_path / "calibration.csv", comment="#")
    assert len(rows) == 3 * (24 + 31 + 29)


def test_every_shipped_table_has_a_matching_preset() -> None:
    tables = calibration.shipped_tables()
    assert [t.ranks for t in tables] == [8, 16, 16]
    assert [preset for _, _, preset in calibration.TABLES] == ["dgx-a100", "dgx-a100",
                                                                "aws-p4d"]
