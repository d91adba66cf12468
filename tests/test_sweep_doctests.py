"""Run every sweep docstring example (STYLE rule 10: runnable examples)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["autoshard.sweep_points", "autoshard.sweep"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # a model name must not collide with a file in the cwd
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
