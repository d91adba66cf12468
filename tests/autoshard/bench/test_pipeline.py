"""``autoshard bench pipeline --quick`` runs its jobs end to end and writes its CSV."""

from __future__ import annotations

import pandas as pd

from autoshard.bench.pipeline import RECIPE, run


def test_quick_bench_writes_one_row_per_job(tmp_path) -> None:
    [path] = run(tmp_path, quick=True)
    text = path.read_text()
    assert text.startswith("# command:") and f"# recipe: {RECIPE}" in text
    frame = pd.read_csv(path, comment="#")
    assert list(frame["job"]) == ["quick-pp2", "quick-recipe"]
    assert (frame["exit"] == 0).all()
    assert set(frame["schedule"]) <= {"gpipe", "1f1b", "interleaved", "zb-h1"}
    assert (frame["peak_gib"] <= frame["limit_gib"]).all()
