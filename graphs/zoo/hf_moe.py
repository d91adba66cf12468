"""The mixture-of-experts fields of Hugging Face ``config.json`` files, read into a
:class:`~graphs.zoo.moe_config.MoEConfig`.

Field names and class defaults follow ``transformers``:
``src/transformers/models/mixtral/configuration_mixtral.py`` and ``modeling_mixtral.py``
(``MixtralSparseMoeBlock``: softmax, top-k, renormalised; experts w1/w3/w2 of
``intermediate_size``; ``num_local_experts`` 8, ``num_experts_per_tok`` 2,
``router_aux_loss_coef`` 0.001 when absent) and ``src/transformers/models/qwen2_moe/
configuration_qwen2_moe.py`` and ``modeling_qwen2_moe.py`` (``Qwen2MoeSparseMoeBlock``: softmax,
top-k, renormalised only with ``norm_topk_prob`` (default false); experts of
``moe_intermediate_size`` (1408); a shared expert of ``shared_expert_intermediate_size`` (5632)
times sigmoid(``shared_expert_gate``); ``num_experts`` 60, ``num_experts_per_tok`` 4; a layer is
sparse when it is not in ``mlp_only_layers`` and (index + 1) % ``decoder_sparse_step`` is 0,
otherwise a dense MLP of ``intermediate_size``).

``src/transformers/models/deepseek_v3/configuration_deepseek_v3.py`` and
``modeling_deepseek_v3.py`` (``DeepseekV3MoE``, ``DeepseekV3TopkRouter``: sigmoid scores, a
selection bias (a buffer, not a parameter) and group-limited top-k, renormalised and scaled by
``routed_scaling_factor``; shared experts; the first ``first_k_dense_replace`` layers dense).

None of the files carries a capacity factor (both models route dropless); the caller's
``capacity_factor`` / ``expert_imbalance`` set the buffer size (see
:mod:`graphs.zoo.moe_config`).
"""

from __future__ import annotations

from graphs.zoo.hf_document import ConfigDocument
from graphs.zoo.moe_config import MoEConfig, Score


def mixtral(doc: ConfigDocument, layers: int) -> MoEConfig:
    """Every layer sparse: ``num_local_experts`` (alias ``num_experts``) experts of
    ``intermediate_size``, top ``num_experts_per_tok``, renormalised."""
    experts_key = "num_experts" if "num_experts" in doc.data and \
        "num_local_experts" not in doc.data else "num_local_experts"
    return _checked(doc, MoEConfig(
        experts=doc.positive_int(experts_key, 8), top_k=doc.positive_int("num_experts_per_tok", 2),
        expert_ffn=doc.positive_int("intermediate_size"), normalize=True, score=Score.SOFTMAX,
        aux_loss_coef=doc.number("router_aux_loss_coef", 0.001)), experts_key)


def qwen2_moe(doc: ConfigDocument, layers: int) -> MoEConfig:
    """Sparse layers by ``decoder_sparse_step`` and ``mlp_only_layers``; a gated shared
    expert; renormalised top-k only with ``norm_topk_prob``."""
    step = doc.positive_int("decoder_sparse_step", 1)
    only_mlp = doc.raw("mlp_only_layers") or []
    if not isinstance(only_mlp, list) or not all(isinstance(i, int) for i in only_mlp):
        raise doc.error("mlp_only_layers", "must be a list of layer indices")
    dense = tuple(i for i in range(layers) if i in only_mlp or (i + 1) % step)
    shared = doc.raw("shared_expert_intermediate_size", 5632)
    if not isinstance(shared, int) or isinstance(shared, bool) or shared < 0:
        raise doc.error("shared_expert_intermediate_size", "must be a non-negative integer")
    return _checked(doc, MoEConfig(
        experts=doc.positive_int("num_experts", 60),
        top_k=doc.positive_int("num_experts_per_tok", 4),
        expert_ffn=doc.positive_int("moe_intermediate_size", 1408), shared_ffn=shared,
        shared_gate=True, normalize=doc.flag("norm_topk_prob", False), score=Score.SOFTMAX,
        aux_loss_coef=doc.number("router_aux_loss_coef", 0.001), dense_layers=dense),
        "num_experts")


def deepseek_v3(doc: ConfigDocument, layers: int) -> MoEConfig:
    """``DeepseekV3MoE``: ``n_routed_experts`` experts of ``moe_intermediate_size``, top
    ``num_experts_per_tok`` of sigmoid scores, renormalised with ``norm_topk_prob`` and times
    ``routed_scaling_factor``; ``n_shared_experts`` always-on experts of the same width (one
    SwiGLU of their summed width); the first ``first_k_dense_replace`` layers dense."""
    width = doc.positive_int("moe_intermediate_size", 2048)
    shared = doc.raw("n_shared_experts", 1) or 0
    if not isinstance(shared, int) or isinstance(shared, bool) or shared < 0:
        raise doc.error("n_shared_experts", "must be a non-negative integer")
    dense = doc.raw("first_k_dense_replace", 3)
    if not isinstance(dense, int) or isinstance(dense, bool) or dense < 0:
        raise doc.error("first_k_dense_replace", "must be a non-negative integer")
    return _checked(doc, MoEConfig(
        experts=doc.positive_int("n_routed_experts", 256),
        top_k=doc.positive_int("num_experts_per_tok", 8), expert_ffn=width,
        shared_ffn=shared * width, score=Score.SIGMOID,
        normalize=doc.flag("norm_topk_prob", True),
        routed_scale=doc.number("routed_scaling_factor", 2.5),
        dense_layers=tuple(range(min(dense, layers)))), "n_routed_experts")


def _checked(doc: ConfigDocument, moe: MoEConfig, experts_key: str) -> MoEConfig:
    """Top-k above the experts is the file's error, named by its keys."""
    if moe.top_k > moe.experts:
        raise doc.error("num_experts_per_tok",
                        f"routes each token to {moe.top_k} experts but {experts_key} is "
                        f"{moe.experts}; num_experts_per_tok must not exceed the experts")
    return moe
