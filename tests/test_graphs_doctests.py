"""Run the graphs IR docstring examples (STYLE rule 10: runnable examples)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["graphs.opgraph", "graphs.io", "graphs.signature", "graphs.ops.einsum",
           "graphs.autodiff", "graphs.autodiff_eval"]


@pytest.mark.parametrize("name", MODULES, ids=MODULES)
def test_doctests(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
