"""Rough edges of ``autoshard plan`` a new user hits: where ``--out`` cannot be written (found
before any solving), a time limit that leaves the solver no time, and a solve that stopped
before proving a bound. Each is one stderr line with the right exit code."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from click.testing import CliRunner

import autoshard
from autoshard.cli import main
from autoshard.planning.summary import summary_text
from graphs import zoo


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("model") / "mlp.json"
    zoo.build("mlp", layers=1, batch=8, seq=16, hidden=64, ffn=256).save(path)
    return str(path)


@pytest.fixture
def no_solving(monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks must come before the planner runs: it fails the test if called."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("planned before checking the output path")

    monkeypatch.setattr("autoshard.cli.plan.plan", refuse)


def _one_line(result, code: int, *needles: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == code, result.output
    assert len(lines) == 1 and lines[0].startswith("autoshard: error: "), result.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.usefixtures("no_solving")
def test_out_naming_an_existing_file_is_refused_before_solving(tmp_path, small_model) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    for out in (notes, notes / "sub"):
        result = CliRunner().invoke(main, ["plan", "--model", small_model, "--out", str(out)])
        _one_line(result, 2, "notes.txt", "is a file, not a directory")
    assert notes.read_text() == "mine\n"


@pytest.mark.usefixtures("no_solving")
def test_out_whose_output_name_is_a_directory_is_refused(tmp_path, small_model) -> None:
    (tmp_path / "plan.json").mkdir()
    for force in ([], ["--force"]):
        result = CliRunner().invoke(main, ["plan", "--model", small_model, "--out",
                                           str(tmp_path), *force])
        _one_line(result, 2, "plan.json is a directory")


@pytest.mark.usefixtures("no_solving")
def test_existing_outputs_are_refused_before_solving(tmp_path, small_model) -> None:
    (tmp_path / "costs.csv").write_text("mine\n")
    result = CliRunner().invoke(main, ["plan", "--model", small_model, "--out", str(tmp_path)])
    _one_line(result, 2, "costs.csv", "--force")


def test_export_out_must_be_a_writable_file(tmp_path, small_model) -> None:
    plan_dir = tmp_path / "plan"
    assert CliRunner().invoke(main, ["plan", "--model", small_model, "--out", str(plan_dir),
                                     "-q"]).exit_code == 0
    plan_path = str(plan_dir / "plan.json")
    result = CliRunner().invoke(main, ["export", plan_path, "--out", str(tmp_path)])
    _one_line(result, 2, "is a directory")
    result = CliRunner().invoke(main, ["export", plan_path, "--out", f"{plan_path}/x.py"])
    _one_line(result, 2, "is a file, not a directory")


@pytest.mark.parametrize("limit", ["0", "-1", "0.0"])
def test_a_time_limit_that_is_not_positive_is_a_usage_error(small_model, limit: str) -> None:
    result = CliRunner().invoke(main, ["plan", "--model", small_model, "--time-limit", limit])
    _one_line(result, 2, "--time-limit", "greater than 0")


def test_a_solve_stopped_before_any_bound_says_so() -> None:
    graph = zoo.build("mlp", layers=1, batch=8, seq=16, hidden=64, ffn=256)
    plan = autoshard.plan(graph, autoshard.Mesh.parse("tp=2"))
    stopped = replace(plan, objective=replace(plan.objective, optimal=False, gap=math.inf,
                                              lower_bound_s=-math.inf, status="time_limit"))
    line = next(x for x in summary_text(stopped, []).splitlines() if x.startswith("solver"))
    assert "no lower bound proven" in line and "inf" not in line
    line = next(x for x in summary_text(plan, []).splitlines() if x.startswith("solver"))
    assert "proven optimal" in line and "lower bound" in line


def test_a_long_phase_shows_a_status_line_and_a_short_one_nothing(monkeypatch) -> None:
    import io
    import time

    from autoshard.planning.progress import status

    for enabled, seconds, shown in ((True, 0.4, True), (True, 0.0, False), (False, 0.4, False)):
        err = io.StringIO()
        monkeypatch.setattr("sys.stderr", err)
        with status("solving (3 ops)", enabled, delay_s=0.1, interval_s=0.05):
            time.sleep(seconds)
        assert ("solving (3 ops): 00:00" in err.getvalue()) == shown, (enabled, seconds)


@pytest.mark.parametrize(("flags", "terminal", "progress"), [
    ([], True, True), (["-q"], True, False), ([], False, False)])
def test_plan_asks_for_progress_on_a_terminal_unless_quiet(monkeypatch, small_model, flags,
                                                           terminal, progress) -> None:
    asked = {}

    class Stop(Exception):
        pass

    def fake_plan(*args: object, **kwargs: object) -> None:
        asked.update(kwargs)
        raise Stop

    class Stderr:
        def isatty(self) -> bool:
            return terminal

    monkeypatch.setattr("autoshard.cli.plan.plan", fake_plan)
    monkeypatch.setattr("autoshard.cli.plan.sys.stderr", Stderr())
    with pytest.raises(Stop):
        from autoshard.cli.plan import run_plan

        run_plan(model=small_model, mesh_text="tp=2", topology="dgx-h100", link_specs=(),
                 memory=None, training=False, out_dir=None, force=False, time_limit=None,
                 quiet="-q" in flags, as_json=False)
    assert asked["progress"] is progress


def test_a_model_folder_without_a_config_is_one_line(tmp_path) -> None:
    for model in (str(tmp_path), f"{tmp_path}/"):
        result = CliRunner().invoke(main, ["plan", "--model", model])
        _one_line(result, 2, "is a folder without a config.json")


def test_a_sweep_refuses_a_time_limit_that_is_not_positive_before_any_point(tmp_path) -> None:
    result = CliRunner().invoke(main, ["sweep", "--model", "mlp", "--devices", "2",
                                       "--time-limit", "0", "--out", str(tmp_path / "s")])
    _one_line(result, 2, "--time-limit")
    assert not (tmp_path / "s" / "sweep.csv").exists()


def test_share_reshards_prices_a_reshard_once_for_all_its_readers(tmp_path) -> None:
    # the case: mlp dp=2,tp=2 training, the down projection's input gradient read by
    # two backward ops; with --share-reshards reshards.csv lists its move once, naming the
    # second reader in shared_with
    import pandas as pd

    out = tmp_path / "plan"
    result = CliRunner().invoke(main, ["plan", "--model", "mlp", "--mesh", "dp=2,tp=2",
                                       "--training", "-q", "--share-reshards", "--out",
                                       str(out)])
    assert result.exit_code == 0, result.output
    rows = pd.read_csv(out / "reshards.csv", comment="#", keep_default_na=False)
    moves = rows[rows.tensor == "grad/layers.0.mlp.down.out"]
    assert len(moves) == 1
    assert moves.iloc[0].shared_with != ""
    assert not rows.duplicated(["tensor", "src", "dst", "collective", "mesh_axes"]).any()


def test_share_reshards_plans_a_pipeline_too(tmp_path) -> None:
    # each stage's intra-stage plan shares its reshards; the pipeline is priced from its
    # records, where a shared move is listed once
    import json

    steps = {}
    for flag in ("", "--share-reshards"):
        out = tmp_path / f"plan{flag}"
        result = CliRunner().invoke(main, ["plan", "--model", "gpt2", "--layers", "4",
                                           "--mesh", "pp=2,tp=2", "--training", "-q",
                                           "--out", str(out), *([flag] if flag else [])])
        assert result.exit_code == 0, result.output
        saved = json.loads((out / "plan.json").read_text())
        assert saved["stats"]["settings"]["share_reshards"] is bool(flag)
        steps[flag] = saved["objective"]["total_s"]
    assert steps["--share-reshards"] <= steps[""] * (1 + 1e-9)
