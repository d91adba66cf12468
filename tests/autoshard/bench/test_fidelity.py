"""``autoshard bench fidelity``: the measured-runs file, the job for a row, the verdict's
statistics and one ``--quick`` run. These check the machinery, not the issue's targets (the
full run's numbers are in results/README.md)."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pandas as pd
import pytest

import autoshard
from autoshard.bench import fidelity
from autoshard.bench.fidelity_models import model_config, model_key
from autoshard.bench.fidelity_report import median_error, spearman_by_group
from autoshard.bench.fidelity_rows import UNITS, read_measured
from autoshard.bench.fidelity_setup import Job, job_for
from autoshard.bench.runner import BENCHMARKS
from autoshard.errors import UsageError
from autoshard.sharding.mesh import Mesh
from costmodel import get_preset, with_attention_kernel
from graphs import zoo

SHIPPED = Path(__file__).resolve().parents[3] / "results" / "fidelity" / "measured.csv"
_AT_COMMIT = re.compile(r"^https://github\.com/[^/]+/[^/]+/blob/[0-9a-f]{40}/\S+$")


def _rows() -> dict:
    return {row.row_id: row for row in read_measured(SHIPPED)}


def test_shipped_file_names_a_source_at_a_commit_for_every_row() -> None:
    rows = read_measured(SHIPPED)
    assert len(rows) >= 200
    for row in rows:
        assert _AT_COMMIT.match(row.source), row.row_id
        assert row.table and row.unit in UNITS and row.measured > 0, row.row_id
    assert BENCHMARKS["fidelity"] == "autoshard.bench.fidelity"


def test_mpt_graphs_have_llm_foundrys_published_parameter_counts() -> None:
    # NumParams is printed in every llm-foundry row; it depends on seq (learned positions)
    checked = 0
    for row in read_measured(SHIPPED):
        if row.source_id == "llm-foundry-2401":
            key = model_key(row.model)
            assert key is not None
            config = model_config(key, seq=row.seq, batch=1)
            assert zoo.param_count(config) == row.params, row.row_id
            checked += 1
    assert checked == 216


@pytest.mark.parametrize(("edit", "message"), [
    (lambda text: text.replace("row_id,", "id,", 1), "lacks the column"),
    (lambda text: text + text.splitlines()[1] + "\n", "appears twice"),
    (lambda text: text.replace(",8192,", ",8k,", 1), "not a whole number"),
    (lambda text: text.replace("tokens/s/GPU", "samples/s", 1), "unit among"),
])
def test_malformed_files_name_the_culprit(tmp_path, edit, message) -> None:
    path = tmp_path / "measured.csv"
    path.write_text(edit(SHIPPED.read_text()))
    with pytest.raises(UsageError, match=message):
        read_measured(path)
    with pytest.raises(UsageError, match="does not exist"):
        read_measured(tmp_path / "absent.csv")


def test_jobs_and_skip_reasons_follow_the_published_setup() -> None:
    rows = _rows()
    job = job_for(rows["llmfoundry-a10080gb-ampbf16-mpt125m-s2048-g8-mb40"])
    # 8 GPUs FULL_SHARD, micro batch 40, global 640: graph batch 40·8, two micro-batches
    assert isinstance(job, Job)
    assert (job.model, job.mesh, job.strategy, job.topology) == \
        ("mpt-125m", "fsdp=8", "fsdp", "dgx-a100")
    assert (job.graph_batch, job.micro_batches, job.recompute) == (320, 2, "none")
    # llm-foundry's benchmark runs used attn_impl triton; torchtitan calls SDPA (FA2)
    assert job.attention_kernel == "triton"
    tp_job = job_for(rows["tt2506-8b-bf16-vanilla"])  # FSDP 8 × TP 8 with SP norms
    assert isinstance(tp_job, Job)
    assert (tp_job.mesh, tp_job.strategy, tp_job.graph_batch, tp_job.micro_batches) == \
        ("fsdp=8,tp=8", "megatron-sp", 96, 1)
    assert tp_job.attention_kernel == "fa2"
    assert "fp8" in job_for(rows["tt2412-t5-1f1b"])  # fp8 first; pp is checked last
    assert "fp8" in job_for(rows["tt2412-t1-float8"])
    assert "async TP" in job_for(rows["tt2506-8b-bf16-async"])
    assert "TFLOP/s/GPU is not compared" in job_for(rows["megatronlm-gpt-1.7b"])
    assert "precision not stated" in job_for(rows["mbridge2509-llama3-8b-8"])
    forty = job_for(next(r for r in rows.values() if r.gpu == "a100_40gb"))
    assert isinstance(forty, Job) and forty.topology == "dgx-a100-40gb"


def test_pipelined_and_context_parallel_rows_say_what_the_bench_lacks() -> None:
    rows = _rows()
    # a pipelined row without fp8 or async TP would reach the stage check
    piped = dataclasses.replace(rows["tt2412-t5-1f1b"], precision="bf16",
                                features=("torch.compile", "sequence-parallel"))
    assert "pipeline parallelism (PP=8): the bench prices named hand plans" in job_for(piped)
    ring = dataclasses.replace(rows["tt2412-t2-fsdp4-cp2"], precision="bf16")
    assert "context parallelism (CP=2): no named hand plan" in job_for(ring)


def test_median_and_spearman_match_hand_computed_values() -> None:
    frame = pd.DataFrame({
        "group": ["a"] * 4 + ["b"] * 4 + ["c"] * 2 + ["d"],
        "measured": [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 5.0],
        "predicted": [1.1, 2.2, 3.3, 4.4, 4.0, 3.0, 2.0, 1.0, 1.0, 1.0, 5.0],
        "skipped": [""] * 10 + ["skipped: because"]})
    frame["ratio"] = frame["predicted"] / frame["measured"]
    # |ratio - 1| over the ten predicted rows, sorted: 0 0.1×4 0.5 0.5 1/3 1/3 3
    assert median_error(frame) == pytest.approx(0.5 * (0.1 + 1 / 3))
    groups = spearman_by_group(frame).set_index("group")
    assert list(groups.index) == ["a", "b", "c"]  # d has only a skipped row
    assert groups.loc["a", "spearman"] == pytest.approx(1.0) and groups.loc["a", "met"]
    assert groups.loc["b", "spearman"] == pytest.approx(-1.0) and not groups.loc["b", "met"]
    assert not groups.loc["c", "target_applies"] and math.isnan(groups.loc["c", "spearman"])


def test_quick_run_predictions_equal_a_direct_plan_call(tmp_path) -> None:
    paths = fidelity.run(tmp_path, quick=True, measured=SHIPPED)
    assert [p.name for p in paths] == ["fidelity.csv", "fidelity_summary.txt", "fidelity.png"]
    assert all(p.stat().st_size > 0 for p in paths)
    out = pd.read_csv(paths[0], comment="#", keep_default_na=False).set_index("row_id")
    assert set(out.index) == set(fidelity.QUICK_ROWS)
    assert list(out.columns[:2]) == ["source_id", "group"] and "skipped" in out.columns
    assert out.loc["tt2412-t5-1f1b", "skipped"].startswith("skipped: fp8")  # and PP=8
    assert out.loc["tt2412-t1-float8", "skipped"].startswith("skipped: fp8")
    for row_id, (seq, micro, steps, measured) in {
            "llmfoundry-a10080gb-ampbf16-mpt125m-s2048-g8-mb40": (2048, 40, 2, 142830.0),
            "llmfoundry-a10080gb-ampbf16-mpt125m-s8192-g8-mb8": (8192, 8, 2, 90392.0)}.items():
        line = out.loc[row_id]
        assert line["skipped"] == ""
        # the row's published setup, spelled out here: 8 A100 80GB, FULL_SHARD, no AC
        graph = zoo.build_config(model_config("mpt-125m", seq=seq, batch=micro * 8))
        # llm-foundry's attn_impl: triton, on the A100 preset
        a100_triton = with_attention_kernel(get_preset("dgx-a100"), "triton")
        plan = autoshard.plan(graph, Mesh.parse("fsdp=8"), topology=a100_triton, training=True,
                              strategy="fsdp", micro_batches=steps, time_limit=120.0,
                              model_name="mpt-125m")
        predicted = float(plan.throughput["tokens_per_s_per_device"])
        assert float(line["predicted"]) == pytest.approx(predicted, rel=1e-6)
        assert float(line["measured"]) == measured
        assert float(line["ratio"]) == pytest.approx(predicted / measured, rel=1e-3)
        assert float(line["predicted_step_s"]) == pytest.approx(plan.objective.total_s, rel=1e-5)
        # tokens per step per GPU / step seconds = tokens per second per GPU
        tokens_per_gpu = seq * micro * steps
        assert tokens_per_gpu / plan.objective.total_s == pytest.approx(predicted, rel=1e-6)
    summary = paths[1].read_text()
    assert "4 measured rows, 2 predicted, 2 skipped" in summary
