"""What a pipelined plan's summary claims: the whole model's parameters (its tensors are one
stage model's), and a solver verdict that names the stage model instead of bounding the step."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from autoshard.planning.record import Plan
from autoshard.planning.summary import summary_text
from graphs import zoo
from tests.support.cli import run

SHAPE = {"layers": 8, "seq": 128, "hidden": 256, "ffn": 512, "heads": 8}
ARGS = ("--model", "llama3-8b", *(f"--{k}={v}" for k, v in SHAPE.items()), "--training",
        "--global-batch", "32", "--micro-batch", "2", "--time-limit", "60")
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@pytest.fixture(scope="module")
def pipelined(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Plan]:
    out = tmp_path_factory.mktemp("pp")
    result = run("plan", *ARGS, "--mesh", "dp=2,pp=2,tp=2", "--out", str(out))
    assert result.exit_code == 0, result.output
    return result.output, Plan.load(out / "plan.json")


def _count(output: str) -> int:
    found = re.search(r"^model .*\(([\d,]+) parameters\)", output, re.MULTILINE)
    assert found, output
    return int(found[1].replace(",", ""))


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) * UNITS[unit]


def test_pipelined_plan_counts_the_whole_models_parameters(pipelined, tmp_path) -> None:
    output, plan = pipelined
    whole = zoo.param_count("llama3-8b", **SHAPE)
    assert _count(output) == whole
    assert plan.model_parameters == whole  # read back from plan.json
    flat = run("plan", *ARGS, "--mesh", "dp=2,tp=2", "--out", str(tmp_path))
    assert flat.exit_code == 0, flat.output
    assert _count(flat.output) == whole
    assert json.loads((tmp_path / "plan.json").read_text())["model_parameters"] == whole


def test_pipelined_solver_line_names_the_stage_model_and_bounds_no_more_than_the_step(
        pipelined) -> None:
    output, plan = pipelined
    line = next(x for x in output.splitlines() if x.startswith("solver"))
    assert "the stage model" in line and "bubble and transfers" in line
    step = _seconds(re.search(r"^step time\s+([\d.]+ \w+)", output, re.MULTILINE)[1])
    assert step == pytest.approx(plan.objective.total_s, rel=1e-3)
    for bound in re.findall(r"([\d.]+ (?:s|ms|us))", line.split("; solve")[0]):
        assert _seconds(bound) <= step * (1 + 1e-3), line  # nothing stated above the step
    assert "lower bound" not in line.split("the stage model")[0]  # no bound claimed for it


def test_pipelined_gap_warning_says_the_gap_is_the_stage_models(pipelined) -> None:
    from autoshard.cli.plan import solver_warnings

    _, plan = pipelined
    stopped = dataclasses.replace(plan.objective, optimal=False, gap=0.005, status="feasible")
    lines = solver_warnings(dataclasses.replace(plan, objective=stopped), 0.01)
    assert len(lines) == 1 and "stage model" in lines[0]
    assert "not the pipelined step's" in lines[0]
    text = summary_text(dataclasses.replace(plan, objective=stopped))
    solver = next(x for x in text.splitlines() if x.startswith("solver"))
    assert "the stage model within 0.5000% of its own lower bound" in solver


@pytest.mark.parametrize("command", ["plan", "verify", "explain", "export"])
def test_batch_has_help(command) -> None:
    result = run(command, "--help")
    assert result.exit_code == 0
    flat = " ".join(result.output.split())
    assert "--batch INTEGER Samples in one micro-batch over the whole mesh" in flat
