"""Output paths and unreadable inputs, as a new user gets them wrong: every case is one
``autoshard: error:`` line with exit 2, found before the work where the path says so, and no
file the user had is changed (found on a walk through the CLI: each was a traceback, or a
silent overwrite)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoshard.output_paths import write_refused
from tests.support.cli import run


def one_error_line(result) -> str:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) >= 1 and lines[-1].startswith("autoshard: error: "), result.output
    assert "Traceback" not in result.output
    return lines[-1]


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory, small_model) -> Path:
    out = tmp_path_factory.mktemp("paths") / "plan"
    result = run("plan", "--model", small_model, "--mesh", "dp=2", "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    return out


def test_diff_csv_keeps_an_existing_file_unless_forced(plan_dir, tmp_path) -> None:
    plan = str(plan_dir / "plan.json")
    mine = tmp_path / "mine.csv"
    mine.write_text("mine")
    line = one_error_line(run("diff", plan, plan, "--csv", str(mine)))
    assert "--force" in line and mine.read_text() == "mine"
    forced = run("diff", plan, plan, "--csv", str(mine), "--force")
    assert forced.exit_code == 0, forced.output
    assert mine.read_text().startswith("section,")


def test_diff_csv_never_writes_over_a_plan_it_compares(plan_dir) -> None:
    plan = plan_dir / "plan.json"
    before = plan.read_bytes()
    line = one_error_line(run("diff", str(plan), str(plan), "--csv", str(plan), "--force"))
    assert "--csv" in line and plan.read_bytes() == before


@pytest.mark.parametrize("bad", ["a_dir", "a_file/x.csv"])
def test_diff_csv_path_that_cannot_be_a_file(plan_dir, tmp_path, bad) -> None:
    (tmp_path / "a_dir").mkdir()
    (tmp_path / "a_file").write_text("mine")
    plan = str(plan_dir / "plan.json")
    line = one_error_line(run("diff", plan, plan, "--csv", str(tmp_path / bad)))
    assert str(tmp_path / bad) in line
    assert (tmp_path / "a_file").read_text() == "mine"


def test_plan_trace_into_its_own_out_is_refused_before_solving(small_model, tmp_path) -> None:
    out = tmp_path / "out"
    line = one_error_line(run("plan", "--model", small_model, "--mesh", "dp=2", "--out",
                              str(out), "--trace", str(out / "plan.json"), "--quiet"))
    assert "--trace" in line and not out.exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_path_the_system_refuses_is_one_line(plan_dir) -> None:
    # /proc takes no new directories, even for root: only the write itself finds out
    target = "/proc/autoshard-test/trace.json"
    line = one_error_line(run("trace", str(plan_dir / "plan.json"), "--out", target))
    assert '"/proc/autoshard-test' in line and "no such file or directory" in line


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize(("option", "target", "needle"), [
    ("--out", "/proc/autoshard-test", 'cannot create a directory in "/proc"'),
    ("--out", "/proc/autoshard-test/deeper", 'cannot create a directory in "/proc"'),
    ("--out", "/proc/self", 'cannot create a file in "/proc/self"'),
    ("--trace", "/proc/autoshard-test.json", 'cannot create a file in "/proc"'),
], ids=["out-dir", "out-dir-deeper", "out-existing-dir", "trace-file"])
def test_a_path_the_system_refuses_is_found_before_solving(small_model, monkeypatch, option,
                                                           target, needle) -> None:
    # /proc exists and looks like any directory: only asking the system finds the refusal
    def never(*args, **kwargs):
        raise AssertionError("the plan was solved before its output path was checked")

    monkeypatch.setattr("autoshard.cli.plan.load_model", never)
    line = one_error_line(run("plan", "--model", small_model, "--mesh", "dp=2", option, target,
                              "--quiet"))
    assert f'{option} "{target}"' in line and needle in line and "no such file" in line


def test_the_system_check_leaves_nothing_behind_and_keeps_the_users_files(
        tmp_path) -> None:
    mine = tmp_path / "mine.csv"
    mine.write_text("mine")
    os.utime(mine, (0, 0))
    assert write_refused(mine, directory=False) is None
    assert write_refused(tmp_path / "new" / "deeper", directory=True) is None
    assert write_refused(tmp_path, directory=True) is None
    assert sorted(tmp_path.iterdir()) == [mine]
    assert mine.read_text() == "mine" and mine.stat().st_mtime == 0


def test_a_model_file_that_is_not_text(tmp_path) -> None:
    model = tmp_path / "binary.json"
    model.write_bytes(b"\xff\xfe\x00\x01 not text")
    line = one_error_line(run("plan", "--model", str(model), "--mesh", "dp=2"))
    assert "binary.json" in line and "UTF-8" in line


def test_import_out_that_is_a_directory(tmp_path) -> None:
    line = one_error_line(run("import", "torch", "nowhere:make", "--out", str(tmp_path),
                              "--force"))
    assert "is a directory" in line


@pytest.mark.jax
def test_the_jax_script_says_how_many_devices_it_needs(plan_dir, tmp_path) -> None:
    script = tmp_path / "plan_jax.py"
    result = run("export", str(plan_dir / "plan.json"), "--format", "jax", "--out", str(script))
    assert result.exit_code == 0, result.output
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode != 0
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=2" in done.stderr
    assert "Traceback" not in done.stderr


def test_export_out_dash_is_stdout(plan_dir, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run("export", str(plan_dir / "plan.json"), "--format", "json", "--out", "-")
    assert result.exit_code == 0, result.output
    assert result.output == run("export", str(plan_dir / "plan.json"), "--format",
                                "json").output
    assert not (tmp_path / "-").exists()


def test_export_never_writes_over_its_plan(plan_dir) -> None:
    plan = plan_dir / "plan.json"
    before = plan.read_bytes()
    line = one_error_line(run("export", str(plan), "--format", "hlo", "--out", str(plan),
                              "--force"))
    assert "--out" in line and plan.read_bytes() == before


@pytest.mark.parametrize(("mesh", "needle"), [
    ("dp=\u0662", "must look like NAME=SIZE"),          # an Arabic-Indic two
    ("dp=99999999999999999999", "devices; plan meshes of at most 1,048,576"),
])
def test_a_mesh_size_that_is_no_size(mesh, needle) -> None:
    mesh = mesh.encode().decode("unicode_escape")
    line = one_error_line(run("plan", "--mesh", mesh))
    assert needle in line


def test_a_link_given_twice_for_one_axis(small_model) -> None:
    line = one_error_line(run("plan", "--model", small_model, "--mesh", "dp=2", "--link",
                              "dp=nvlink", "--link", "dp=ib"))
    assert 'axis "dp" twice' in line
