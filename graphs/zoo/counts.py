"""Closed-form parameter counts, computed from a config without building a graph.

Why a second count: the graph's count (the sum of its PARAM tensors) and this formula are
written independently, so tests that compare them catch a builder that forgets or duplicates
a weight, and `autoshard models` can list a 405B model without building it.

Per decoder layer with hidden h, q width a = heads·d, kv width k = kv_heads·d, FFN f:
attention h·a + 2·h·k + a·h (+ a + 2k biases on q, k, v when ``bias`` or ``qkv_bias``, + h on
the output when ``bias``), FFN (3 if gated else 2)·h·f (+ f + h biases),
two norms of h each (2h each with LayerNorm's bias); an MoE layer has, instead of the FFN, a
router h·E, E experts of 3·h·f_e and a shared expert 3·h·f_s (+ h for its gate). Around the
layers: token table V·h, learned positions context·h, a final norm, and an untied head h·V.

Example (GPT-2 small: h 768, 12 layers, V 50257, context 1024, tied):
12·(12h² + 13h) + V·h + 1024·h + 2h = 124,439,808.

    >>> from graphs.zoo.configs import config
    >>> param_count(config("gpt2"))
    124439808
    >>> h = 768
    >>> 12 * (12 * h * h + 13 * h) + 50257 * h + 1024 * h + 2 * h
    124439808
"""

from __future__ import annotations

from graphs.zoo.configs import Family, ModelConfig, Norm, Position


def norm_params(config: ModelConfig) -> int:
    """Weights of one normalization layer."""
    if config.norm is Norm.LAYER_NORM:
        return 2 * config.hidden
    if config.norm is Norm.RMS_NORM:
        return config.hidden
    return 0


def attention_params(config: ModelConfig) -> int:
    if config.mla is not None:
        return mla_params(config)
    q_width = config.heads * config.head_dim
    kv_width = config.kv_heads * config.head_dim
    weights = 2 * config.hidden * q_width + 2 * config.hidden * kv_width
    qkv_biases = q_width + 2 * kv_width if config.bias or config.qkv_bias else 0
    o_bias = config.hidden if config.bias else 0
    return weights + qkv_biases + o_bias


def mla_params(config: ModelConfig) -> int:
    """Multi-head latent attention (Hugging Face ``DeepseekV3Attention``): q_a h·r_q, its norm
    r_q, q_b r_q·H·(n + r) (or q h·H·(n + r) without a q rank), kv_a h·(r_kv + r), its norm
    r_kv, kv_b r_kv·H·(n + v), o H·v·h."""
    mla, h, heads = config.mla, config.hidden, config.heads
    if mla is None:
        raise AssertionError(f'model "{config.name}" has no latent attention')
    qk = heads * mla.qk_head_dim
    q = h * qk if mla.q_lora_rank is None else \
        h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * qk
    kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank \
        + mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    return q + kv + heads * mla.v_head_dim * h


def ffn_params(config: ModelConfig) -> int:
    matrices = 3 if config.gated else 2
    biases = config.ffn + config.hidden if config.bias else 0
    return matrices * config.hidden * config.ffn + biases


def moe_params(config: ModelConfig) -> int:
    """A routed-experts FFN: the router h·E, E SwiGLU experts 3·h·f_e each, a shared SwiGLU
    expert 3·h·f_s and its gate h·1 when present."""
    moe = config.moe
    if moe is None:
        raise AssertionError(f'model "{config.name}" has no mixture of experts')
    hidden = config.hidden
    shared = 3 * hidden * moe.shared_ffn + (hidden if moe.shared_gate else 0) \
        if moe.shared_ffn else 0
    return hidden * moe.experts + moe.experts * 3 * hidden * moe.expert_ffn + shared


def layer_params(config: ModelConfig, index: int = 0) -> int:
    """Block ``index``: for MLP just the two matrices; else attention, FFN (routed experts in
    an MoE layer) and two norms."""
    if config.family is Family.MLP:
        return ffn_params(config)
    moe = config.moe
    ffn = moe_params(config) if moe is not None and moe.is_moe_layer(index) \
        else ffn_params(config)
    return attention_params(config) + ffn + 2 * norm_params(config)


def param_count(config: ModelConfig) -> int:
    """Total trainable parameters of the model ``config`` describes (tied weights once)."""
    total = sum(layer_params(config, index) for index in range(config.layers))
    if config.vocab is None:
        return total
    total += config.vocab * config.hidden + norm_params(config)
    if config.position is Position.LEARNED and config.context is not None:
        total += config.context * config.hidden
    if not config.tied_embeddings:
        total += config.hidden * config.vocab
    return total
