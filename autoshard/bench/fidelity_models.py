"""Which model graph a published run trained, by the name its source prints.

Llama names map onto the zoo. Llama 3.1 8B/70B have the shapes of Llama 3 8B/70B (the same
dim, layers, heads, KV heads, FFN rule and vocabulary in meta-llama/llama-models
``models/sku_list.py``; only the RoPE scaling and context length differ, which cost nothing
here), so they use ``llama3-8b`` and ``llama3-70b``.

MPT (mosaicml/llm-foundry, ``scripts/train/yamls/pretrain/mpt-<size>.yaml`` at commit
5e85bd62d4ec9e13353ca95877477602ab538e5b, the commit of its benchmark tables): GPT-2
architecture (LayerNorm, GELU MLP of 4·d_model, biases, learned positions sized to the run's
``max_seq_len``, tied embeddings) with ``vocab_size`` 50368 and the (d_model, n_heads, n_layers)
below. The closed-form parameter count of every MPT config equals the ``NumParams`` the tables
print for it (the bench reports both), which checks the mapping independently.
"""

from __future__ import annotations

import dataclasses
import re

from graphs import zoo
from graphs.zoo import ModelConfig

_LLAMA = {
    "llama27b": "llama2-7b", "llama213b": "llama2-13b", "llama270b": "llama2-70b",
    "llama38b": "llama3-8b", "llama318b": "llama3-8b",
    "llama370b": "llama3-70b", "llama3170b": "llama3-70b",
    "llama31405b": "llama3.1-405b",
}
MPT_VOCAB = 50368
MPT_SHAPES = {  # size: (d_model, n_heads, n_layers)
    "125m": (768, 12, 12), "350m": (1024, 16, 24), "760m": (1536, 12, 24),
    "1b": (2048, 16, 24), "3b": (2560, 20, 32), "7b": (4096, 32, 32), "13b": (5120, 40, 40),
    "30b": (7168, 56, 48), "70b": (8192, 64, 80),
}


def model_key(published: str) -> str | None:
    """The bench's name for a published model name, or None when no graph describes it.

    Example:
        >>> model_key("Llama 3.1 8B"), model_key("LLAMA3_70B"), model_key("mpt-7b")
        ('llama3-8b', 'llama3-70b', 'mpt-7b')
        >>> model_key("Nemotron-22B") is None
        True
    """
    text = published.strip().lower()
    if text.startswith("mpt-") and text[4:] in MPT_SHAPES:
        return text
    return _LLAMA.get(re.sub(r"[^a-z0-9]", "", text))


def model_config(key: str, *, seq: int, batch: int) -> ModelConfig:
    """The config of ``key`` (from :func:`model_key`) for one micro-batch of ``batch``
    sequences of ``seq`` tokens.

    Example:
        >>> model_config("mpt-7b", seq=2048, batch=8).vocab
        50368
        >>> zoo.param_count(model_config("mpt-7b", seq=2048, batch=8))  # llm-foundry's NumParams
        6658859008
    """
    if key.startswith("mpt-"):
        hidden, heads, layers = MPT_SHAPES[key[4:]]
        base = zoo.config("gpt2", hidden=hidden, heads=heads, layers=layers, vocab=MPT_VOCAB)
        source = f"mosaicml/llm-foundry scripts/train/yamls/pretrain/{key}.yaml @5e85bd62d"
        return dataclasses.replace(base, name=key, context=seq, seq=seq, batch=batch,
                                   source=source)
    return zoo.config(key, seq=seq, batch=batch)
