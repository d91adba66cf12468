"""``autoshard import jax MODULE:FUNCTION``: writes the graph, one summary line, never
overwrites without --force, and every failure is one stderr line with exit 2."""

from __future__ import annotations

import sys
import textwrap

import pytest
from click.testing import CliRunner

import graphs
from autoshard.cli import main

pytestmark = pytest.mark.jax

USER_MODULE = textwrap.dedent("""
    import jax.numpy as jnp
    import numpy as np

    def model(params, x):
        return jnp.cumsum(x @ params["w"], axis=1).sum()

    def example():
        return model, ({"w": np.ones((4, 3), np.float32)}, np.ones((2, 4), np.float32))

    def not_a_pair():
        return 3
""")


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "usermodel_cli.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "usermodel_cli"
    sys.modules.pop("usermodel_cli", None)


def _run(*args: str):
    return CliRunner().invoke(main, ["import", "jax", *args])


def test_writes_the_gpt_example_and_refuses_to_overwrite(tmp_path) -> None:
    out = tmp_path / "graph.json"
    result = _run("autoshard.bench.jax_models:gpt_example", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1 and "ops" in result.output
    graph = graphs.load(out)
    assert "layers.1.wq" in graph.tensors and "grad/layers.1.wq" in graph.outputs
    again = _run("autoshard.bench.jax_models:gpt_example", "--out", str(out))
    assert again.exit_code == 2 and "--force" in again.output
    forced = _run("autoshard.bench.jax_models:gpt_example", "--out", str(out), "--force")
    assert forced.exit_code == 0


def test_unmapped_is_a_warning_line_or_a_strict_error(user_module, tmp_path) -> None:
    result = _run(f"{user_module}:example", "--out", str(tmp_path / "g.json"))
    assert result.exit_code == 0
    assert "warning" in result.output and "cumsum x1" in result.output
    strict = _run(f"{user_module}:example", "--out", str(tmp_path / "s.json"), "--strict")
    assert strict.exit_code == 2
    assert strict.output.strip().count("\n") == 0 and "cumsum x1" in strict.output


@pytest.mark.parametrize(("target", "message"), [
    ("nocolon", "MODULE:FACTORY"),
    ("no_such_module_xyz:f", "cannot import module"),
    ("usermodel_cli:missing", 'has no attribute "missing"'),
    ("usermodel_cli:not_a_pair", "must return (model, example_inputs)"),
], ids=["syntax", "module", "function", "contract"])
def test_bad_targets_are_one_line(user_module, tmp_path, target: str, message: str) -> None:
    result = _run(target, "--out", str(tmp_path / "g.json"))
    assert result.exit_code == 2
    assert message in result.output and result.output.strip().count("\n") == 0
    assert "Traceback" not in result.output
