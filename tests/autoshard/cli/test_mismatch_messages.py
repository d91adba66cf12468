"""A plan checked against a model it was not made for (``verify``, ``export --model``,
``explain``): one line that names what differs the way plan.json and the model spell it.

- other ``--layers`` on a training plan: the ops that really differ, from the training step
  both sides have (not the forward graph, against which every backward op "differs"), and
  both layer counts;
- other dims (``--hidden``, ``--seq``): the first tensor whose shape differs, both shapes;
- a pipelined plan (its fingerprint is the whole forward model's, its tensors a stage
  model's training step): the pipeline's layer count, never "pass --training" (verify reads
  the training step off the plan; the flag changes nothing).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from autoshard.cli import main

SHAPE = ["--seq", "8", "--hidden", "32", "--heads", "4", "--dtype", "f32", "--batch", "4"]


def _plan(out: Path, mesh: str, layers: int) -> Path:
    result = CliRunner().invoke(main, ["plan", "--model", "gpt2", "--mesh", mesh, "--layers",
                                       str(layers), "--training", *SHAPE, "--out", str(out),
                                       "-q"])
    assert result.exit_code == 0, result.output
    return out / "plan.json"


@pytest.fixture(scope="module")
def training_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _plan(tmp_path_factory.mktemp("train"), "dp=2,tp=2", 2)


@pytest.fixture(scope="module")
def pipelined_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _plan(tmp_path_factory.mktemp("pp"), "dp=2,pp=2,tp=2", 4)


COMMANDS = {"verify": ["verify"], "export": ["export", "--format", "json"],
            "explain": ["explain", "--count", "1", "--shortlist", "1"]}


def _line(command: str, plan: Path, *args: str) -> str:
    result = CliRunner().invoke(main, [*COMMANDS[command][:1], str(plan),
                                       *COMMANDS[command][1:], "--model", "gpt2", *args])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.output)
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_other_layers_name_the_training_ops_that_differ(training_plan: Path,
                                                        command: str) -> None:
    line = _line(command, training_plan, "--layers", "3", *SHAPE)
    assert 'does not fit model "gpt2"\'s training step (--optimizer adamw' in line
    assert '120 ops only in the model ("layers.2.attn_norm.weight"' in line
    assert "only in plan.json" not in line  # every op of the 2-layer step is in the 3-layer one
    assert "plan.json has 2 layers and the model 3 (--layers)" in line
    assert "bwd/embed" not in line  # in both steps: the old message listed them as differing


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize(("option", "tensor", "planned", "given"), [
    ("--hidden", "embed.tokens", "[50257, 32]", "[50257, 64]"),
    ("--seq", "tokens", "[4, 8]", "[4, 16]"),
], ids=["hidden", "seq"])
def test_other_dims_name_the_first_tensor_that_differs(
        training_plan: Path, command: str, option: str, tensor: str, planned: str,
        given: str) -> None:
    at = SHAPE.index(option) + 1
    doubled = [*SHAPE[:at], str(2 * int(SHAPE[at])), *SHAPE[at + 1:]]
    line = _line(command, training_plan, "--layers", "2", *doubled)
    assert "fingerprint" in line
    assert (f'tensor "{tensor}" has shape {planned} in plan.json but {given} in the model'
            in line)


def test_a_pipelined_plan_is_told_its_layers_not_to_pass_training(
        pipelined_plan: Path) -> None:
    line = _line("verify", pipelined_plan, "--layers", "3", *SHAPE)
    assert "the plan pipelines 4 layers, the model has 3: --layers 4" in line
    assert "--training" not in line
