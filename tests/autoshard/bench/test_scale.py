"""``autoshard bench scale``: the job list, the exponent fit and one tiny end-to-end run."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from autoshard.bench import scale
from autoshard.bench.runner import BENCHMARKS
from autoshard.planning import planner
from autoshard.planning.layers import repeated_blocks


def test_exponent_is_the_log_log_slope() -> None:
    # wall = 3 · layers^1.5 exactly, and a second mesh growing linearly
    frame = pd.DataFrame({"series": [True] * 6 + [False], "mesh": ["a"] * 3 + ["b"] * 3 + ["a"],
                          "layers": [1, 2, 8, 1, 4, 16, 32],
                          "wall_s": [3.0, 3 * 2**1.5, 3 * 8**1.5, 0.5, 2.0, 8.0, 1e6]})
    slopes = scale.layer_exponents(frame)
    assert slopes["a"] == pytest.approx(1.5, abs=1e-3)
    assert slopes["b"] == pytest.approx(1.0, abs=1e-3)


def test_full_job_list_covers_the_issue() -> None:
    names = [job.name for job in scale.jobs(quick=False)]
    assert "gpt2 layers=12 dp=2,tp=4 training" in names
    assert "llama3-8b layers=32 dp=8,tp=8 training" in names
    assert "llama3-70b dp=8,tp=8 training" in names
    assert "llama3.1-405b dp=8,fsdp=8,tp=8 training" in names
    assert "mixtral-8x7b dp=2,ep=4,tp=8 training" in names
    for mesh in ("dp=8", "dp=2,tp=4", "dp=8,tp=8", "dp=4,fsdp=4,tp=4"):
        for layers in (1, 2, 4, 8):
            assert f"llama3-8b layers={layers} {mesh} training" in names
    for layers in (16, 32, 80):
        assert f"llama3-8b layers={layers} dp=8,tp=8 training" in names
    assert len(names) == len(set(names))
    assert all(job.time_limit_s > 0 for job in scale.jobs(quick=True))
    assert BENCHMARKS["scale"] == "autoshard.bench.scale"


def test_one_job_reports_a_certified_plan_and_restores_the_solver() -> None:
    job = scale.Job(model="gpt2", mesh="dp=2", layers=1, training=False, time_limit_s=60.0)
    row = scale.run_job(job)
    assert row["status"] == "optimal" and row["gap"] == 0.0
    assert row["bound_s"] == pytest.approx(row["objective_s"], rel=1e-6)
    phases = sum(row[f"{p}_s"] for p in ("graph", "enumerate", "cost", "solve", "decode"))
    assert phases == pytest.approx(row["wall_s"], rel=1e-6)
    assert row["nodes_after"] <= row["nodes_before"] == row["ops"]
    assert row["options_after"] <= row["options_before"]
    assert 0 < row["rss_graph_mb"] <= row["rss_cost_mb"] <= row["rss_peak_mb"]
    baseline = scale.run_job(scale.Job(model="gpt2", mesh="dp=2", layers=1, training=False,
                                       baseline=True))
    assert baseline["objective_s"] == pytest.approx(row["objective_s"], rel=1e-9)
    assert planner.repeated_blocks is repeated_blocks


def test_run_writes_csv_with_exponent_and_plot(tmp_path, monkeypatch) -> None:
    tiny = [scale.Job(model="gpt2", mesh="dp=2", layers=n, training=False, series=True,
                      time_limit_s=60.0) for n in (1, 2)]
    monkeypatch.setattr(scale, "jobs", lambda quick: tiny)
    csv_path, png_path = scale.run(tmp_path, quick=True)
    text = csv_path.read_text()
    assert text.startswith("# command: ")
    assert "# wall time vs layers" in text
    frame = pd.read_csv(csv_path, comment="#")
    assert list(frame["layers"]) == [1, 2]
    assert (frame["runs"] == 1).all() and (frame["status"] == "optimal").all()
    assert not math.isnan(frame["layers_exponent"].iloc[0])
    assert png_path.stat().st_size > 1000
