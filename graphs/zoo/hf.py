"""Models from a Hugging Face ``config.json``, without PyTorch or network access.

Why: users plan the model they have, and what they have is a checkpoint's ``config.json``.
The file is mapped onto a :class:`~graphs.zoo.configs.ModelConfig`, so the zoo's graph
builder and its closed-form parameter count serve it exactly as they serve the presets: a
Llama, Mistral or Qwen2 config is a Llama-family decoder (RMSNorm, SwiGLU, rotary), a GPT-2
config a GPT-2 (LayerNorm, GELU, learned positions, biases everywhere, tied head); a Mixtral,
Qwen2-MoE or DeepSeek-V3 config a Llama-family decoder whose FFNs are routed experts (their
fields are read by :mod:`graphs.zoo.hf_moe`; DeepSeek-V3's latent attention is built from its
matmuls, :mod:`graphs.zoo.blocks_mla`). Field names
and the defaults of absent fields follow the Hugging Face classes in ``transformers``
(``src/transformers/models/{llama,mistral,qwen2,gpt2}/configuration_*.py`` and
``modeling_*.py``): ``num_key_value_heads`` (absent: all heads for Llama, 8 for Mistral, 32 for
Qwen2; ``null``: all heads), ``head_dim`` (absent or ``null``: ``hidden_size //
num_attention_heads``), ``tie_word_embeddings`` (absent: false, true for GPT-2), q/k/v biases
for Qwen2 (``Qwen2Attention``: ``bias=True`` on q, k, v; o without), ``n_inner`` (absent:
``4 · n_embd``). One departure: the sizes that set parameter shapes (hidden, FFN, layers,
heads, vocab; GPT-2's ``n_positions``) are required, because a file without them is far more
likely broken than meant to take the library's Llama-2-7B defaults.

Shapes of the step are the caller's: ``max_position_embeddings`` is the longest sequence the
model supports, not the one planned. Defaults: batch 8, seq ``min(4096,
max_position_embeddings)`` (GPT-2: ``n_positions``, 1024), dtype the file's ``torch_dtype``
(or ``dtype``) when it names a floating type, else bf16. Overrides: ``batch``, ``seq``,
``layers``, ``dtype``; the architecture's sizes come from the file (edit the file for a
what-if), and seq beyond ``max_position_embeddings`` is an error, as for the zoo presets.

Fields that change the math but are not modelled are listed by :mod:`graphs.zoo.hf_unmodelled`
and reported as one line: :attr:`HFModel.warning`, which :func:`from_hf_config` also issues as
one :class:`~graphs.zoo.errors.UnmodelledFieldsWarning`.

Example:
    >>> config = {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
    ...           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    ...           "vocab_size": 100, "max_position_embeddings": 512}
    >>> model = read_hf_config(config, seq=128)
    >>> model.config.kv_heads, model.config.qkv_bias, model.config.seq
    (2, True, 128)
    >>> graph = from_hf_config(config, seq=128)
    >>> graph.tensors["layers.0.attn.bk"].shape
    (32,)
"""

from __future__ import annotations

import difflib
import logging
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphs.ir import DType
from graphs.opgraph import OpGraph
from graphs.zoo import counts, hf_moe
from graphs.zoo import hf_unmodelled as rules
from graphs.zoo.configs import Activation, Family, ModelConfig, Norm, Position, moe_overridden
from graphs.zoo.errors import ModelConfigError, UnknownModelTypeError, UnmodelledFieldsWarning
from graphs.zoo.hf_document import ConfigDocument, is_hf_config, read_document
from graphs.zoo.models import build_graph
from graphs.zoo.moe_config import MLAConfig, MoEConfig

logger = logging.getLogger(__name__)

__all__ = ["HF_OVERRIDES", "HFModel", "from_hf_config", "hf_model_types", "is_hf_config",
           "read_hf_config"]

DEFAULT_BATCH = 8
DEFAULT_SEQ = 4096
HF_OVERRIDES = ("batch", "seq", "layers", "dtype", "capacity_factor", "expert_imbalance")
"""The keyword overrides a Hugging Face config accepts (``None`` values are ignored); the last
two size the expert buffers of a mixture-of-experts config."""
_MOE_ONLY = ("capacity_factor", "expert_imbalance")


@dataclass(frozen=True, slots=True)
class HFModel:
    """A Hugging Face config read into the zoo's terms: the :class:`ModelConfig` to build,
    and the description of each field the graph does not model."""

    model_type: str
    config: ModelConfig
    unmodelled: tuple[str, ...]
    file: str | None

    @property
    def warning(self) -> str | None:
        """One line naming every unmodelled field, or None when the graph models them all."""
        return rules.warning_line(self.config.name, self.file, self.unmodelled)

    def build(self) -> OpGraph:
        """The forward graph (plus loss), as :func:`graphs.zoo.build_config` builds it."""
        return build_graph(self.config)

    def param_count(self) -> int:
        """Parameters by the zoo's closed form (a tied embedding counted once)."""
        return counts.param_count(self.config)


@dataclass(frozen=True, slots=True)
class _Architecture:
    """How one ``model_type`` reads: its ModelConfig fields, its unmodelled-field rules, and
    which config key sets each zoo field (for error messages and refused overrides)."""

    read: Callable[[ConfigDocument], dict[str, Any]]
    rules: tuple[rules.Rule, ...]
    keys: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class _LlamaDefaults:
    """The Hugging Face config class defaults that differ between Llama-family types."""

    qkv_bias: bool
    max_positions: int
    kv_heads: int | None  # when num_key_value_heads is absent; None means all heads


def _llama_like(defaults: _LlamaDefaults) -> Callable[[ConfigDocument], dict[str, Any]]:
    def read(doc: ConfigDocument) -> dict[str, Any]:
        hidden, layers = doc.positive_int("hidden_size"), doc.positive_int("num_hidden_layers")
        heads = doc.positive_int("num_attention_heads")
        kv_heads = doc.optional_positive_int("num_key_value_heads", defaults.kv_heads)
        return {
            "family": Family.LLAMA, "layers": layers, "hidden": hidden, "heads": heads,
            "kv_heads": heads if kv_heads is None else kv_heads,
            "explicit_head_dim": doc.optional_positive_int("head_dim"),
            "ffn": doc.positive_int("intermediate_size"), "vocab": doc.positive_int("vocab_size"),
            "context": doc.positive_int("max_position_embeddings", defaults.max_positions),
            "norm": Norm.RMS_NORM, "activation": Activation.SWIGLU, "position": Position.ROPE,
            "qkv_bias": defaults.qkv_bias,
            "tied_embeddings": doc.flag("tie_word_embeddings", False),
            "norm_eps": doc.number("rms_norm_eps", 1e-6), "rope_theta": _rope_theta(doc)}
    return read


def _with_moe(base: Callable[[ConfigDocument], dict[str, Any]],
              moe: Callable[[ConfigDocument, int], MoEConfig]
              ) -> Callable[[ConfigDocument], dict[str, Any]]:
    """A Llama-like decoder whose FFNs are (partly) routed experts read by ``moe``."""
    def read(doc: ConfigDocument) -> dict[str, Any]:
        fields = base(doc)
        fields["moe"] = moe(doc, fields["layers"])
        return fields
    return read


def _deepseek_v3(doc: ConfigDocument) -> dict[str, Any]:
    """DeepseekV3Config: a Llama-like decoder with latent attention and routed experts; its
    sizes default to DeepSeek-V3's."""
    fields = _llama_like(_LlamaDefaults(False, 4096, None))(doc)
    mla = MLAConfig(q_lora_rank=doc.optional_positive_int("q_lora_rank", 1536),
                    kv_lora_rank=doc.positive_int("kv_lora_rank", 512),
                    qk_nope_head_dim=doc.positive_int("qk_nope_head_dim", 128),
                    qk_rope_head_dim=doc.positive_int("qk_rope_head_dim", 64),
                    v_head_dim=doc.positive_int("v_head_dim", 128))
    fields.update(mla=mla, explicit_head_dim=mla.qk_rope_head_dim,
                  moe=hf_moe.deepseek_v3(doc, fields["layers"]))
    return fields


def _rope_theta(doc: ConfigDocument) -> float:
    """``rope_theta``, or inside ``rope_parameters`` (newer transformers); 10000 when absent."""
    nested = doc.raw("rope_parameters")
    if "rope_theta" not in doc.data and isinstance(nested, Mapping) and "rope_theta" in nested:
        return ConfigDocument(nested, doc.file).number("rope_theta", 1e4)
    return doc.number("rope_theta", 1e4)


def _gpt2(doc: ConfigDocument) -> dict[str, Any]:
    """GPT2Config; its ``attribute_map`` lets ``hidden_size`` etc. stand for ``n_embd`` etc."""
    hidden = doc.positive_int(_key(doc, "n_embd", "hidden_size"))
    heads = doc.positive_int(_key(doc, "n_head", "num_attention_heads"))
    inner = doc.optional_positive_int("n_inner")
    return {
        "family": Family.GPT2, "layers": doc.positive_int(_key(doc, "n_layer",
                                                               "num_hidden_layers")),
        "hidden": hidden, "heads": heads, "kv_heads": heads,
        "ffn": 4 * hidden if inner is None else inner, "vocab": doc.positive_int("vocab_size"),
        "context": doc.positive_int(_key(doc, "n_positions", "max_position_embeddings")),
        "norm": Norm.LAYER_NORM, "activation": Activation.GELU, "position": Position.LEARNED,
        "bias": True, "tied_embeddings": doc.flag("tie_word_embeddings", True),
        "norm_eps": doc.number("layer_norm_epsilon", 1e-5)}


def _key(doc: ConfigDocument, key: str, alias: str) -> str:
    return alias if alias in doc.data and key not in doc.data else key


_LLAMA_KEYS = {"layers": "num_hidden_layers", "hidden": "hidden_size",
               "heads": "num_attention_heads", "kv_heads": "num_key_value_heads",
               "explicit_head_dim": "head_dim", "ffn": "intermediate_size",
               "vocab": "vocab_size"}
_GPT2_KEYS = {"layers": "n_layer", "hidden": "n_embd", "heads": "n_head", "kv_heads": "n_head",
              "ffn": "n_inner", "vocab": "vocab_size"}

_ARCHITECTURES: dict[str, _Architecture] = {
    "gpt2": _Architecture(_gpt2, rules.GPT2, _GPT2_KEYS),
    "llama": _Architecture(_llama_like(_LlamaDefaults(False, 2048, None)), rules.LLAMA,
                           _LLAMA_KEYS),
    "mistral": _Architecture(_llama_like(_LlamaDefaults(False, 4096 * 32, 8)), rules.MISTRAL,
                             _LLAMA_KEYS),
    "qwen2": _Architecture(_llama_like(_LlamaDefaults(True, 32768, 32)), rules.QWEN2,
                           _LLAMA_KEYS),
    "mixtral": _Architecture(_with_moe(_llama_like(_LlamaDefaults(False, 4096 * 32, 8)),
                                       hf_moe.mixtral), rules.MIXTRAL,
                             {**_LLAMA_KEYS, "experts": "num_local_experts",
                              "top_k": "num_experts_per_tok", "expert_ffn": "intermediate_size"}),
    "qwen2_moe": _Architecture(_with_moe(_llama_like(_LlamaDefaults(True, 32768, 16)),
                                         hf_moe.qwen2_moe), rules.QWEN2_MOE,
                               {**_LLAMA_KEYS, "experts": "num_experts",
                                "top_k": "num_experts_per_tok",
                                "expert_ffn": "moe_intermediate_size"}),
    "deepseek_v3": _Architecture(_deepseek_v3, rules.DEEPSEEK_V3,
                                 {**_LLAMA_KEYS, "experts": "n_routed_experts",
                                  "top_k": "num_experts_per_tok",
                                  "expert_ffn": "moe_intermediate_size",
                                  "explicit_head_dim": "qk_rope_head_dim"}),
}

_NOT_YET: dict[str, str] = {}
"""Recognised model types without a builder, and why (the error says so)."""


def hf_model_types() -> tuple[str, ...]:
    """The ``model_type`` values with a graph builder, sorted.

    Example:
        >>> hf_model_types()
        ('deepseek_v3', 'gpt2', 'llama', 'mistral', 'mixtral', 'qwen2', 'qwen2_moe')
    """
    return tuple(sorted(_ARCHITECTURES))


def read_hf_config(source: str | Path | Mapping[str, Any], *, name: str | None = None,
                   **overrides: Any) -> HFModel:
    """Read a Hugging Face config (a path, a checkpoint directory or a dict) into an
    :class:`HFModel`; nothing is warned or built.

    Args:
        source: the ``config.json`` path, its directory, or its parsed object.
        name: the graph's name; default: the file's stem, or its directory's name when the
            file is ``config.json`` (the repository name in a Hugging Face cache), or the
            ``model_type`` for a dict.
        **overrides: ``batch``, ``seq``, ``layers``, ``dtype``; None is ignored.

    Raises:
        HFConfigError: unreadable, not JSON, a field missing, of the wrong type or sizes that
            do not fit (names the file and the key).
        UnknownModelTypeError: a ``model_type`` without a builder (lists the supported ones).
        ModelConfigError: an unknown or refused override, or seq beyond the context.

    Example:
        >>> gpt = read_hf_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 2,
        ...                       "n_head": 4, "n_positions": 256, "vocab_size": 100})
        >>> gpt.config.seq, gpt.config.tied_embeddings, gpt.config.ffn
        (256, True, 256)
        >>> gpt.warning
        'model "gpt2": config fields the graph does not model: embd_pdrop=0.1, ...'
    """
    document = read_document(source)
    model_type = str(document.text("model_type"))
    architecture = _architecture(document, model_type)
    model_name = name if name is not None else _default_name(document, model_type)
    given = _check_overrides(model_name, architecture, overrides)
    fields = architecture.read(document)
    if fields.get("moe") is not None:
        fields["moe"] = moe_overridden(fields["moe"], given, model_name)
    elif any(key in given for key in _MOE_ONLY):
        key = next(key for key in _MOE_ONLY if key in given)
        raise ModelConfigError(model_name, key, f"{key.replace('_', '-')} applies to "
                                                f"mixture-of-experts models only; {model_type} "
                                                "is dense")
    given = {k: v for k, v in given.items() if k not in _MOE_ONLY}
    shape = {"batch": DEFAULT_BATCH, "seq": min(DEFAULT_SEQ, fields["context"]),
             **({} if "dtype" in given else {"dtype": _file_dtype(document)}), **given}
    source_text = f"Hugging Face config.json {document.file or '(dict)'}"
    config = _model_config(document, architecture, given,
                           {"name": model_name, "source": source_text, **fields, **shape})
    return HFModel(model_type, config, rules.unmodelled(document, config, architecture.rules),
                   document.file)


def from_hf_config(source: str | Path | Mapping[str, Any], *, name: str | None = None,
                   **overrides: Any) -> OpGraph:
    """The forward graph (plus loss) of a Hugging Face config; arguments and errors as
    :func:`read_hf_config`. Unmodelled fields are issued as one
    :class:`~graphs.zoo.errors.UnmodelledFieldsWarning` (and logged at INFO).

    Example:
        >>> graph = from_hf_config({"model_type": "llama", "hidden_size": 64,
        ...     "intermediate_size": 96, "num_hidden_layers": 1, "num_attention_heads": 4,
        ...     "vocab_size": 100, "tie_word_embeddings": True}, name="tiny", batch=2)
        >>> graph.name, "head.weight" in graph.tensors, graph.tensors["tokens"].shape
        ('tiny', False, (2, 2048))
    """
    model = read_hf_config(source, name=name, **overrides)
    if model.warning is not None:
        logger.info(model.warning)
        warnings.warn(model.warning, UnmodelledFieldsWarning, stacklevel=2)
    return model.build()


def _architecture(document: ConfigDocument, model_type: str) -> _Architecture:
    if model_type in _ARCHITECTURES:
        return _ARCHITECTURES[model_type]
    known, reason = hf_model_types(), _NOT_YET.get(model_type, "")
    close = () if reason else tuple(difflib.get_close_matches(model_type.lower(), known, n=2,
                                                               cutoff=0.6))
    raise UnknownModelTypeError(document.file, model_type, known, close, reason)


def _default_name(document: ConfigDocument, model_type: str) -> str:
    if document.file is None:
        return model_type
    path = Path(document.file)
    if path.stem != "config":
        return path.stem
    folder = path.parent
    # A Hugging Face cache: models--ORG--NAME/snapshots/<commit>/config.json.
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name.split("--")[-1]
    return folder.name or model_type


def _file_dtype(document: ConfigDocument) -> DType:
    """The checkpoint's floating dtype (``torch_dtype``, or ``dtype`` in newer files), bf16
    when neither names one. A name that is not a floating dtype (``int8``: a quantized
    checkpoint, which trains in a float type anyway) is planned in bf16 too, and said so
    (:class:`UnmodelledFieldsWarning`), rather than silently."""
    for key in ("torch_dtype", "dtype"):
        value = document.raw(key)
        if not isinstance(value, str):
            continue
        try:
            dtype = DType.parse(value)
        except ValueError:
            dtype = None
        if dtype is not None and dtype.is_float:
            return dtype
        warnings.warn(f'{key} "{value}" is not a floating dtype the planner models; planned '
                      "in bf16 (pass --dtype to choose)", UnmodelledFieldsWarning, stacklevel=3)
    return DType.BF16


def _check_overrides(model: str, architecture: _Architecture,
                     overrides: Mapping[str, Any]) -> dict[str, Any]:
    given = {key: value for key, value in overrides.items() if value is not None}
    for key in given:
        if key in HF_OVERRIDES:
            continue
        if key in architecture.keys:
            msg = (f'{key} is set by the config file ("{architecture.keys[key]}"); edit the file '
                   f"for a what-if (a Hugging Face config takes {', '.join(HF_OVERRIDES)})")
        else:
            close = difflib.get_close_matches(key, HF_OVERRIDES, n=1, cutoff=0.5)
            hint = f'did you mean "{close[0]}"? ' if close else ""
            msg = (f'unknown override "{key}"; {hint}a Hugging Face config takes '
                   f"{', '.join(HF_OVERRIDES)}")
        raise ModelConfigError(model, key, msg)
    return given


def _model_config(document: ConfigDocument, architecture: _Architecture,
                  given: Mapping[str, Any], fields: dict[str, Any]) -> ModelConfig:
    """The ModelConfig; a size check failing on a value from the file names its key."""
    try:
        return ModelConfig(**fields)
    except ModelConfigError as error:
        key = architecture.keys.get(error.field)
        if key is None or error.field in given:
            raise
        message = str(error).split(": ", 1)[1]
        raise document.error(key, message) from None
