"""Published model configurations and the rules that turn overrides into a valid config.

Every zoo model is one frozen :class:`ModelConfig`. The published sizes (layers, hidden, heads,
KV heads, FFN, vocab, context) come from their public sources (docs/sources.md, "Model
configurations"): karpathy/nanoGPT ``from_pretrained`` for GPT-2, the Llama 2 release and
meta-llama/llama-models ``sku_list.py`` for Llama 3/3.1. Overrides are applied here, once, and
checked in the constructor so an invalid model (heads not dividing hidden, seq beyond a
learned-position table) cannot exist. The graph builders and the closed-form parameter count read
only the config.

Defaults that are ours, not published: batch 8; seq 1024 for GPT-2 (its context), 4096 for the
Llama family (Llama 2's context; the usual Llama 3 pre-training length before long-context
extension); dtype bf16; ``mlp`` and ``transformer`` are small (hidden 1024, ffn 4096, 2 layers).
"""

from __future__ import annotations

import difflib
import enum
import math
from dataclasses import dataclass, replace
from typing import Any

from graphs.ir import DType
from graphs.zoo.errors import ModelConfigError, UnknownModelError
from graphs.zoo.moe_config import BOTH_LOADS, MLAConfig, MoEConfig, Score


@enum.unique
class Family(enum.Enum):
    """MLP: a stack of x@W1 → gelu → @W2 blocks, no attention. TRANSFORMER: decoder blocks
    only, no embedding or head. GPT2 and LLAMA: full language models ending in a loss."""

    MLP = "mlp"
    TRANSFORMER = "transformer"
    GPT2 = "gpt2"
    LLAMA = "llama"

    def __repr__(self) -> str:
        return f"Family.{self.name}"


@enum.unique
class Norm(enum.Enum):
    """LAYER_NORM (weight and bias), RMS_NORM (weight only), NONE (the plain MLP stack)."""

    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    NONE = "none"

    def __repr__(self) -> str:
        return f"Norm.{self.name}"


@enum.unique
class Activation(enum.Enum):
    """GELU: two FFN matrices up/down. SWIGLU: three, silu(x@gate) * (x@up) @ down."""

    GELU = "gelu"
    SWIGLU = "swiglu"

    def __repr__(self) -> str:
        return f"Activation.{self.name}"


@enum.unique
class Position(enum.Enum):
    """LEARNED: a [context, hidden] table looked up by position ids. ROPE: rotary embedding
    applied to q and k from cos/sin inputs. NONE: no positional information in the graph."""

    LEARNED = "learned"
    ROPE = "rope"
    NONE = "none"

    def __repr__(self) -> str:
        return f"Position.{self.name}"


MOE_OVERRIDES = ("experts", "top_k", "expert_ffn", "capacity_factor", "expert_imbalance")
"""Overrides of a mixture-of-experts model's :class:`MoEConfig` (``expert_imbalance`` sets its
``imbalance``)."""

OVERRIDES = ("batch", "seq", "layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "dtype",
             *MOE_OVERRIDES)
"""The keyword overrides :func:`build` and :func:`config` accept."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """One model: architecture, published sizes and the shapes of one step (batch, seq).

    ``kv_heads < heads`` is grouped-query attention. ``vocab`` is None for the families without
    embedding and head; ``context`` None means no limit on ``seq``. ``bias`` puts a bias on
    every linear layer (GPT-2); ``qkv_bias`` on the q, k and v projections only (Qwen2).
    ``moe`` makes the FFN of every layer but ``moe.dense_layers`` a routed mixture of experts
    (:class:`~graphs.zoo.moe_config.MoEConfig`); ``ffn`` is then the width of the dense layers'
    FFN. ``mla`` replaces the attention's projections by multi-head latent attention
    (:class:`~graphs.zoo.moe_config.MLAConfig`; ``explicit_head_dim`` is then its rotary dim).
    ``explicit_head_dim`` is a per-head width given outright (a Hugging Face ``head_dim``), so
    ``heads · head_dim`` may differ from ``hidden``; None derives it as ``hidden // heads``.
    ``ffn_multiplier`` and
    ``ffn_multiple_of`` record the Llama FFN rule so that overriding ``hidden`` alone
    re-derives ``ffn`` the way the reference code does (``ffn_multiplier`` 0 means "4·hidden",
    None means the Llama rule without a multiplier, as in Llama-2 7B/13B).
    """

    name: str
    family: Family
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int | None
    context: int | None
    batch: int
    seq: int
    dtype: DType = DType.BF16
    norm: Norm = Norm.LAYER_NORM
    activation: Activation = Activation.GELU
    position: Position = Position.NONE
    bias: bool = False
    qkv_bias: bool = False
    tied_embeddings: bool = False
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    ffn_multiplier: float | None = 0.0
    ffn_multiple_of: int = 1
    explicit_head_dim: int | None = None
    moe: MoEConfig | None = None
    mla: MLAConfig | None = None
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", _parse_dtype(self.name, self.dtype))
        for name in ("layers", "hidden", "heads", "kv_heads", "ffn", "batch", "seq"):
            _check_positive(self.name, name, getattr(self, name))
        for name in ("vocab", "explicit_head_dim"):
            if getattr(self, name) is not None:
                _check_positive(self.name, name, getattr(self, name))
        _check_attention(self)
        if self.moe is not None:
            self.moe.validate(self.name, self.layers)
        if self.mla is not None:
            self.mla.validate(self.name)
        if self.context is not None and self.seq > self.context:
            msg = (f"seq {self.seq} exceeds the model's context {self.context}; "
                   f"use --seq of at most {self.context}")
            raise ModelConfigError(self.name, "seq", msg)

    @property
    def head_dim(self) -> int:
        """Per-head width: ``explicit_head_dim`` when given, else hidden // heads (as every
        zoo preset has it)."""
        if self.explicit_head_dim is not None:
            return self.explicit_head_dim
        return self.hidden // self.heads

    @property
    def gated(self) -> bool:
        """Three FFN matrices (SwiGLU) instead of two."""
        return self.activation is Activation.SWIGLU

    @property
    def tokens(self) -> int:
        return self.batch * self.seq


def _parse_dtype(model: str, value: Any) -> DType:
    try:
        dtype = value if isinstance(value, DType) else DType.parse(str(value))
    except ValueError as error:
        raise ModelConfigError(model, "dtype", str(error)) from None
    if not dtype.is_float:
        msg = f"dtype {dtype.value} is not a floating-point type; use bf16, f16 or f32"
        raise ModelConfigError(model, "dtype", msg)
    return dtype


def _check_positive(model: str, field: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        msg = f"{field} must be a positive integer, got {value!r}"
        raise ModelConfigError(model, field, msg)


def _check_attention(config: ModelConfig) -> None:
    if config.explicit_head_dim is None and config.hidden % config.heads:
        msg = (f"heads {config.heads} does not divide hidden {config.hidden}; "
               f"choose --heads dividing {config.hidden}")
        raise ModelConfigError(config.name, "heads", msg)
    if config.heads % config.kv_heads:
        msg = (f"kv_heads {config.kv_heads} does not divide heads {config.heads}; "
               "grouped-query attention needs heads to be a multiple of kv_heads")
        raise ModelConfigError(config.name, "kv_heads", msg)
    if config.position is Position.ROPE and config.head_dim % 2:
        if config.explicit_head_dim is not None:
            msg = f"rotary embedding needs an even head dim, got {config.head_dim}"
            raise ModelConfigError(config.name, "explicit_head_dim", msg)
        msg = (f"rotary embedding needs an even head dim, got hidden/heads = "
               f"{config.hidden}/{config.heads} = {config.head_dim}")
        raise ModelConfigError(config.name, "heads", msg)


def llama_ffn(hidden: int, multiplier: float | None, multiple_of: int) -> int:
    """FFN width by the rule of meta-llama ``FeedForward``: int(2·4h/3), times the multiplier,
    rounded up to ``multiple_of``. Example: hidden 4096, 1.3, 1024 → 14336 (Llama-3-8B)."""
    width = int(2 * (4 * hidden) / 3)
    if multiplier:
        width = int(multiplier * width)
    return multiple_of * math.ceil(width / multiple_of)


def default_ffn(config: ModelConfig, hidden: int) -> int:
    """The FFN width the family's rule gives for ``hidden`` (4·hidden unless Llama)."""
    if config.ffn_multiplier == 0.0:
        return 4 * hidden
    return llama_ffn(hidden, config.ffn_multiplier, config.ffn_multiple_of)


_GPT2_SOURCE = "karpathy/nanoGPT model.py from_pretrained config_args"
_LLAMA2_SOURCE = ("Llama 2 release (Touvron et al. 2023, Table 1); FFN by the FeedForward rule "
                  "of meta-llama/llama-models models/llama3/model.py")
_LLAMA3_SOURCE = ("meta-llama/llama-models models/sku_list.py "
                  "@8c88b8c0d75dbd136b6895220c4f56ccbe2f2d24")


_DEEPSEEK_SOURCE = ("deepseek-ai/DeepSeek-V3 config.json on the Hugging Face Hub, whose sizes "
                    "are the defaults of transformers' DeepseekV3Config "
                    "(src/transformers/models/deepseek_v3/configuration_deepseek_v3.py)")
_MIXTRAL_SOURCE = ("mistralai/Mixtral-8x7B-v0.1 config.json on the Hugging Face Hub (a copy in "
                   "tests/data/hf-configs); NVIDIA/Megatron-LM examples/mixtral/"
                   "train_mixtral_8x7b_distributed.sh")


def _gpt2(name: str, layers: int, hidden: int, heads: int) -> ModelConfig:
    return ModelConfig(
        name=name, family=Family.GPT2, layers=layers, hidden=hidden, heads=heads,
        kv_heads=heads, ffn=4 * hidden, vocab=50257, context=1024, batch=8, seq=1024,
        norm=Norm.LAYER_NORM, activation=Activation.GELU, position=Position.LEARNED,
        bias=True, tied_embeddings=True, source=_GPT2_SOURCE)


def _llama(name: str, dims: tuple[int, int, int, int], vocab: int, context: int,
           ffn_rule: tuple[float | None, int], rope_theta: float) -> ModelConfig:
    layers, hidden, heads, kv_heads = dims
    multiplier, multiple_of = ffn_rule
    return ModelConfig(
        name=name, family=Family.LLAMA, layers=layers, hidden=hidden, heads=heads,
        kv_heads=kv_heads, ffn=llama_ffn(hidden, multiplier, multiple_of), vocab=vocab,
        context=context, batch=8, seq=4096, norm=Norm.RMS_NORM, activation=Activation.SWIGLU,
        position=Position.ROPE, bias=False, tied_embeddings=False, rope_theta=rope_theta,
        ffn_multiplier=multiplier, ffn_multiple_of=multiple_of,
        source=_LLAMA2_SOURCE if name.startswith("llama2") else _LLAMA3_SOURCE)


_PRESETS: dict[str, ModelConfig] = {
    "mlp": ModelConfig(
        name="mlp", family=Family.MLP, layers=2, hidden=1024, heads=1, kv_heads=1, ffn=4096,
        vocab=None, context=None, batch=8, seq=128, norm=Norm.NONE, source="ours"),
    "transformer": ModelConfig(
        name="transformer", family=Family.TRANSFORMER, layers=2, hidden=1024, heads=16,
        kv_heads=16, ffn=4096, vocab=None, context=None, batch=8, seq=512, bias=True,
        source="ours: GPT-2-style pre-LN decoder blocks"),
    "gpt2": _gpt2("gpt2", 12, 768, 12),
    "gpt2-medium": _gpt2("gpt2-medium", 24, 1024, 16),
    "gpt2-large": _gpt2("gpt2-large", 36, 1280, 20),
    "gpt2-xl": _gpt2("gpt2-xl", 48, 1600, 25),
    "llama2-7b": _llama("llama2-7b", (32, 4096, 32, 32), 32000, 4096, (None, 256), 1e4),
    "llama2-13b": _llama("llama2-13b", (40, 5120, 40, 40), 32000, 4096, (None, 256), 1e4),
    "llama2-70b": _llama("llama2-70b", (80, 8192, 64, 8), 32000, 4096, (1.3, 4096), 1e4),
    "llama3-8b": _llama("llama3-8b", (32, 4096, 32, 8), 128256, 8192, (1.3, 1024), 5e5),
    "llama3-70b": _llama("llama3-70b", (80, 8192, 64, 8), 128256, 8192, (1.3, 4096), 5e5),
    "llama3.1-8b": _llama("llama3.1-8b", (32, 4096, 32, 8), 128256, 131072, (1.3, 1024), 5e5),
    "llama3.1-405b": _llama("llama3.1-405b", (126, 16384, 128, 8), 128256, 131072,
                            (1.2, 4096), 5e5),
    "deepseek-v3": replace(
        _llama("deepseek-v3", (61, 7168, 128, 128), 129280, 163840, (None, 1), 1e4),
        ffn=18432, norm_eps=1e-6, explicit_head_dim=64, ffn_multiplier=None,
        mla=MLAConfig(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                      qk_rope_head_dim=64, v_head_dim=128),
        moe=MoEConfig(experts=256, top_k=8, expert_ffn=2048, shared_ffn=2048,
                      score=Score.SIGMOID, normalize=True, routed_scale=2.5,
                      dense_layers=(0, 1, 2)),
        source=_DEEPSEEK_SOURCE),
    "mixtral-8x7b": replace(
        _llama("mixtral-8x7b", (32, 4096, 32, 8), 32000, 32768, (1.3, 1024), 1e6),
        moe=MoEConfig(experts=8, top_k=2, expert_ffn=14336, normalize=True,
                      aux_loss_coef=0.02),
        source=_MIXTRAL_SOURCE),
}

# Overrides that make no sense for a family: refusing them beats silently ignoring them.
_NOT_APPLICABLE = {
    Family.MLP: ("heads", "kv_heads", "vocab"),
    Family.TRANSFORMER: ("vocab",),
}


def names() -> tuple[str, ...]:
    """Every zoo model name, in a stable order (small models first, then by family and size)."""
    return tuple(_PRESETS)


def preset(name: str) -> ModelConfig:
    """The published config of ``name``; UnknownModelError suggests close names."""
    try:
        return _PRESETS[name]
    except KeyError:
        raise UnknownModelError(name, close_names(name), names()) from None


def close_names(name: str) -> tuple[str, ...]:
    """Zoo names to suggest for ``name``: the one it matches but for case (``GPT2``: gpt2)
    alone, else up to three close ones, compared case-blind (the zoo's names are lower case).

    Example:
        >>> close_names("GPT2"), close_names("Lama3-8B")
        (('gpt2',), ('llama3-8b', 'llama3.1-8b', 'llama3-70b'))
    """
    known = names()
    folded = name.lower()
    same = tuple(k for k in known if k.lower() == folded)
    return same or tuple(difflib.get_close_matches(folded, known, n=3, cutoff=0.5))


def config(name: str, **overrides: Any) -> ModelConfig:
    """The config of model ``name`` with ``overrides`` (see :data:`OVERRIDES`) applied.

    Overriding ``hidden`` alone re-derives ``ffn`` by the family's rule; overriding ``heads``
    of a multi-head model keeps it multi-head (``kv_heads`` follows). ``None`` values are
    ignored, so CLI options that were not given can be passed straight through.

    Example:
        >>> config("llama3-8b", layers=2, hidden=2048).ffn
        7168
    """
    base = preset(name)
    given = {key: value for key, value in overrides.items() if value is not None}
    _check_override_names(base, given)
    changes = {k: v for k, v in given.items() if k not in MOE_OVERRIDES}
    if base.moe is not None:
        changes["moe"] = moe_overridden(base.moe, given, base.name)
    if "hidden" in given and "ffn" not in given:
        changes["ffn"] = default_ffn(base, given["hidden"])
    if "heads" in given and "kv_heads" not in given and base.kv_heads == base.heads:
        changes["kv_heads"] = given["heads"]
    return replace(base, **changes)


def moe_overridden(moe: MoEConfig, given: dict[str, Any], model: str) -> MoEConfig:
    """``moe`` of ``model`` with the MoE overrides in ``given`` applied, its dense layers cut
    to a ``layers`` override (the first k dense layers of a shorter model stay its first).

    Raises:
        ModelConfigError: an ``expert_imbalance`` beside a capacity factor, which fixes the
            buffers on its own (see :meth:`MoEConfig.validate`)."""
    fields = {("imbalance" if k == "expert_imbalance" else k): v for k, v in given.items()
              if k in MOE_OVERRIDES}
    factor = fields.get("capacity_factor", moe.capacity_factor)
    if "imbalance" in fields and factor is not None:
        # even an imbalance of 1.0 (the default) says the caller expects it to matter
        raise ModelConfigError(model, "expert_imbalance", BOTH_LOADS.format(
            imbalance=fields["imbalance"], factor=factor))
    if "layers" in given:
        fields["dense_layers"] = tuple(i for i in moe.dense_layers if i < int(given["layers"]))
    return replace(moe, **fields)


def _check_override_names(base: ModelConfig, given: dict[str, Any]) -> None:
    for key in given:
        if key not in OVERRIDES:
            close = difflib.get_close_matches(key, OVERRIDES, n=1, cutoff=0.5)
            hint = f'did you mean "{close[0]}"? ' if close else ""
            msg = f'unknown override "{key}"; {hint}choose from {", ".join(OVERRIDES)}'
            raise ModelConfigError(base.name, key, msg)
        if key in MOE_OVERRIDES and base.moe is None:
            msg = (f"{key.replace('_', '-')} applies to mixture-of-experts models only; "
                   f"{base.name} is dense")
            raise ModelConfigError(base.name, key, msg)
        if key in _NOT_APPLICABLE.get(base.family, ()):
            msg = f"{key} does not apply to the {base.family.value} family; leave it out"
            raise ModelConfigError(base.name, key, msg)

