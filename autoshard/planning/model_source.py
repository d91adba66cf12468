"""Which graph a ``--model`` argument names: a zoo model, or a graph JSON file.

Why here and not in the CLI: ``plan``, ``export``, ``verify`` and every sweep worker resolve
the same argument the same way, and the sweep runs without the CLI. Shape overrides
(``--batch``, ``--seq``, …) apply to zoo models only; a graph file is planned as written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autoshard.errors import UsageError
from graphs import OpGraph, load, zoo

SHAPE_OVERRIDES = ("batch", "seq", "layers", "hidden", "ffn", "heads", "dtype")


def load_model(model: str, overrides: dict[str, Any]) -> OpGraph:
    """A zoo model by name, or a graph JSON file when the argument looks like a path.

    Raises:
        UsageError: shape overrides given for a graph file.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    if model not in zoo.names() and (model.endswith(".json") or Path(model).exists()):
        if given:
            names = ", ".join(f"--{k}" for k in sorted(given))
            raise UsageError(f"{names} apply to zoo models only, not to the graph file {model}")
        return load(model)
    return zoo.build(model, **given)
