"""Config fields that change a Hugging Face model's math but that the zoo graph does not model.

Why: a plan is only as right as its graph, and a user planning Mistral at seq 32768 should
learn that the graph attends over all 32768 positions while the model attends over its
4096-token window. Each rule reads the field the way the Hugging Face model class does
(``transformers`` ``src/transformers/models/<type>/modeling_<type>.py`` and
``configuration_<type>.py``, including each class's default for an absent field) and returns
one short description, or None when the field is absent, at its neutral value, or without
effect at the planned shapes (a sliding window no shorter than seq). The descriptions are
joined into the one warning line of :func:`graphs.zoo.hf.read_hf_config`.

Deliberately not warned: ``rope_scaling`` / ``rope_parameters`` / ``rope_theta``, because the
graph reads the rotary tables ``rope.cos`` / ``rope.sin`` as inputs and every Hugging Face
rope type (linear, dynamic, yarn, longrope, llama3) only changes the values of those tables
(yarn's attention factor included: ``cos = emb.cos() * attention_scaling``); norm epsilons,
initializer ranges, token ids and cache flags, which change neither shapes nor cost.
"""

from __future__ import annotations

from collections.abc import Callable

from graphs.zoo.configs import ModelConfig
from graphs.zoo.hf_document import ConfigDocument

Rule = Callable[[ConfigDocument, ModelConfig], "str | None"]

MOE_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
              "moe_intermediate_size")
"""Mixture-of-experts sizes (Mixtral, Qwen2-MoE, DeepSeek): a dense model type ignores them."""

GPT2_DROPOUTS = ("embd_pdrop", "resid_pdrop", "attn_pdrop")
"""GPT-2's dropout probabilities; each defaults to 0.1 in ``GPT2Config``."""


def silu_activation(document: ConfigDocument, _: ModelConfig) -> str | None:
    act = document.text("hidden_act", "silu")
    if act in ("silu", "swish"):
        return None
    return f'hidden_act="{act}" (the graph gates the MLP with silu)'


def gelu_activation(document: ConfigDocument, _: ModelConfig) -> str | None:
    act = document.text("activation_function", "gelu_new")
    if act is not None and act.startswith("gelu"):
        return None
    return f'activation_function="{act}" (the graph uses gelu)'


def llama_biases(document: ConfigDocument, _: ModelConfig) -> str | None:
    """LlamaAttention: ``bias=config.attention_bias`` on q, k, v and o; LlamaMLP:
    ``bias=config.mlp_bias`` on gate, up and down."""
    named = [key for key in ("attention_bias", "mlp_bias") if document.flag(key, False)]
    if not named:
        return None
    listed = ", ".join(f"{key}=true" for key in named)
    return f"{listed} (the graph has no biases there, so its parameter count omits them)"


def mistral_window(document: ConfigDocument, config: ModelConfig) -> str | None:
    """MistralAttention passes ``config.sliding_window`` (default 4096) to every layer."""
    window = document.optional_positive_int("sliding_window", 4096)
    return _window_text(window, config, "every layer")


def qwen2_window(document: ConfigDocument, config: ModelConfig) -> str | None:
    """Qwen2Config: with ``use_sliding_window`` layers from ``max_window_layers`` on (or those
    ``layer_types`` marks ``sliding_attention``) attend over the last ``sliding_window``."""
    if not document.flag("use_sliding_window", False):
        return None
    window = document.optional_positive_int("sliding_window", 4096)
    types = document.raw("layer_types")
    if isinstance(types, list):
        sliding = sum(1 for kind in types[:config.layers] if kind == "sliding_attention")
    else:
        first = document.positive_int("max_window_layers", 28)
        sliding = max(0, config.layers - first)
    return _window_text(window, config, f"{sliding} of {config.layers} layers") if sliding \
        else None


def mixtral_window(document: ConfigDocument, config: ModelConfig) -> str | None:
    """MixtralConfig's ``sliding_window`` defaults to None (full attention)."""
    return _window_text(document.optional_positive_int("sliding_window", None), config,
                        "every layer")


def router_jitter(document: ConfigDocument, _: ModelConfig) -> str | None:
    """MixtralSparseMoeBlock multiplies the input by uniform noise in training when
    ``router_jitter_noise`` > 0 (default 0)."""
    noise = document.number("router_jitter_noise", 0.0)
    return f"router_jitter_noise={noise:g} (the graph's router sees no noise)" if noise else None


def deepseek_routing(document: ConfigDocument, _: ModelConfig) -> str | None:
    """DeepseekV3TopkRouter picks experts by score + ``e_score_correction_bias`` within the
    best ``topk_group`` of ``n_group`` groups (defaults 4 of 8)."""
    groups, picked = document.number("n_group", 8), document.number("topk_group", 4)
    if groups <= 1 or picked >= groups:
        return None
    return (f"n_group={groups:g}, topk_group={picked:g} (the router picks within the best "
            "expert groups and adds a selection bias; the graph picks the top-k of the scores: "
            "same shapes and cost, other experts)")


def next_token_layers(document: ConfigDocument, _: ModelConfig) -> str | None:
    """DeepSeek-V3's multi-token-prediction module (``num_nextn_predict_layers``) is in the
    checkpoint but not in Hugging Face's model."""
    count = document.number("num_nextn_predict_layers", 0)
    return (f"num_nextn_predict_layers={count:g} (the multi-token prediction module is not in the "
            "graph, as in transformers' DeepseekV3ForCausalLM)") if count else None


def _window_text(window: int | None, config: ModelConfig, where: str) -> str | None:
    if window is None or window >= config.seq:
        return None
    return (f"sliding_window={window} (in {where} the model attends over the last {window} "
            f"positions; the graph attends over all {config.seq})")


def attention_dropout(document: ConfigDocument, _: ModelConfig) -> str | None:
    rate = document.number("attention_dropout", 0.0)
    return f"attention_dropout={rate:g} (the graph has no dropout)" if rate else None


def gpt2_dropout(document: ConfigDocument, _: ModelConfig) -> str | None:
    rates = {key: document.number(key, 0.1) for key in GPT2_DROPOUTS}
    named = [f"{key}={rate:g}" for key, rate in rates.items() if rate]
    return f"{', '.join(named)} (the graph has no dropout)" if named else None


def gpt2_attention(document: ConfigDocument, _: ModelConfig) -> str | None:
    """GPT2Attention scales scores by 1/sqrt(d) only with ``scale_attn_weights`` (default
    true), and further by 1/(layer+1) with ``scale_attn_by_inverse_layer_idx``; GPT2Block adds
    cross-attention with ``add_cross_attention``."""
    named = []
    if not document.flag("scale_attn_weights", True):
        named.append("scale_attn_weights=false (the graph scales scores by 1/sqrt(head_dim))")
    if document.flag("scale_attn_by_inverse_layer_idx", False):
        named.append("scale_attn_by_inverse_layer_idx=true (the graph does not scale scores "
                     "by layer)")
    if document.flag("add_cross_attention", False):
        named.append("add_cross_attention=true (the graph has no cross-attention blocks)")
    return "; ".join(named) if named else None


def moe_fields(document: ConfigDocument, _: ModelConfig) -> str | None:
    named = [f"{key}={document.raw(key)}" for key in MOE_FIELDS if document.raw(key)]
    if not named:
        return None
    return (f"{', '.join(named)} (mixture-of-experts sizes; this model type is dense and so is "
            "the graph)")


def partial_rotary(document: ConfigDocument, _: ModelConfig) -> str | None:
    """The Hugging Face rope initialisers rotate ``head_dim · partial_rotary_factor`` dims."""
    factor = document.number("partial_rotary_factor", 1.0)
    if factor == 1.0:
        return None
    return f"partial_rotary_factor={factor:g} (the graph rotates the whole head dim)"


def quantization(document: ConfigDocument, config: ModelConfig) -> str | None:
    if not document.raw("quantization_config"):
        return None
    return f"quantization_config (the graph holds {config.dtype.value} weights, not quantized)"


COMMON: tuple[Rule, ...] = (moe_fields, quantization)
LLAMA: tuple[Rule, ...] = (silu_activation, llama_biases, partial_rotary, attention_dropout,
                           *COMMON)
MISTRAL: tuple[Rule, ...] = (silu_activation, mistral_window, partial_rotary,
                             attention_dropout, *COMMON)
QWEN2: tuple[Rule, ...] = (silu_activation, qwen2_window, partial_rotary, attention_dropout,
                           *COMMON)
GPT2: tuple[Rule, ...] = (gelu_activation, gpt2_dropout, gpt2_attention, *COMMON)
MIXTRAL: tuple[Rule, ...] = (silu_activation, mixtral_window, router_jitter, partial_rotary,
                             attention_dropout, quantization)
DEEPSEEK_V3: tuple[Rule, ...] = (silu_activation, deepseek_routing, next_token_layers,
                                 llama_biases, attention_dropout, quantization)
QWEN2_MOE: tuple[Rule, ...] = (silu_activation, qwen2_window, partial_rotary, attention_dropout,
                               quantization)


def unmodelled(document: ConfigDocument, config: ModelConfig,
               rules: tuple[Rule, ...]) -> tuple[str, ...]:
    """The description of every field ``rules`` find unmodelled, in rule order."""
    return tuple(text for rule in rules if (text := rule(document, config)) is not None)


def warning_line(model: str, file: str | None, items: tuple[str, ...]) -> str | None:
    """The one warning line naming every unmodelled field, or None when there is none.

    Example:
        >>> warning_line("m", "m.json", ("a=1 (x)", "b=2 (y)"))
        'model "m" (m.json): config fields the graph does not model: a=1 (x); b=2 (y)'
    """
    if not items:
        return None
    where = f" ({file})" if file is not None else ""
    return f'model "{model}"{where}: config fields the graph does not model: ' + "; ".join(items)
