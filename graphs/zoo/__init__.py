"""The model zoo: published model shapes as operator graphs, by name.

Why it exists: planning needs real shapes (GPT-2, Llama 2/3/3.1) without importing a framework,
and "what if hidden were 8192" experiments need the same models with overrides. Each model is
a frozen :class:`ModelConfig` (published sizes, checked on construction) turned into an
:class:`~graphs.OpGraph` of one forward pass by :func:`build`. :func:`param_count` is a closed
form independent of the graph; the tests hold the two equal and both to the published counts.

Models described by a Hugging Face ``config.json`` (``llama``, ``mistral``, ``qwen2``, ``gpt2``,
and the mixtures of experts ``mixtral`` and ``qwen2_moe``)
map onto the same :class:`ModelConfig` and builder: :func:`read_hf_config`,
:func:`from_hf_config`, :func:`is_hf_config` (see :mod:`graphs.zoo.hf`).

Example:
    >>> from graphs import zoo
    >>> zoo.config("llama3-8b").kv_heads
    8
    >>> round(zoo.param_count("gpt2") / 1e6, 1)
    124.4
    >>> graph = zoo.build("gpt2", layers=2, seq=128, dtype="f32")
"""

from __future__ import annotations

from typing import Any

from graphs.opgraph import OpGraph
from graphs.zoo import counts
from graphs.zoo.configs import (
    OVERRIDES,
    Activation,
    Family,
    ModelConfig,
    Norm,
    Position,
    llama_ffn,
    names,
)
from graphs.zoo.configs import config as _config
from graphs.zoo.errors import (
    HFConfigError,
    ModelConfigError,
    UnknownModelError,
    UnknownModelTypeError,
    UnmodelledFieldsWarning,
)
from graphs.zoo.hf import (
    HF_OVERRIDES,
    HFModel,
    from_hf_config,
    hf_model_types,
    is_hf_config,
    read_hf_config,
)
from graphs.zoo.models import build_graph
from graphs.zoo.recover import config_of

__all__ = [
    "HF_OVERRIDES",
    "OVERRIDES",
    "Activation",
    "Family",
    "HFConfigError",
    "HFModel",
    "ModelConfig",
    "ModelConfigError",
    "Norm",
    "Position",
    "UnknownModelError",
    "UnknownModelTypeError",
    "UnmodelledFieldsWarning",
    "build",
    "build_config",
    "config",
    "config_of",
    "from_hf_config",
    "hf_model_types",
    "is_hf_config",
    "llama_ffn",
    "names",
    "param_count",
    "read_hf_config",
]


def config(name: str, **overrides: Any) -> ModelConfig:
    """The config of zoo model ``name`` with overrides applied.

    Args:
        name: a zoo model name (see :func:`names`).
        **overrides: any of batch, seq, layers, hidden, ffn, heads, kv_heads, vocab, dtype
            (dtype as a :class:`~graphs.DType` or a string such as ``"bf16"``); None is ignored.

    Returns:
        The frozen, validated config.

    Raises:
        UnknownModelError: ``name`` is not in the zoo (close names are suggested).
        ModelConfigError: an unknown or inapplicable override, or sizes that do not fit
            (heads not dividing hidden, seq beyond a learned-position table, …).

    Example:
        >>> config("gpt2", layers=2).layers
        2
    """
    return _config(name, **overrides)


def build(name: str, **overrides: Any) -> OpGraph:
    """The forward graph of zoo model ``name``; same arguments and errors as :func:`config`.

    Example:
        >>> graph = build("mlp", layers=3, hidden=64, ffn=256, batch=2, seq=4)
        >>> graph.name
        'mlp'
    """
    return build_graph(_config(name, **overrides))


def build_config(model: ModelConfig) -> OpGraph:
    """The forward graph of an explicit config (e.g. one made with ``dataclasses.replace``)."""
    return build_graph(model)


def param_count(model: str | ModelConfig, **overrides: Any) -> int:
    """Trainable parameters by closed form (tied weights counted once), without a graph.

    Example:
        >>> param_count("llama3-8b")
        8030261248
    """
    model_config = model if isinstance(model, ModelConfig) else _config(model, **overrides)
    return counts.param_count(model_config)
