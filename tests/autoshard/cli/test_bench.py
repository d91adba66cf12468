"""``autoshard bench``: each benchmark has its own help, and a wrong name is one line."""

from __future__ import annotations

import importlib

import pytest
from click.testing import CliRunner

from autoshard.bench.runner import BENCHMARKS
from autoshard.cli import main


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_each_benchmark_shows_its_own_help(name: str) -> None:
    result = CliRunner().invoke(main, ["bench", name, "--help"])
    assert result.exit_code == 0, result.output
    doc = importlib.import_module(BENCHMARKS[name]).__doc__
    first = " ".join(doc.strip().split("\n\n")[0].split())
    assert " ".join(result.output.split()).count(first[:60]) == 1
    assert "--quick" in result.output and "--out" in result.output


def test_the_group_lists_every_benchmark() -> None:
    result = CliRunner().invoke(main, ["bench", "--help"])
    assert result.exit_code == 0
    listed = result.output.split("Commands:")[1]
    assert [line.split()[0] for line in listed.splitlines() if line[:3].strip()] == \
        sorted(BENCHMARKS)


def test_an_unknown_benchmark_is_one_line() -> None:
    result = CliRunner().invoke(main, ["bench", "scal", "--quick"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1
    assert 'unknown benchmark "scal"' in lines[0] and "did you mean scale?" in lines[0]
