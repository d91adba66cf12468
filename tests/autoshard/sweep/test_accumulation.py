"""A training sweep that gives --micro-batch runs every point in micro-batches of it, so
pipelined and unpipelined meshes are compared at the same global batch and micro-batch."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import graphs
from autoshard import plan
from autoshard.cli.app import main
from autoshard.sweep.points import SweepSpec, enumerate_points
from autoshard.sweep.runner import SWEEP_GAP
from autoshard.sweep.study import PlanFiles, sweep


def test_unpipelined_points_split_the_global_batch_per_data_replica() -> None:
    spec = SweepSpec(model="gpt2", devices=(8,), batches=(32,), training=True,
                     pipeline=(2,), micro_batch_sizes=(2, 8), accumulate=True)
    by_id = {(p.mesh_text, p.micro_batch): p.micro_batches() for p in enumerate_points(spec)}
    # (graph batch, micro-batches), by hand: graph = size x (dp x fsdp), steps = 32 / graph
    assert by_id[("dp=8", 2)] == (16, 2)
    assert by_id[("dp=2,tp=4", 2)] == (4, 8)
    assert by_id[("dp=2,fsdp=2,tp=2", 2)] == (8, 4)
    assert by_id[("dp=4,pp=2", 2)] == (8, 4)  # pipelined: the axes before pp, as before
    assert ("dp=8", 8) not in by_id  # 8 replicas x 8 samples is more than 32: left out
    assert by_id[("dp=4,tp=2", 8)] == (32, 1)


def test_without_micro_batch_the_unpipelined_points_are_unchanged() -> None:
    spec = SweepSpec(model="gpt2", devices=(8,), batches=(32,), training=True, pipeline=(2,))
    plain = [p for p in enumerate_points(spec) if not p.pipelined]
    assert plain and all(p.micro_batch is None and "_mb" not in p.point_id for p in plain)


def test_an_accumulating_point_is_plan_with_its_micro_batches(tmp_path: Path) -> None:
    spec = SweepSpec(model="gpt2", devices=(4,), max_axes=2, batches=(16,), seqs=(64,),
                     training=True, overrides=(("layers", 2),), pipeline=(),
                     micro_batch_sizes=(2,), accumulate=True)
    rows = {r["mesh"]: r for r in sweep(spec, tmp_path, plans=PlanFiles.NONE).rows}
    assert set(rows) == {"dp=4", "dp=2,tp=2"}
    for mesh, replicas in (("dp=4", 4), ("dp=2,tp=2", 2)):
        row = rows[mesh]
        steps = 16 // (2 * replicas)  # global batch / (micro-batch x replicas)
        assert int(row["micro_batches"]) == steps and int(row["batch"]) == 16
        graph = graphs.zoo.build("gpt2", layers=2, batch=2 * replicas, seq=64)
        expected = plan(graph, mesh, training=True, micro_batches=steps, gap=SWEEP_GAP)
        assert float(row["total_s"]) == pytest.approx(expected.objective.total_s, rel=1e-3)
        assert float(row["tokens_per_s"]) == pytest.approx(16 * 64 / float(row["total_s"]))
    # the same study at the whole batch at once holds more activations per device
    whole = sweep(SweepSpec(model="gpt2", devices=(4,), max_axes=1, batches=(16,), seqs=(64,),
                            training=True, overrides=(("layers", 2),), pipeline=()),
                  tmp_path / "whole", plans=PlanFiles.NONE).rows[0]
    assert float(whole["peak_bytes_per_device"]) > float(rows["dp=4"]["peak_bytes_per_device"])
    assert not math.isnan(float(whole["total_s"])) and whole["micro_batch"] == ""


def test_micro_batch_is_refused_for_inference(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["sweep", "--model", "gpt2", "--devices", "8",
                                      "--micro-batch", "2", "--out", str(tmp_path / "s")])
    assert result.exit_code != 0
    assert "--micro-batch applies to --training sweeps only" in result.output
    assert not (tmp_path / "s").exists()
