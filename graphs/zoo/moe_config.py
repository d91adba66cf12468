"""The mixture-of-experts part of a :class:`~graphs.zoo.configs.ModelConfig`, and its rules.

Why its own record: an MoE layer has a dozen sizes and switches of its own (experts, top-k,
routing function, shared experts, capacity), only meaningful together, checked together on
construction so that an invalid one (top-k above the experts, a capacity factor of 0) cannot
exist. Field meanings follow the Hugging Face configs they are read from
(``num_local_experts``/``num_experts``/``n_routed_experts``, ``num_experts_per_tok``,
``moe_intermediate_size``, ``norm_topk_prob``, ``routed_scaling_factor``,
``shared_expert_intermediate_size``/``n_shared_experts``, ``router_aux_loss_coef``) and
Megatron-Core's MoE arguments (``--moe-expert-capacity-factor``, ``--moe-router-score-function``).

**Buffer size.** Tokens are routed per group (one sequence) into per-expert buffers of
``capacity = ceil(t·k/E · f)`` slots, t tokens per group, clamped to [1, t] (an expert holds a
token at most once): Megatron-Core ``get_capacity(num_tokens·topk, num_experts,
capacity_factor)``. With a ``capacity_factor`` f, copies beyond the capacity are dropped
(GShard). Without one (dropless, as Mixtral, Qwen2-MoE and DeepSeek-V3 train), a static graph
still needs a buffer size: it is the expected load of the busiest expert, ``imbalance`` × the
mean load (f = ``imbalance`` ≥ 1; 1.0 is the perfectly balanced load that an auxiliary loss
aims at). That buffer scales the experts' compute and the dispatch/combine all-to-all volume,
which is how the imbalance is priced; the graph's reference semantics are those of a capacity
of that size (a real dropless run would not drop the overflow of an unluckier batch).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from graphs.zoo.errors import ModelConfigError

BOTH_LOADS = ("expert imbalance {imbalance!r} sizes dropless expert buffers, but capacity "
               "factor {factor!r} already fixes them (tokens beyond the capacity are "
               "dropped, so the imbalance changes nothing); give one of the two")
"""Why an imbalance and a capacity factor together are refused (``str.format`` fields
``imbalance`` and ``factor``)."""


@enum.unique
class Score(enum.Enum):
    """The router's score function: SOFTMAX over the experts (Mixtral, Qwen2-MoE) or SIGMOID
    per expert (DeepSeek-V3)."""

    SOFTMAX = "softmax"
    SIGMOID = "sigmoid"

    def __repr__(self) -> str:
        return f"Score.{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class MoEConfig:
    """One model's routed-expert layers.

    ``experts`` routed experts of FFN width ``expert_ffn``, each token to ``top_k`` of them;
    ``shared_ffn`` > 0 adds an always-on SwiGLU expert of that width (DeepSeek: n_shared ×
    moe_intermediate_size; Qwen2-MoE: shared_expert_intermediate_size), gated by
    sigmoid(x·w) when ``shared_gate`` (Qwen2-MoE). ``normalize`` renormalises the top-k
    weights to sum 1; ``routed_scale`` multiplies them. ``dense_layers`` are layer indices
    with an ordinary FFN of the model's ``ffn`` width instead (DeepSeek-V3's first three,
    Qwen2-MoE's ``mlp_only_layers``). ``aux_loss_coef`` > 0 adds the load-balancing loss
    (Switch Transformer; Megatron-Core ``switch_load_balancing_loss_func``) to the loss.
    """

    experts: int
    top_k: int
    expert_ffn: int
    shared_ffn: int = 0
    shared_gate: bool = False
    score: Score = Score.SOFTMAX
    normalize: bool = True
    routed_scale: float = 1.0
    capacity_factor: float | None = None
    imbalance: float = 1.0
    aux_loss_coef: float = 0.0
    dense_layers: tuple[int, ...] = ()

    def validate(self, model: str, layers: int) -> None:
        """Raise ModelConfigError naming the first field that makes no sense."""
        for name in ("experts", "top_k", "expert_ffn"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ModelConfigError(model, name, _not_positive(name, value))
        if self.top_k > self.experts:
            raise ModelConfigError(model, "top_k", f"top-k {self.top_k} is larger than the "
                                                   f"{self.experts} experts; each token picks "
                                                   f"distinct experts, so choose top-k ≤ "
                                                   f"{self.experts}")
        self._validate_load(model)
        if self.shared_ffn < 0 or any(not 0 <= i < layers for i in self.dense_layers):
            raise ModelConfigError(model, "dense_layers", f"dense layers {self.dense_layers} "
                                                          f"must lie in 0..{layers - 1}")

    def _validate_load(self, model: str) -> None:
        """The buffer size's f must be a finite number (a slot count is an integer), and
        only one of the two fields sets it: with a capacity factor the buffers hold that
        many slots whatever the imbalance (the busiest expert's surplus is dropped), so an
        imbalance beside it would be silently ignored."""
        factor = self.capacity_factor
        if factor is not None and not (math.isfinite(factor) and factor > 0):
            raise ModelConfigError(model, "capacity_factor",
                                   f"capacity factor {factor!r} must be > 0 and finite "
                                   "(1.0 holds the mean load; omit it for dropless routing)")
        if not (math.isfinite(self.imbalance) and self.imbalance >= 1.0):
            raise ModelConfigError(model, "imbalance",
                                   f"expert imbalance {self.imbalance!r} is the busiest "
                                   "expert's load over the mean load, so it is at least "
                                   "1.0 (and finite)")
        if factor is not None and self.imbalance != 1.0:
            raise ModelConfigError(model, "imbalance", BOTH_LOADS.format(
                imbalance=self.imbalance, factor=factor))

    @property
    def load_factor(self) -> float:
        """The f of the buffer size: the capacity factor, or the imbalance when dropless."""
        return self.capacity_factor if self.capacity_factor is not None else self.imbalance

    def capacity(self, tokens: int) -> int:
        """Slots per expert for a group of ``tokens`` (see the module docstring).

        Example (Mixtral 8x7B, 4096 tokens, top-2 of 8, balanced):
            >>> MoEConfig(experts=8, top_k=2, expert_ffn=14336).capacity(4096)
            1024
        """
        mean = tokens * self.top_k / self.experts
        slots = math.ceil(round(mean * self.load_factor, 9))
        return max(1, min(slots, tokens))

    def is_moe_layer(self, index: int) -> bool:
        return index not in self.dense_layers


@dataclass(frozen=True, slots=True, kw_only=True)
class MLAConfig:
    """Multi-head latent attention (DeepSeek-V2/V3): queries through a rank-``q_lora_rank``
    bottleneck (None: one q projection), keys and values from one rank-``kv_lora_rank``
    latent; per head ``qk_nope_head_dim`` + ``qk_rope_head_dim`` query/key dims (the rotary
    part of the key shared by every head) and ``v_head_dim`` value dims. Field names as in
    Hugging Face's ``DeepseekV3Config``."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def validate(self, model: str) -> None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ModelConfigError(model, name, f"{name} must be a positive integer, got "
                                                    f"{value!r}")
        if self.q_lora_rank is not None and self.q_lora_rank <= 0:
            raise ModelConfigError(model, "q_lora_rank", "q_lora_rank must be positive or "
                                                         "absent")
        if self.qk_rope_head_dim % 2:
            raise ModelConfigError(model, "qk_rope_head_dim", "rotary embedding needs an even "
                                                              "qk_rope_head_dim")


def _not_positive(name: str, value: object) -> str:
    """The message for a size that must be positive, spelled as the user gives it: the
    command line's ``--experts`` and ``--top-k`` (dashes, never ``top_k``), else the field.

    Example:
        >>> _not_positive("top_k", 0)
        'top-k must be a positive integer, got 0; pass --top-k 1 or more'
    """
    label = name.replace("_", "-")
    hint = f"; pass --{label} 1 or more" if name in ("experts", "top_k") else ""
    return f"{label} must be a positive integer, got {value!r}{hint}"
