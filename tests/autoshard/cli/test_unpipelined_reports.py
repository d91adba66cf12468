"""An unpipelined plan's costs.csv and reshards.csv stay byte for byte what they were before
pipelined plans got per-stage reports: the files in ``tests/data/unpipelined_reports/`` were
written by ``main`` at eacef49 (the command is in :data:`ARGS`; see tests/data/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run

DATA = Path(__file__).parents[2] / "data" / "unpipelined_reports"
ARGS = ("--model", "gpt2", "--layers", "2", "--seq", "64", "--hidden", "64", "--ffn", "128",
        "--heads", "4", "--training", "--mesh", "dp=2,tp=2", "--global-batch", "8",
        "--micro-batch", "2", "--memory", "31MiB")


@pytest.mark.parametrize("name", ["costs.csv", "reshards.csv"])
def test_the_reports_are_the_ones_written_before(tmp_path, name) -> None:
    result = run("plan", *ARGS, "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes()
