"""``autoshard plan --trace`` and ``autoshard trace PLAN.json --out``, as a user runs them: the
file is a Chrome trace (read back by the independent format reader in tests/support) that ends
at the plan's step time; a saved plan gives the same bytes as the plan run; bad input gets one
line and exit 2."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import run
from tests.support.trace_format import read_trace


def plan_args(model: str, out, *extra: str) -> list[str]:
    return ["plan", "--model", model, "--mesh", "dp=2,fsdp=2", "--training", "--strategy",
            "fsdp", "--out", str(out), "--quiet", *extra]


@pytest.fixture(scope="module")
def planned(tmp_path_factory, small_model):
    """An FSDP plan with two micro-batches (op overlap), written with ``--trace``."""
    root = tmp_path_factory.mktemp("planned")
    result = run(*plan_args(small_model, root / "out", "--grad-accum", "2",
                            "--trace", str(root / "plan-trace.json")))
    assert result.exit_code == 0, result.output
    return root


def test_plan_trace_ends_at_the_step_time(planned) -> None:
    plan = json.loads((planned / "out" / "plan.json").read_text())
    assert plan["objective"]["micro_batches"] == 2
    assert plan["objective"]["hidden_s"] > 0  # something is drawn beside compute
    trace = read_trace(planned / "plan-trace.json")
    assert abs(trace.end_ns - plan["objective"]["total_s"] * 1e9) <= 1
    assert {e.thread for e in trace.events} >= {"compute", "dp", "fsdp"}
    assert {e.args["micro_batch"] for e in trace.on("compute") if "micro_batch" in e.args} == {0, 1}
    hidden = [e for e in trace.events if e.cat == "comm.overlapped"]
    compute = [e for e in trace.on("compute") if e.cat == "compute"]
    assert hidden and all(any(h.overlaps(c) for c in compute) for h in hidden)


def test_trace_of_the_saved_plan_gives_the_same_bytes(planned, tmp_path) -> None:
    out = tmp_path / "again.json"
    result = run("trace", str(planned / "out" / "plan.json"), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"wrote      {out}") and "2 micro-batches" in result.output
    assert out.read_bytes() == (planned / "plan-trace.json").read_bytes()


def test_trace_refuses_to_overwrite_without_force(planned, tmp_path) -> None:
    out = tmp_path / "t.json"
    out.write_text("mine")
    result = run("trace", str(planned / "out" / "plan.json"), "--out", str(out))
    assert result.exit_code == 2 and "--force" in result.output
    assert out.read_text() == "mine"
    forced = run("trace", str(planned / "out" / "plan.json"), "--out", str(out), "--force")
    assert forced.exit_code == 0, forced.output
    read_trace(out)


def test_plan_refuses_an_existing_trace_before_planning(small_model, tmp_path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text("mine")
    result = run(*plan_args(small_model, tmp_path / "out", "--trace", str(trace)))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"autoshard: error: {trace} already exists; choose another --trace path or pass "
        "--force to overwrite it"]
    assert trace.read_text() == "mine" and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("content", "needle"), [
    (None, "no such file"),
    ("{not json", "not JSON"),
    ('{"format": "autoshard.plan/v0"}', "expected \"autoshard.plan/v1\""),
], ids=["missing", "not-json", "wrong-format"])
def test_a_bad_plan_file_gets_one_line(tmp_path, content, needle) -> None:
    path = tmp_path / "plan.json"
    if content is not None:
        path.write_text(content)
    result = run("trace", str(path), "--out", str(tmp_path / "t.json"))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and needle in lines[0], result.output
    assert not (tmp_path / "t.json").exists()


def older(plan: dict) -> dict:
    """The plan as a version before the step model wrote it: no counts, no overlap, no
    hidden seconds or micro-batches, no step settings."""
    plan = json.loads(json.dumps(plan))
    for record in [*plan["ops"].values(), *plan["reshards"]]:
        record.pop("count", None)
        record.pop("overlap", None)
    plan["objective"].pop("hidden_s")
    plan["objective"].pop("micro_batches")
    plan["stats"].pop("settings")
    return plan


def test_an_older_plan_without_counts_is_one_micro_batch_with_nothing_hidden(
        small_model, tmp_path) -> None:
    """A plan the step model would also price as a plain sum (one micro-batch, overlap none)
    loses nothing when its counts are stripped: the trace still ends at its step time."""
    result = run(*plan_args(small_model, tmp_path / "out", "--overlap", "none"))
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    (tmp_path / "old.json").write_text(json.dumps(older(plan)))
    traced = run("trace", str(tmp_path / "old.json"), "--out", str(tmp_path / "t.json"))
    assert traced.exit_code == 0, traced.output
    assert "1 micro-batch, overlap none" in traced.output
    trace = read_trace(tmp_path / "t.json")
    assert abs(trace.end_ns - plan["objective"]["total_s"] * 1e9) <= 1
    assert not [e for e in trace.events if e.cat == "comm.overlapped"]


def test_records_that_cannot_make_a_step_name_the_culprit(planned, tmp_path) -> None:
    """Counts stripped from a two-micro-batch plan (objective still says 2): one line naming
    the first op whose runs do not add up, exit 2, no file."""
    plan = json.loads((planned / "out" / "plan.json").read_text())
    for record in plan["ops"].values():
        record.pop("count")
    (tmp_path / "edited.json").write_text(json.dumps(plan))
    result = run("trace", str(tmp_path / "edited.json"), "--out", str(tmp_path / "t.json"))
    assert result.exit_code == 2
    first = next(iter(plan["ops"]))
    assert result.output.strip().splitlines() == [
        f"autoshard: error: cannot lay out the step: op {first} (source) runs 1 times per "
        "step, expected 2 with 2 micro-batches; re-plan to get consistent records"]
    assert not (tmp_path / "t.json").exists()


def test_an_unwritable_out_is_refused_before_any_work(planned, tmp_path) -> None:
    """A directory where the file goes, or a file where its directory goes: one line, exit 2;
    a missing directory is made."""
    plan = str(planned / "out" / "plan.json")
    (tmp_path / "file").write_text("")
    for out, needle in ((tmp_path, "is a directory"), (tmp_path / "file" / "t.json",
                                                       "is a file, not a directory")):
        result = run("trace", plan, "--out", str(out), "--force")
        assert result.exit_code == 2 and needle in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    made = run("trace", plan, "--out", str(tmp_path / "new" / "dir" / "t.json"))
    assert made.exit_code == 0, made.output
    read_trace(tmp_path / "new" / "dir" / "t.json")
