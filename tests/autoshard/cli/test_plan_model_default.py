"""``verify`` and ``explain`` without ``--model`` check the plan against the model plan.json
names (with the same shape options as the plan command), and say in one line what to pass
when that name does not load here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.cli import run

SHAPE = ("--layers", "2", "--seq", "32", "--hidden", "64", "--ffn", "128", "--heads", "4")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plan") / "out"
    result = run("plan", "--model", "gpt2", *SHAPE, "--mesh", "dp=2,tp=2", "--training",
                 "--out", str(out), "--quiet")
    assert result.exit_code == 0, result.output
    return out / "plan.json"


FEW = {"verify": (), "explain": ("--count", "2", "--shortlist", "2")}  # a quick explain


@pytest.mark.parametrize("command", ["verify", "explain"])
def test_the_named_model_is_the_default(saved, command) -> None:
    without = run(command, str(saved), *SHAPE, *FEW[command])
    given = run(command, str(saved), "--model", "gpt2", *SHAPE, *FEW[command])
    assert without.exit_code == 0, without.output
    timing = re.compile(r"\(\d+(\.\d+)? s\)")  # verify's own run time
    assert timing.sub("", without.output) == timing.sub("", given.output)


@pytest.mark.parametrize("command", ["verify", "explain"])
def test_a_named_model_that_does_not_load_is_one_line(saved, tmp_path, command) -> None:
    edited = tmp_path / "plan.json"
    edited.write_text(json.dumps({**json.loads(saved.read_text()), "model": "no-such-model"}))
    result = run(command, str(edited), *SHAPE)
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and '"no-such-model"' in lines[0] and "pass --model" in lines[0]
