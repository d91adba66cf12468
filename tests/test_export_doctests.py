"""Run every exporter docstring example (STYLE rule 10: runnable examples)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "autoshard.export.check",
    "autoshard.export.dtensor",
    "autoshard.export.hlo",
    "autoshard.export.hlo_value",
    "autoshard.export.jax_spec",
    "autoshard.export.layout",
    "autoshard.export.lowering",
    "autoshard.export.plan_view",
    "autoshard.export.shardy",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
