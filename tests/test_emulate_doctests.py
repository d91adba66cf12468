"""Run every emulator and verification docstring example (STYLE rule 10: runnable examples)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["autoshard.emulate", "autoshard.emulate_layout", "autoshard.emulate_reshard",
           "autoshard.emulate_values", "autoshard.verify", "autoshard.cli_verify"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
