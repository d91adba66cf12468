"""Run every costmodel docstring example (STYLE rule 10: runnable examples)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["costmodel", "costmodel.collectives", "costmodel.compute", "costmodel.link",
           "costmodel.linkspec", "costmodel.presets", "costmodel.topology_file",
           "costmodel.units"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
