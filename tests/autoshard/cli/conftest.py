"""Fixtures shared by the CLI tests."""

from __future__ import annotations

import pytest

from graphs import zoo


@pytest.fixture(scope="module")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A graph JSON of a 2-layer MLP, to keep CLI tests fast."""
    path = tmp_path_factory.mktemp("model") / "mlp.json"
    zoo.build("mlp", layers=2, batch=8, seq=16, hidden=64, ffn=256).save(path)
    return str(path)
