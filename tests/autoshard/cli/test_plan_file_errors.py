"""A plan file that is JSON but not a plan, or a hand-edited plan.json with a field of the
wrong type: every command that reads a plan says so in one line naming the file (its path)
and the field, and exits 2 (no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run


@pytest.fixture(scope="module")
def saved_plan(tmp_path_factory, small_model) -> Path:
    out = tmp_path_factory.mktemp("plan") / "out"
    result = run("plan", "--model", small_model, "--mesh", "dp=2,tp=2", "--out", str(out),
                 "--quiet")
    assert result.exit_code == 0, result.output
    return out / "plan.json"


def commands(path: Path, model: str, other: Path) -> dict[str, list[str]]:
    out = path.parent / "unused"
    return {
        "export": ["export", str(path)],
        "verify": ["verify", str(path), "--model", model],
        "explain": ["explain", str(path), "--model", model],
        "trace": ["trace", str(path), "--out", str(out / "trace.json")],
        "diff": ["diff", str(other), str(path)],
        "plan --pin": ["plan", "--model", model, "--mesh", "dp=2,tp=2", "--pin", str(path),
                       "--out", str(out / "plan")],
    }


COMMANDS = ["export", "verify", "explain", "trace", "diff", "plan --pin"]


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("text", ["[1, 2]", '"str"', "null", "3"])
def test_json_that_is_not_an_object_is_not_a_plan(tmp_path, small_model, saved_plan,
                                                  command, text) -> None:
    path = tmp_path / "list.json"
    path.write_text(text)
    line = one_line_error(run(*commands(path, small_model, saved_plan)[command]))
    assert f"plan file {path}: not a plan (a JSON object written by autoshard plan --out)" \
        in line


@pytest.mark.parametrize(("edit", "message"), [
    ({"objective": "x"}, 'field "objective" must be an object, not a string'),
    ({"mesh": "dp=2"}, 'field "mesh" must be an object, not a string'),
    ({"mesh": {"axes": "dp"}}, 'field "mesh.axes" must be a list, not a string'),
    ({"mesh": {"axes": [{"name": "dp", "size": "2"}]}},
     'field "mesh.axes[0].size" must be an integer, not a string'),
    ({"objective": {"a": 1}}, 'field "objective" has unknown key "a"'),
    ({"memory": []}, 'field "memory" must be an object, not a list'),
    ({"tensors": [1]}, 'field "tensors" must be an object, not a list'),
    ({"ops": {"x": 1}}, 'field "ops.x" must be an object, not a number'),
    ({"reshards": None}, 'field "reshards" must be a list, not null'),
    ({"model": None}, 'field "model" must be a string, not null'),
])
@pytest.mark.parametrize("command", ["export", "trace"])
def test_a_malformed_field_is_named_with_the_file(tmp_path, small_model, saved_plan,
                                                 edit, message, command) -> None:
    path = tmp_path / "p" / "plan.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**json.loads(saved_plan.read_text()), **edit}))
    line = one_line_error(run(*commands(path, small_model, saved_plan)[command]))
    assert f"plan file {path}: {message}" in line


def test_a_missing_objective_field_is_named(tmp_path, small_model, saved_plan) -> None:
    data = json.loads(saved_plan.read_text())
    del data["objective"]["total_s"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    line = one_line_error(run("export", str(path)))
    assert f'plan file {path}: field "objective.total_s" is missing' in line


def test_export_names_the_plan_file_for_a_bad_placement(tmp_path, saved_plan) -> None:
    data = json.loads(saved_plan.read_text())
    name = next(iter(data["tensors"]))
    data["tensors"][name]["placements"] = ["Q", "R"]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    line = one_line_error(run("export", str(path)))
    assert line.startswith(f"autoshard: error: plan file {path}: tensor \"{name}\"")


@pytest.mark.parametrize("command", COMMANDS)
def test_the_directory_plan_out_wrote_stands_for_its_plan_json(tmp_path, small_model,
                                                              saved_plan, command) -> None:
    args = commands(saved_plan.parent, small_model, saved_plan)[command]
    if command == "trace":
        args = ["trace", str(saved_plan.parent), "--out", str(tmp_path / "t.json")]
    if command == "plan --pin":
        args = [*args[:-1], str(tmp_path / "pinned")]
    by_dir = run(*args)
    assert by_dir.exit_code == 0, by_dir.output
    if command in ("export", "diff"):  # what it read is the plan itself
        by_file = run(*[str(saved_plan) if a == str(saved_plan.parent) else a for a in args])
        assert by_dir.output == by_file.output


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_without_a_plan_is_one_line(tmp_path, small_model, saved_plan,
                                                command) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    line = one_line_error(run(*commands(empty, small_model, saved_plan)[command]))
    assert str(empty) in line and "plan.json" in line
