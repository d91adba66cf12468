"""Which graph a ``--model`` argument names: a zoo model, a Hugging Face ``config.json``, or a
graph JSON file.

Why here and not in the CLI: ``plan``, ``export``, ``verify`` and every sweep worker resolve
the same argument the same way, and the sweep runs without the CLI. A ``config.json`` (a JSON
object with a ``model_type``, or a checkpoint folder holding one) is built by
:func:`graphs.zoo.read_hf_config`; its fields that change the math but are not modelled come
out as one :class:`~graphs.zoo.UnmodelledFieldsWarning` (the CLI prints it as one line).
Shape overrides (``--batch``, ``--seq``, …) apply to zoo models and, for batch, seq, layers
and dtype, to configs; a graph file is planned as written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autoshard.errors import UsageError
from graphs import OpGraph, load, zoo

SHAPE_OVERRIDES = ("batch", "seq", "layers", "hidden", "ffn", "heads", "dtype", "experts",
                   "top_k", "capacity_factor", "expert_imbalance")


def flag(key: str) -> str:
    """The command-line option that sets override ``key``: options are spelled with dashes,
    so a message names the option the user typed, never the keyword argument.

    Example:
        >>> flag("top_k"), flag("batch")
        ('--top-k', '--batch')
    """
    return "--" + key.replace("_", "-")


def load_model(model: str, overrides: dict[str, Any]) -> OpGraph:
    """A zoo model by name, a Hugging Face config, or a graph JSON file.

    Raises:
        UsageError: shape overrides given for a graph file, or ones a config cannot take.
        graphs.GraphError: an unreadable or malformed file, an unknown ``model_type``.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    if model not in zoo.names() and zoo.is_hf_config(model):
        return _from_hf_config(model, given)
    if model not in zoo.names() and Path(model).is_dir():
        raise UsageError(f'--model "{model}" is a folder without a config.json; give a zoo '
                         "model name, a graph JSON file or a Hugging Face config.json")
    if model not in zoo.names() and (model.endswith(".json") or Path(model).exists()):
        if given:
            names = ", ".join(flag(k) for k in sorted(given))
            raise UsageError(f"{names} apply to zoo models only, not to the graph file {model}")
        return load(model)
    return zoo.build(model, **given)


def _from_hf_config(model: str, given: dict[str, Any]) -> OpGraph:
    refused = sorted(set(given) - set(zoo.HF_OVERRIDES))
    if refused:
        names = ", ".join(flag(k) for k in refused)
        raise UsageError(f"{names} cannot change a Hugging Face config ({model}): edit the "
                         f"file instead; {', '.join(map(flag, zoo.HF_OVERRIDES))} apply")
    return zoo.from_hf_config(model, **given)
