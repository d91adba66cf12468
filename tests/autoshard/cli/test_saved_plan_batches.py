"""``verify``, ``explain`` and ``export --model`` take ``autoshard plan``'s batch options
(``--global-batch --micro-batch --grad-accum``), so a plan made with micro-batches can be checked
against the problem it was made for.

The plan records its micro-batch count (``objective.micro_batches``), which is the default:
``--global-batch`` alone or ``--micro-batch`` alone rebuild the planned graph; options that make
another count are refused in one line; the options' validation is the plan command's, message
for message (the oracle: ``autoshard plan`` itself, run with the same bad options).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoshard.cli import main

SHAPE = ["--model", "gpt2", "--layers", "1", "--seq", "8", "--hidden", "32", "--heads", "4",
         "--dtype", "f32"]
MESH = ["--mesh", "dp=2,tp=2"]
# 32 samples a step, 2 per micro-batch on each of dp's 2 replicas: 8 micro-batches of 4
PLANNED = ["--global-batch", "32", "--micro-batch", "2"]
COMMANDS = {"verify": ["verify"], "export": ["export", "--format", "json"],
            "explain": ["explain", "--count", "1", "--shortlist", "1"]}


@pytest.fixture(scope="module")
def plan_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("micro")
    result = CliRunner().invoke(main, ["plan", *SHAPE, *MESH, "--training", *PLANNED,
                                       "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "plan.json").read_text())
    assert data["objective"]["micro_batches"] == 8 and data["tensors"]["tokens"]["shape"][0] == 4
    return out / "plan.json"


def _run(command: str, plan_path: Path, *args: str):
    return CliRunner().invoke(main, [*COMMANDS[command][:1], str(plan_path),
                                     *COMMANDS[command][1:], *SHAPE, *args])


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("args", [
    PLANNED,
    ["--global-batch", "32"],                   # the plan's 8 micro-batches: 4 each
    ["--micro-batch", "2"],                     # 8 micro-batches of 2 on 2 replicas
    ["--global-batch", "32", "--grad-accum", "8"],
    ["--batch", "4"],                           # the graph's batch, as before
], ids=["as-planned", "global-only", "micro-only", "grad-accum", "graph-batch"])
def test_the_planned_problem_is_accepted(plan_path: Path, command: str,
                                         args: list[str]) -> None:
    result = _run(command, plan_path, *args)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("args", "runs"), [
    (["--global-batch", "32", "--micro-batch", "4"], "4"),
    (["--grad-accum", "4"], "4"),
    (["--global-batch", "64", "--micro-batch", "2"], "16"),
], ids=["other-micro-batch", "other-grad-accum", "other-global-batch"])
def test_another_micro_batch_count_is_one_line(plan_path: Path, command: str,
                                               args: list[str], runs: str) -> None:
    result = _run(command, plan_path, *args)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "Traceback" not in result.output
    given = " ".join(args)
    assert (f"the plan runs 8 micro-batches per step, but with {given} a step on mesh "
            f"dp=2,tp=2 runs {runs}; pass the options the plan was made with") in lines[0]


@pytest.mark.parametrize("args", [
    ["--micro-batch", "0"],
    ["--grad-accum", "-1"],
    ["--batch", "4", "--global-batch", "32"],
    ["--global-batch", "32", "--micro-batch", "2", "--grad-accum", "8"],
    ["--global-batch", "30", "--micro-batch", "2"],
], ids=["zero-micro", "negative-accum", "batch-and-global", "micro-and-accum", "indivisible"])
def test_validation_and_messages_are_the_plan_commands(plan_path: Path,
                                                       args: list[str]) -> None:
    planned = CliRunner().invoke(main, ["plan", *SHAPE, *MESH, "--training", *args])
    assert planned.exit_code == 2
    for command in COMMANDS:
        result = _run(command, plan_path, *args)
        assert result.exit_code == 2 and result.stderr == planned.stderr, (command, args)


def test_without_options_the_mismatch_says_to_pass_them(plan_path: Path) -> None:
    result = _run("verify", plan_path)  # gpt2's own batch (8), not the planned 4
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1
    assert 'tensor "tokens" has shape [4, 8] in plan.json but [8, 8] in the model' in lines[0]
    assert "the plan runs 8 micro-batches per step: pass the --global-batch" in lines[0]


def test_export_without_model_says_the_options_describe_it(plan_path: Path) -> None:
    result = CliRunner().invoke(main, ["export", str(plan_path), "--global-batch", "32"])
    assert result.exit_code == 2
    assert "--global-batch describe the model" in result.stderr and "--model" in result.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_options_are_the_plan_commands_own(command: str) -> None:
    """One definition: the same names, types and help (the saved-plan commands add how the
    default is read off the plan to --grad-accum)."""
    def options(name: str) -> dict[str, tuple]:
        return {p.name: (p.opts, p.type, p.help) for p in main.commands[name].params
                if p.name in ("global_batch", "micro_batch", "grad_accum")}

    planned, saved = options("plan"), options(command)
    assert set(saved) == {"global_batch", "micro_batch", "grad_accum"}
    for name in ("global_batch", "micro_batch"):
        assert saved[name] == planned[name]
    assert saved["grad_accum"][2].startswith(planned["grad_accum"][2])
    assert "the plan's own micro-batch count" in saved["grad_accum"][2]
