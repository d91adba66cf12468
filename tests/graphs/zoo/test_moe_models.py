"""Mixture-of-experts models of the zoo and of Hugging Face configs, against independent truth.

Oracles: DeepSeek-V3's 671B total (its technical report, Liu et al. 2024; the multi-token
prediction module apart), here counted by hand from ``DeepseekV3Attention`` /
``DeepseekV3MoE`` in transformers' ``modeling_deepseek_v3.py``; Mixtral 8x7B's
46,702,792,704 parameters (tests/data/hf-configs/README.md, derived there by hand from the
model's structure); Qwen1.5-MoE-A2.7B's "14.3B" total, here recomputed
by hand from ``Qwen2MoeSparseMoeBlock`` (router, 60 experts of three 2048×1408 matrices, a
shared SwiGLU expert of 5632 and its 2048×1 gate, q/k/v biases); Megatron-Core's
``get_capacity`` (ceil(tokens·topk/experts · capacity_factor)).
"""

from __future__ import annotations

import math
import warnings

import pytest

from graphs import zoo
from graphs.ir import TensorRole
from graphs.zoo.moe_config import MoEConfig

QWEN_A27B = {
    "model_type": "qwen2_moe", "hidden_size": 2048, "intermediate_size": 5632,
    "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
    "vocab_size": 151936, "max_position_embeddings": 8192, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
    "norm_topk_prob": False, "decoder_sparse_step": 1, "tie_word_embeddings": False,
}


def _params(graph) -> dict[str, tuple[int, ...]]:
    return {n: t.shape for n, t in graph.tensors.items() if t.role is TensorRole.PARAM}


def _read(config: dict, **overrides):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zoo.UnmodelledFieldsWarning)
        return zoo.read_hf_config(config, **overrides)


def test_mixtral_preset_has_the_published_count() -> None:
    assert zoo.param_count("mixtral-8x7b") == 46_702_792_704
    graph = zoo.build("mixtral-8x7b", layers=1, batch=1, seq=16)
    shapes = _params(graph)
    assert shapes["layers.0.moe.router"] == (4096, 8)
    assert shapes["layers.0.moe.experts.w13"] == (8, 4096, 2 * 14336)   # w1 and w3 packed
    assert shapes["layers.0.moe.experts.w2"] == (8, 14336, 4096)
    assert "layers.0.mlp.w1" not in shapes


def test_qwen2_moe_count_by_hand() -> None:
    h, layers, vocab = 2048, 24, 151936
    attention = 4 * h * h + 3 * h                  # q, k, v, o; biases on q, k, v
    moe = h * 60 + 60 * 3 * h * 1408 + 3 * h * 5632 + h   # router, experts, shared + gate
    total = layers * (attention + moe + 2 * h) + 2 * vocab * h + h
    assert total == 14_315_784_192                  # "14.3B" on the model card
    model = _read(QWEN_A27B)
    assert model.param_count() == total
    graph = _read(QWEN_A27B, layers=2, batch=1, seq=16).build()
    assert sum(math.prod(s) for s in _params(graph).values()) == \
        2 * (attention + moe + 2 * h) + 2 * vocab * h + h


def test_qwen2_moe_sparse_step_and_mlp_only_layers_make_dense_layers() -> None:
    config = {**QWEN_A27B, "num_hidden_layers": 4, "decoder_sparse_step": 2,
              "mlp_only_layers": [3]}
    shapes = _params(_read(config, batch=1, seq=16).build())
    # sparse when (i + 1) % 2 == 0 and i not in mlp_only_layers: only layer 1
    assert [i for i in range(4) if f"layers.{i}.moe.router" in shapes] == [1]
    assert shapes["layers.0.mlp.w1"] == (2048, 5632)
    assert shapes["layers.1.moe.shared_gate"] == (2048, 1)


def test_capacity_is_megatrons_get_capacity() -> None:
    moe = zoo.config("mixtral-8x7b", capacity_factor=1.25).moe
    for tokens in (1, 7, 100, 4096):
        want = max(1, min(tokens, math.ceil(tokens * 2 / 8 * 1.25)))
        assert moe.capacity(tokens) == want
    graph = zoo.build("mixtral-8x7b", layers=1, batch=2, seq=64, capacity_factor=1.25)
    assert graph.tensors["layers.0.moe.dispatch.out"].shape == (2, 8, 20, 4096)
    skewed = zoo.build("mixtral-8x7b", layers=1, batch=2, seq=64, expert_imbalance=2.0)
    assert skewed.tensors["layers.0.moe.dispatch.out"].shape == (2, 8, 32, 4096)


def test_load_balancing_loss_joins_the_loss_per_layer() -> None:
    graph = zoo.build("mixtral-8x7b", layers=2, batch=1, seq=16, hidden=64, heads=4,
                      kv_heads=2, expert_ffn=32)
    kinds = {op.name: op.kind for op in graph.ops}
    assert kinds["loss.ce"] == "cross_entropy" and kinds["loss"] == "add"
    assert kinds["loss.aux_layers"] == "concat" and kinds["loss.aux"] == "sum"
    assert graph.op_by_name("loss.aux_layers").inputs == ("layers.0.moe.aux_vec.out",
                                                          "layers.1.moe.aux_vec.out")
    scaled = graph.op_by_name("layers.0.moe.aux_scaled")
    assert scaled.attrs["factor"] == pytest.approx(0.02 * 8 / (2 * 16 * 16))


# ---- bad input: one clear message each --------------------------------------------------------
def test_top_k_larger_than_experts() -> None:
    with pytest.raises(zoo.ModelConfigError, match=r"top-k 9 is larger than the 8 experts"):
        zoo.config("mixtral-8x7b", top_k=9)
    with pytest.raises(zoo.HFConfigError, match=r'"num_experts_per_tok": routes each token to '
                                                r"5 experts but num_local_experts is 4"):
        _read({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96,
               "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100,
               "num_local_experts": 4, "num_experts_per_tok": 5})


@pytest.mark.parametrize("factor", [0.0, -1.0])
def test_capacity_factor_must_be_positive(factor: float) -> None:
    with pytest.raises(zoo.ModelConfigError, match=r"capacity factor .* must be > 0"):
        zoo.config("mixtral-8x7b", capacity_factor=factor)
    with pytest.raises(zoo.ModelConfigError, match=r"capacity factor .* must be > 0"):
        _read(QWEN_A27B, capacity_factor=factor)


@pytest.mark.parametrize("factor", [math.inf, -math.inf, math.nan])
def test_capacity_factor_must_be_finite(factor: float) -> None:
    with pytest.raises(zoo.ModelConfigError, match=r"capacity factor .* must be > 0 and finite"):
        zoo.config("mixtral-8x7b", capacity_factor=factor)
    with pytest.raises(zoo.ModelConfigError, match=r"capacity factor .* must be > 0 and finite"):
        _read(QWEN_A27B, capacity_factor=factor)


@pytest.mark.parametrize("imbalance", [math.inf, math.nan, 0.5])
def test_expert_imbalance_must_be_finite_and_at_least_one(imbalance: float) -> None:
    with pytest.raises(zoo.ModelConfigError, match=r"so it is at least 1.0 \(and finite\)"):
        zoo.config("mixtral-8x7b", expert_imbalance=imbalance)
    with pytest.raises(zoo.ModelConfigError, match=r"so it is at least 1.0 \(and finite\)"):
        _read(QWEN_A27B, expert_imbalance=imbalance)


@pytest.mark.parametrize("imbalance", [1.0, 1.5])
def test_expert_imbalance_beside_a_capacity_factor_is_refused(imbalance: float) -> None:
    """A capacity factor fixes the buffers (the surplus is dropped), so an imbalance given
    with it would change nothing: refused, not ignored."""
    both = {"capacity_factor": 1.25, "expert_imbalance": imbalance}
    with pytest.raises(zoo.ModelConfigError, match=r"already fixes them.*give one of the two"):
        zoo.config("mixtral-8x7b", **both)
    with pytest.raises(zoo.ModelConfigError, match=r"already fixes them.*give one of the two"):
        _read(QWEN_A27B, **both)
    with pytest.raises(zoo.ModelConfigError, match=r"already fixes them"):
        MoEConfig(experts=8, top_k=2, expert_ffn=64, capacity_factor=1.25,
                  imbalance=1.5).validate("m", 1)


def test_moe_overrides_are_refused_for_dense_models() -> None:
    with pytest.raises(zoo.ModelConfigError, match="applies to mixture-of-experts models only"):
        zoo.config("llama3-8b", capacity_factor=1.0)
    with pytest.raises(zoo.ModelConfigError, match="applies to mixture-of-experts models only"):
        _read({"model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
               "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 100},
              expert_imbalance=1.5)


DEEPSEEK_V3 = {  # deepseek-ai/DeepSeek-V3 config.json's sizes (transformers' defaults too)
    "model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
    "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
    "routed_scaling_factor": 2.5, "kv_lora_rank": 512, "q_lora_rank": 1536,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "n_group": 8,
    "topk_group": 4, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "norm_topk_prob": True, "max_position_embeddings": 163840, "vocab_size": 129280,
    "tie_word_embeddings": False, "num_nextn_predict_layers": 1,
}


def test_deepseek_v3_count_by_hand() -> None:
    h, heads, layers, vocab = 7168, 128, 61, 129280
    attention = (h * 1536 + 1536 + 1536 * heads * (128 + 64)      # q_a, q_norm, q_b
                 + h * (512 + 64) + 512 + 512 * heads * (128 + 128)  # kv_a, kv_norm, kv_b
                 + heads * 128 * h)                                 # o
    dense = 3 * h * 18432
    moe = h * 256 + 256 * 3 * h * 2048 + 3 * h * 2048                # router, experts, shared
    total = 3 * (attention + dense + 2 * h) + 58 * (attention + moe + 2 * h) \
        + 2 * vocab * h + h
    assert total == 671_026_404_352                                  # "671B"
    assert layers == 3 + 58
    assert zoo.param_count("deepseek-v3") == total
    assert _read(DEEPSEEK_V3).param_count() == total


def test_deepseek_v3_config_builds_the_preset_graph_and_says_what_it_approximates() -> None:
    import graphs

    model = _read(DEEPSEEK_V3, layers=4, batch=1, seq=16)
    ours = graphs.io.graph_to_dict(model.build())
    theirs = graphs.io.graph_to_dict(zoo.build("deepseek-v3", layers=4, batch=1, seq=16))
    assert {**ours, "name": "deepseek-v3"} == theirs
    assert "n_group=8, topk_group=4" in model.warning
    assert "num_nextn_predict_layers=1" in model.warning
    shapes = _params(model.build())
    assert shapes["layers.0.attn.wq_b"] == (1536, 128 * 192)
    assert shapes["layers.0.attn.wkv_a"] == (7168, 576)
    assert shapes["layers.0.attn.wkv_b"] == (512, 128 * 256)
    assert shapes["layers.0.mlp.w1"] == (7168, 18432)                 # first three dense
    assert shapes["layers.3.moe.experts.w13"] == (256, 7168, 2 * 2048)
    assert shapes["layers.3.moe.shared.w1"] == (7168, 2048)
