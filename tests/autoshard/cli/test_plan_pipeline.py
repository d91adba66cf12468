"""``autoshard plan`` on a mesh with a pp axis, end to end: files, summary, bad input."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import run

SMALL = ("--model", "llama3-8b", "--layers", "8", "--seq", "128", "--hidden", "256", "--ffn",
         "512", "--heads", "8", "--training")


def test_pipelined_plan_writes_stages_and_prints_the_table(tmp_path) -> None:
    result = run("plan", *SMALL, "--mesh", "dp=2,pp=2,tp=2", "--global-batch", "32",
                 "--micro-batch", "2", "--schedule", "1f1b", "--stages", "4,4", "--out",
                 str(tmp_path))
    assert result.exit_code == 0, result.output
    assert "pipeline   1f1b (Schedule1F1B), 2 stages, 8 micro-batches" in result.output
    record = json.loads((tmp_path / "plan.json").read_text())["pipeline"]
    assert record["schedule"] == "1f1b" and record["micro_batches"] == 8
    assert [row["layers"] for row in record["stage"]] == [[[0, 4]], [[4, 8]]]
    assert record["stage"][0]["devices"] == [0, 1, 4, 5]
    assert record["stage"][0]["embedding"] and record["stage"][1]["head"]


@pytest.mark.parametrize(("args", "needle"), [
    (("--mesh", "pp=16", "--global-batch", "16", "--micro-batch", "1"),
     "pp=16 stages but the model has 8 layers"),
    (("--mesh", "dp=2,pp=4", "--global-batch", "4", "--micro-batch", "1", "--schedule",
      "1f1b"), "needs at least as many micro-batches as pipeline stages (4), got 2"),
    (("--mesh", "pp=2,tp=2", "--stages", "4,x"), "--stages"),
    (("--mesh", "dp=2,tp=2", "--schedule", "1f1b"), "apply to a mesh with a pp axis"),
])
def test_pipeline_bad_input_is_one_line(args, needle) -> None:
    result = run("plan", *SMALL, *args)
    assert result.exit_code == 2, result.output
    assert needle in result.output
    assert "Traceback" not in result.output


TINY = ("--model", "llama3-8b", "--layers", "4", "--seq", "128", "--hidden", "256", "--ffn",
        "512", "--heads", "8", "--training", "--mesh", "dp=2,pp=2,tp=2", "--global-batch", "32",
        "--micro-batch", "2", "--time-limit", "60")
NOT_INTERLEAVED = {"gpipe", "1f1b", "zb-h1"}


@pytest.mark.parametrize(("stages", "schedules", "layers"), [
    ("1,3", NOT_INTERLEAVED, [[[0, 1]], [[1, 4]]]),
    ("2,2", NOT_INTERLEAVED, [[[0, 2]], [[2, 4]]]),
    ("1,1,1,1", {"interleaved"}, [[[0, 1], [2, 3]], [[1, 2], [3, 4]]]),
])
def test_auto_runs_the_schedules_the_stage_list_fits(tmp_path, stages, schedules,
                                                     layers) -> None:
    """One entry per pp stage means a non-interleaved schedule, pp × --virtual-stages the
    interleaved one; auto plans with the split as given instead of refusing the list."""
    result = run("plan", *TINY, "--stages", stages, "--out", str(tmp_path), "-q")
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "plan.json").read_text())["pipeline"]
    assert record["schedule"] in schedules
    assert [row["layers"] for row in record["stage"]] == layers


@pytest.mark.parametrize(("args", "needle"), [
    (("--stages", "1,2,1"), "--stages 1,2,1 has 3 entries: give 2 (one per pp stage) or 4 "
                            "(pp × --virtual-stages, one per chunk of the interleaved "
                            "schedule)"),
    (("--stages", "1,2,1", "--virtual-stages", "1"),
     "--stages 1,2,1 has 3 entries: give 2 (one per pp stage)\n"),
    (("--stages", "1,1,1,1", "--schedule", "gpipe"),
     "--stages 1,1,1,1 has 4 entries but the gpipe schedule needs 2 (one per pp stage); 4 "
     "entries fit --schedule interleaved, or auto"),
    (("--stages", "1,3", "--schedule", "interleaved"),
     "--stages 1,3 has 2 entries but the interleaved schedule needs 4 (pp × --virtual-stages, "
     "one per chunk of the interleaved schedule); 2 entries fit --schedule gpipe, 1f1b or "
     "zb-h1, or auto"),
    (("--stages", "1,2,1", "--schedule", "1f1b"),
     "--stages 1,2,1 has 3 entries but the 1f1b schedule needs 2 (one per pp stage)\n"),
    (("--stages", "2,3"), "--stages 2,3 sums to 5 layers, the model has 4"),
    (("--stages", "0,4"), "--stages 0,4: every stage (or chunk) needs at least one layer"),
    (("--stages", "1,1,1,1", "--global-batch", "12"),
     "--stages 1,1,1,1 has 4 entries, one per chunk of the interleaved schedule (pp × "
     "--virtual-stages), which needs the micro-batches (3) to be a multiple of the pipeline "
     "stages (2)"),
])
def test_a_stage_list_no_schedule_runs_is_one_line(args, needle) -> None:
    """A list the schedule (or, with auto, every schedule) cannot run is one error naming the
    lengths that fit, not a refusal from whichever candidate auto tried first."""
    result = run("plan", *TINY, *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith("autoshard: error: ")
    assert result.output.count("\n") == 1
    assert needle in result.output


def test_pp_without_training_is_refused() -> None:
    result = run("plan", "--model", "gpt2", "--layers", "2", "--mesh", "pp=2")
    assert result.exit_code == 2
    assert "add --training" in result.output


def test_export_gives_split_points_and_schedule_class(tmp_path) -> None:
    """The DTensor script's split spec starts each chunk where plan.json says it starts, and
    its schedule class is torch's for that schedule; JSON keeps the record, JAX states it."""
    out = tmp_path / "plan"
    planned = run("plan", *SMALL, "--mesh", "dp=2,pp=2,tp=2", "--global-batch", "32",
                  "--micro-batch", "2", "--schedule", "interleaved", "--out", str(out), "-q")
    assert planned.exit_code == 0, planned.output
    record = json.loads((out / "plan.json").read_text())["pipeline"]
    script = tmp_path / "dtensor.py"
    result = run("export", str(out / "plan.json"), "--format", "dtensor", "--out", str(script))
    assert result.exit_code == 0, result.output
    pipelining = pytest.importorskip("torch.distributed.pipelining")
    namespace: dict = {}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    starts = [chunk[0] for row in record["stage"] for chunk in row["layers"]]
    assert namespace["PIPELINE_SPLIT_POINTS"] == [f"layers.{s}" for s in sorted(starts)[1:]]
    assert namespace["PIPELINE_SCHEDULE"] == "ScheduleInterleaved1F1B"
    assert namespace["pipeline_schedule_class"]() is pipelining.ScheduleInterleaved1F1B
    exported = json.loads(run("export", str(out / "plan.json")).output)
    assert exported["pipeline"] == record
    jax = run("export", str(out / "plan.json"), "--format", "jax").output
    assert "#   stage 1: layers" in jax


def test_trace_has_one_process_per_stage_ending_at_the_step(tmp_path) -> None:
    trace_path = tmp_path / "trace.json"
    result = run("plan", *SMALL, "--mesh", "pp=2,tp=2", "--global-batch", "8",
                 "--micro-batch", "2", "--schedule", "zb-h1", "--out", str(tmp_path / "p"),
                 "--trace", str(trace_path))
    assert result.exit_code == 0, result.output
    trace = json.loads(trace_path.read_text())
    record = json.loads((tmp_path / "p" / "plan.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {"stage 0", "stage 1"}
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    end_us = max(e["ts"] + e["dur"] for e in slices)
    assert end_us == pytest.approx(record["objective"]["total_s"] * 1e6, rel=1e-6)
    weights = [e for e in slices if e["name"].startswith("weight grad")]
    assert len(weights) == 2 * record["pipeline"]["micro_batches"]
