"""``autoshard sweep`` end to end on tiny models: files, rows, -j, resume, infeasible, errors.

Row values are checked against the plan files the sweep wrote (read as raw JSON) and against
hand formulas (tokens per second = batch·seq / step time; a mesh's device count is the
product of its axis sizes), not against the code that filled them in.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoshard.cli import main
from autoshard.planning.record import Plan
from autoshard.sweep import runner as runner_module
from autoshard.sweep.study import PlanFiles, SweepSpec, sweep
from autoshard.sweep.table import COLUMNS, TIMING_COLUMNS

TINY_GPT = ("--model", "gpt2", "--layers", "1", "--hidden", "128", "--heads", "2", "--ffn",
            "512", "--batch", "4", "--seq", "64", "--devices", "2,4", "--axes", "1-2")
TINY_MLP = ("--model", "mlp", "--layers", "1", "--hidden", "256", "--ffn", "1024",
            "--batch", "8", "--seq", "16", "--devices", "2,4", "--axes", "1-2")


def run(*args: str):
    return CliRunner().invoke(main, ["sweep", *args], catch_exceptions=False)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def without_timing(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in rows]


@pytest.fixture(scope="module")
def gpt_sweep(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "gpt"
    result = run(*TINY_GPT, "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def test_sweep_writes_one_row_per_mesh_with_the_documented_columns(gpt_sweep: Path) -> None:
    with (gpt_sweep / "sweep.csv").open() as handle:
        assert tuple(next(csv.reader(handle))) == COLUMNS
    rows = read_csv(gpt_sweep / "sweep.csv")
    assert [row["mesh"] for row in rows] == ["dp=2", "dp=4", "dp=2,tp=2"]
    for row in rows:
        sizes = [int(part.split("=")[1]) for part in row["mesh"].split(",")]
        assert math.prod(sizes) == int(row["devices"])
        assert row["feasible"] == "True" and row["error"] == ""
        total = float(row["total_s"])
        assert math.isclose(total, float(row["compute_s"]) + float(row["comm_s"])
                            - float(row["hidden_s"]) - float(row["concurrent_s"])
                            + float(row["bubble_s"]), rel_tol=1e-9)
        assert math.isclose(float(row["tokens_per_s"]), 4 * 64 / total, rel_tol=1e-12)
        assert float(row["peak_bytes_per_device"]) <= float(row["limit_bytes"])


def test_the_summary_labels_tokens_per_second_for_all_devices_and_per_device(
        gpt_sweep: Path) -> None:
    """sweep.csv's tokens_per_s is the whole mesh's (batch 4 x seq 64 per step); the summary
    table shows it and, as ``autoshard plan`` does, per device."""
    text = (gpt_sweep / "summary.md").read_text()
    assert "| tokens/s, all devices | tokens/s per device |" in text
    for row in read_csv(gpt_sweep / "sweep.csv"):
        if f"`{row['mesh']}`" not in text:
            continue  # not the best mesh of its device count
        whole = 4 * 64 / float(row["total_s"])
        per_device = whole / int(row["devices"])
        assert f"| {whole:,.0f} | {per_device:,.0f} |" in text, text


def test_every_row_matches_its_plan_file(gpt_sweep: Path) -> None:
    for row in read_csv(gpt_sweep / "sweep.csv"):
        path = gpt_sweep / row["plan"]
        plan = Plan.load(path)
        assert [f"{n}={s}" for n, s in plan.mesh] == row["mesh"].split(",")
        raw = json.loads(path.read_text())
        assert float(row["total_s"]) == raw["objective"]["total_s"]
        totals: dict[tuple[str, str], float] = {}
        collectives = [c for r in raw["reshards"] for c in r["collectives"]]
        collectives += [c for op in raw["ops"].values() for c in op["intra_op"]]
        for c in collectives:
            if c["kind"] in ("all_slice", "replicated_to_partial"):  # local: compute
                continue
            key = (c["kind"], ",".join(c["axes"]))
            totals[key] = totals.get(key, 0.0) + c["seconds"]
        assert math.isclose(sum(totals.values()), float(row["comm_s"]), rel_tol=1e-9)
        if not totals:  # a plan without communication has no top collective
            assert row["top_collective"] == row["top_collective_axes"] == ""
            continue
        kind, axes = max(totals, key=totals.get)
        assert (row["top_collective"], row["top_collective_axes"]) == (kind, axes)
        assert math.isclose(float(row["top_collective_s"]), totals[(kind, axes)], rel_tol=1e-9)


def test_plots_and_summary_name_the_best_mesh(gpt_sweep: Path) -> None:
    for name in ("step_time.png", "memory.png", "throughput.png"):
        assert (gpt_sweep / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = (gpt_sweep / "summary.md").read_text()
    rows = read_csv(gpt_sweep / "sweep.csv")
    four = min((r for r in rows if r["devices"] == "4"), key=lambda r: float(r["total_s"]))
    assert f"| 4 | `{four['mesh']}` |" in summary
    assert "| 2 | `dp=2` |" in summary
    assert "autoshard sweep --model gpt2 --devices 2,4 --axes 1-2" in summary
    assert "dominates" in summary


def test_existing_sweep_needs_resume_or_force(gpt_sweep: Path) -> None:
    before = (gpt_sweep / "sweep.csv").read_bytes()
    again = run(*TINY_GPT, "--out", str(gpt_sweep))
    assert again.exit_code == 2
    assert "--force" in again.output and len(again.output.strip().splitlines()) == 1
    assert (gpt_sweep / "sweep.csv").read_bytes() == before


def test_two_jobs_give_the_same_csv_as_one(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    assert run(*TINY_MLP, "--out", str(one), "--plans", "none").exit_code == 0
    result = run(*TINY_MLP, "--out", str(two), "--plans", "none", "-j", "2")
    assert result.exit_code == 0, result.output
    assert without_timing(read_csv(one / "sweep.csv")) == without_timing(
        read_csv(two / "sweep.csv"))


def test_resume_recomputes_only_missing_points_and_survives_a_torn_line(tmp_path: Path,
                                                                       monkeypatch) -> None:
    out = tmp_path / "resume"
    assert run(*TINY_MLP, "--out", str(out)).exit_code == 0
    full = read_csv(out / "sweep.csv")
    lines = (out / "sweep.csv").read_text().splitlines(keepends=True)
    torn = lines[0] + lines[1] + lines[3] + lines[2][: len(lines[2]) // 2]  # row 2 cut short
    (out / "sweep.csv").write_text(torn)
    seen: list[str] = []
    real = runner_module.run_point
    monkeypatch.setattr(runner_module, "run_point",
                        lambda point, settings: seen.append(point.point_id) or real(point,
                                                                                    settings))
    result = run(*TINY_MLP, "--out", str(out), "--resume")
    assert result.exit_code == 0, result.output
    assert seen == [full[1]["point"]]
    assert "1 computed, 2 already done" in result.output
    assert without_timing(read_csv(out / "sweep.csv")) == without_timing(full)


def test_interrupt_leaves_whole_rows_and_resume_finishes(tmp_path: Path, monkeypatch) -> None:
    spec = SweepSpec(model="mlp", devices=(2, 4), max_axes=2, batches=(8,), seqs=(16,),
                     overrides=(("layers", 1), ("hidden", 64), ("ffn", 256)))
    real, calls = runner_module.run_point, []

    def interrupted(point, settings):
        calls.append(point.point_id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(point, settings)

    monkeypatch.setattr(runner_module, "run_point", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sweep(spec, tmp_path, plans=PlanFiles.NONE)
    kept = read_csv(tmp_path / "sweep.csv")
    assert [r["point"] for r in kept] == calls[:2]
    monkeypatch.setattr(runner_module, "run_point", real)
    result = sweep(spec, tmp_path, resume=True, plans=PlanFiles.NONE)
    assert (result.computed, result.skipped) == (1, 2)
    assert [r["mesh"] for r in result.rows] == ["dp=2", "dp=4", "dp=2,tp=2"]


def test_memory_too_small_is_recorded_per_point_not_fatal(tmp_path: Path) -> None:
    """800 KiB per device: the 2-device mesh cannot hold even half of the 1 MiB of bf16
    weights plus activations, the 4-device meshes can."""
    from graphs import zoo

    weights = 2 * zoo.param_count("mlp", layers=1, hidden=256, ffn=1024)  # bf16 bytes
    out = tmp_path / "tight"
    result = run(*TINY_MLP, "--memory", "800KiB", "--out", str(out), "--plans", "best")
    assert result.exit_code == 0, result.output
    rows = {r["mesh"]: r for r in read_csv(out / "sweep.csv")}
    bad = rows.pop("dp=2")
    assert (bad["feasible"], bad["error_kind"], bad["plan"]) == ("False", "MemoryTooSmallError",
                                                                 "")
    assert "800 KiB" in bad["error"] and "dp=2" in bad["error"]
    assert float(bad["peak_bytes_per_device"]) >= weights / 2
    assert float(bad["limit_bytes"]) == 800 * 1024
    for row in rows.values():
        assert row["feasible"] == "True"
        assert weights / 4 <= float(row["peak_bytes_per_device"]) <= 800 * 1024
    assert sum(bool(r["plan"]) for r in rows.values()) == 1  # --plans best: one per count
    summary = (out / "summary.md").read_text()
    assert "| 2 | none feasible |" in summary and "MemoryTooSmallError" in summary


@pytest.mark.parametrize(("args", "needle"), [
    (("--model", "gpt2", "--devices", "8,x"), "--devices"),
    (("--model", "gpt2", "--devices", "1"), "--devices"),
    (("--model", "gpt2", "--devices", "8", "--axes", "0-5"), "--axes"),
    (("--model", "gpt2", "--devices", "7", "--axes", "2"), "7 devices"),
    (("--model", "lama3-8b", "--devices", "8"), "llama3-8b"),
    (("--model", "gpt2", "--devices", "8", "--link", "dp"), "--link"),
    (("--model", "gpt2", "--devices", "8", "--executor", "dask"), "--scheduler"),
    (("--model", "gpt2", "--devices", "8", "--gap", "5"), "--gap"),
    (("--model", "gpt2", "--devices", "8", "--memory", "0"), "memory per device must be positive"),
], ids=["not-int", "one", "axes", "prime", "unknown-model", "bad-link", "dask-no-scheduler",
        "gap", "memory-zero"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args, needle) -> None:
    result = run(*args, "--out", str(tmp_path / "x"))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autoshard: error:") and needle in lines[0]
    assert not (tmp_path / "x" / "sweep.csv").exists()


TINY_8 = ("--model", "mlp", "--layers", "1", "--hidden", "64", "--ffn", "256", "--batch", "8",
          "--seq", "16", "--devices", "8")


# Values that apply to no point of the sweep. The allowed sets are worked out by hand: the pp
# sizes that fit 8 devices are its divisors from 2 up; a batch of 8 splits into micro-batches
# of every divisor of 8 (pp=2,tp=4 has one data-parallel replica), and without pp into 1, 2, 4
# (dp=2,tp=4 has the fewest replicas, 2: 8 = 2 x 4); the axes of 1-3-axis meshes named
# dp,fsdp,tp are dp, tp (2 axes) and fsdp (3 axes).
@pytest.mark.parametrize(("args", "needles"), [
    (("--training", "--pp", "3"), ("--pp 3:", "pp axis of size 3", "sizes that fit: 2, 4, 8")),
    (("--training", "--pp", "2,16"), ("--pp 16:", "sizes that fit: 2, 4, 8")),
    (("--link", "zz=alpha:5us,bw:10GB/s"), ('--link "zz=alpha:5us,bw:10GB/s"', 'axis "zz"',
                                            "its axes: dp, tp, fsdp")),
    (("--axes", "1-2", "--link", "fsdp=ib"), ('axis "fsdp"', "its axes: dp, tp)")),
    (("--link", "dp=garbage"), ('--link "dp=garbage", axis dp', "no link is named 'garbage'")),
    (("--topology", "nosuch"), ('--topology "nosuch"', "known presets")),
    (("--training", "--micro-batch", "3"), ("--micro-batch 3:", "--batch (8)",
                                            "sizes that fit: 1, 2, 4, 8")),
    (("--training", "--pp", "none", "--micro-batch", "3"), ("--micro-batch 3:",
                                                            "sizes that fit: 1, 2, 4")),
    (("--axis-names", "a,b,c,d"), ('"a,b,c,d"', '"b" would name no axis', "at most 3")),
    (("--executor", "dask", "--scheduler", "tcp://127.0.0.1:1", "-j", "2"),
     ("-j 2", "--executor dask")),
], ids=["pp-divides-no-count", "pp-one-of-two", "link-axis-unknown", "link-axis-unused",
        "link-spec", "topology", "micro-batch-no-split", "micro-batch-no-split-without-pp",
        "axis-names-too-many", "jobs-with-dask"])
def test_a_value_that_applies_to_no_point_is_refused_before_work(tmp_path: Path, args,
                                                                 needles) -> None:
    """Each used to be dropped from the sweep without a word (or to fail every point, one
    error row each, after the sweep ran): now one line naming it and what fits, exit 2."""
    result = run(*TINY_8, *args, "--out", str(tmp_path / "x"))
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("autoshard: error:"), result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (tmp_path / "x").exists()


def test_training_sweep_plans_backward_and_optimizer(tmp_path: Path) -> None:
    out = tmp_path / "train"
    result = run("--model", "mlp", "--layers", "1", "--hidden", "64", "--ffn", "256",
                 "--batch", "8", "--seq", "16", "--devices", "2", "--training",
                 "--out", str(out))
    assert result.exit_code == 0, result.output
    (row,) = read_csv(out / "sweep.csv")
    assert (row["mode"], row["training"], row["feasible"]) == ("train", "True", "True")
    assert row["point"].startswith("mlp.layers1.hidden64.ffn256_train_b8_s16_")
    raw = json.loads((out / row["plan"]).read_text())
    roles = {t["role"] for t in raw["tensors"].values()}
    assert {"grad", "optimizer_state"} <= roles
    assert raw["memory"]["breakdown"]["optimizer"] > 0
    assert "--training --optimizer adamw --recompute none" in (out / "summary.md").read_text()


def test_force_starts_over_without_the_old_plans(tmp_path: Path) -> None:
    out = tmp_path / "force"
    assert run(*TINY_MLP, "--out", str(out)).exit_code == 0
    assert len(list((out / "points").iterdir())) == 3
    smaller = [a if a != "2,4" else "2" for a in TINY_MLP]
    result = run(*smaller, "--out", str(out), "--force")
    assert result.exit_code == 0, result.output
    assert [r["mesh"] for r in read_csv(out / "sweep.csv")] == ["dp=2"]
    assert [p.name for p in (out / "points").iterdir()] == [
        "mlp.layers1.hidden256.ffn1024_infer_b8_s16_dgx-h100_default_dp2"]


def test_a_slower_link_variant_never_makes_a_mesh_faster(tmp_path: Path) -> None:
    """Every plan costs at least as much on a slower link, so the optimum does too."""
    out = tmp_path / "links"
    slow = "dp=alpha:50us,bw:1GB/s"
    args = [a if a != "2,4" else "2" for a in TINY_GPT]
    result = run(*args, "--link", "default", "--link", slow, "--out", str(out))
    assert result.exit_code == 0, result.output
    rows = {r["links"]: r for r in read_csv(out / "sweep.csv")}
    assert sorted(rows) == ["default", slow]
    assert float(rows[slow]["total_s"]) >= float(rows["default"]["total_s"])
    link = json.loads((out / rows[slow]["plan"]).read_text())["topology"]["links"][0]
    assert (link["axis"], link["alpha_s"]) == ("dp", 5e-5)
    assert math.isclose(link["bandwidth_bytes_per_s"], 1e9, rel_tol=1e-12)


def test_resume_refuses_other_planner_settings(tmp_path: Path) -> None:
    out = tmp_path / "settings"
    assert run(*TINY_MLP, "--out", str(out), "--plans", "none").exit_code == 0
    result = run(*TINY_MLP, "--out", str(out), "--resume", "--memory", "1GiB")
    assert result.exit_code == 2 and "memory_limit None → 1073741824.0" in result.output
    again = run(*TINY_MLP, "--out", str(out), "--resume", "--plans", "none")
    assert again.exit_code == 0 and "0 computed, 3 already done" in again.output


def test_a_sweep_from_before_gap_resumes_only_at_its_own_gap(tmp_path: Path) -> None:
    """Sweep directories written before --gap hold points solved to 1e-6: resuming them at
    the new default would mix two stopping rules in one table."""
    out = tmp_path / "legacy"
    assert run(*TINY_MLP, "--out", str(out), "--plans", "none", "--gap", "1e-6").exit_code == 0
    settings_file = out / "sweep-settings.json"
    stored = json.loads(settings_file.read_text())
    assert stored["gap"] == 1e-6
    del stored["gap"]
    settings_file.write_text(json.dumps(stored))
    result = run(*TINY_MLP, "--out", str(out), "--resume", "--plans", "none")
    assert result.exit_code == 2 and "gap 1e-06 → 0.001" in result.output
    again = run(*TINY_MLP, "--out", str(out), "--resume", "--plans", "none", "--gap", "1e-6")
    assert again.exit_code == 0 and "0 computed, 3 already done" in again.output
    assert "--gap 1e-06" in (out / "summary.md").read_text()


@pytest.mark.jax
def test_a_pool_never_forks_a_driver_running_jax(tmp_path: Path) -> None:
    """A driver that has imported JAX runs its threads; forking it may deadlock a worker (JAX
    warns so from an at-fork hook). The workers come from a clean server process instead."""
    import jax.numpy as jnp

    jnp.zeros(1).block_until_ready()  # JAX's backend and threads are up
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = run(*TINY_MLP, "--out", str(tmp_path / "two"), "--plans", "none", "-j", "2")
    assert result.exit_code == 0, result.output
    assert not [w for w in caught if "fork" in str(w.message)]


def test_workers_log_as_the_driver_does(tmp_path: Path) -> None:
    """``-v`` reaches the pool's workers, which the forkserver starts without the driver's
    logging: each infeasible point's reason is logged by the worker that planned it."""
    args = ["-v", "sweep", *TINY_MLP, "--memory", "1KB", "--plans", "none", "-j", "2",
            "--out", str(tmp_path / "out")]
    result = subprocess.run([sys.executable, "-c", "from autoshard.cli import main; main()",
                             *args], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines()
             if line.startswith("INFO autoshard.sweep.runner: point ")]
    assert len(lines) == 3 and all("no plan fits" in line for line in lines), result.stderr


def test_a_graph_file_sweeps_with_its_batch_unknown(tmp_path: Path, small_model: str) -> None:
    """A graph file takes no --batch: the sweep still writes its plots and summary, stating
    the batch as unknown and leaving tokens per second empty rather than guessed."""
    out = tmp_path / "graph"
    result = run("--model", small_model, "--devices", "2", "--axes", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    (row,) = read_csv(out / "sweep.csv")
    assert (row["feasible"], row["batch"], row["tokens_per_s"]) == ("True", "", "")
    for name in ("step_time.png", "memory.png", "throughput.png", "frontier.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = (out / "summary.md").read_text()
    assert "inference, batch unknown, seq unknown" in summary
    assert "| 2 | `dp=2` |" in summary


HF_GPT2 = ("--model", str(Path(__file__).parents[2] / "data" / "hf-configs" / "gpt2.json"),
           "--layers", "1", "--axes", "1")


def test_a_hugging_face_config_states_the_batch_it_is_built_at(tmp_path: Path) -> None:
    """Without --batch/--seq a config is planned at its defaults: the rows, tokens per
    second and summary state them (they said "unknown"), read back from the plan's own
    tokens tensor; the point id stays as sweeps before wrote it."""
    out = tmp_path / "hf"
    result = run(*HF_GPT2, "--devices", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    (row,) = read_csv(out / "sweep.csv")
    batch, seq = json.loads((out / row["plan"]).read_text())["tensors"]["tokens"]["shape"]
    assert (row["batch"], row["seq"]) == (str(batch), str(seq))
    assert float(row["tokens_per_s"]) == pytest.approx(batch * seq / float(row["total_s"]))
    assert "_b-_s-_" in row["point"]
    assert f"inference, batch {batch}, seq {seq}" in (out / "summary.md").read_text()


def test_a_hugging_face_sweep_written_before_resumes_as_one_study(tmp_path: Path,
                                                                   monkeypatch) -> None:
    """A directory the earlier code wrote (the same point ids, batch, seq and tokens per
    second empty) resumes without recomputing its points, and its rows gain the batch and
    seq the new ones state: one study in the summary, not two."""
    out = tmp_path / "hf"
    assert run(*HF_GPT2, "--devices", "2", "--out", str(out)).exit_code == 0
    rows = read_csv(out / "sweep.csv")
    batch, seq = json.loads((out / rows[0]["plan"]).read_text())["tensors"]["tokens"]["shape"]
    for row in rows:  # as the earlier code wrote them
        row.update(batch="", seq="", tokens_per_s="")
    with (out / "sweep.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    planned = []
    real = runner_module.run_point

    def counted(point, settings):
        planned.append(point.point_id)
        return real(point, settings)

    monkeypatch.setattr(runner_module, "run_point", counted)
    result = run(*HF_GPT2, "--devices", "2,4", "--out", str(out), "--resume")
    assert result.exit_code == 0, result.output
    assert planned == [rows[0]["point"].replace("dp2", "dp4")]
    again = read_csv(out / "sweep.csv")
    assert {(r["batch"], r["seq"]) for r in again} == {(str(batch), str(seq))}
    assert all(r["tokens_per_s"] for r in again)
    summary = (out / "summary.md").read_text()
    assert "unknown" not in summary
    assert summary.count(f"inference, batch {batch}, seq {seq}") == 1


@pytest.mark.parametrize(("where", "needle"), [
    ("file", "is a file, not a directory"),
    ("under-file", "is a file, not a directory"),
    ("csv-dir", "sweep.csv is a directory"),
    ("proc", 'cannot create a directory in "/proc"'),
    ("proc-existing", 'cannot create a file in "/proc/self"'),
], ids=["file", "under-file", "csv-dir", "proc", "proc-existing"])
def test_an_unusable_out_is_one_line_before_any_point(tmp_path: Path, monkeypatch, where,
                                                       needle) -> None:
    """--out must be a directory that exists or can be made: a file, a path under a file, a
    sweep.csv that is a directory, a place nobody can create (/proc) or an existing directory
    that takes no files (/proc/self: found only when sweep.csv was written) is refused before
    a single point is planned."""
    if where.startswith("proc") and not Path("/proc/self").is_dir():
        pytest.skip("needs Linux's /proc")
    existing = tmp_path / "existing.json"
    existing.write_text("{}\n")
    (tmp_path / "taken" / "sweep.csv").mkdir(parents=True)
    out = {"file": existing, "under-file": existing / "sub", "csv-dir": tmp_path / "taken",
           "proc": Path("/proc/autoshard-sweep-test"), "proc-existing": Path("/proc/self")}[where]
    monkeypatch.setattr(runner_module, "run_point", lambda point, settings: pytest.fail(
        "a point was planned"))
    result = run(*TINY_MLP, "--out", str(out))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autoshard: error:")
    assert f'--out "{out}"' in lines[0] and needle in lines[0]
    assert existing.read_text() == "{}\n"


@pytest.mark.parametrize("extra", [(), ("--memory", "1GiB")], ids=["same-settings",
                                                                   "other-settings"])
def test_resume_and_force_together_are_refused(tmp_path: Path, extra) -> None:
    """--resume keeps the earlier rows, --force deletes them: together they are one error
    naming both, whatever the settings (not a hint to pass the --force already given), and
    the earlier sweep is left as it was."""
    out = tmp_path / "both"
    assert run(*TINY_MLP, "--out", str(out), "--plans", "none").exit_code == 0
    before = (out / "sweep.csv").read_bytes()
    result = run(*TINY_MLP, "--out", str(out), "--plans", "none", "--resume", "--force",
                 *extra)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--resume and --force contradict each other" in lines[0]
    assert (out / "sweep.csv").read_bytes() == before
