"""The model zoo against independent truth: published parameter counts, Narayanan's FLOPs
formula, hand-counted layer structure, and the config rules of the reference code.

Oracles: the published counts (nanoGPT/HF for GPT-2, the Llama model cards) and the per-layer
FLOPs of Narayanan et al. 2021 (SC21, Eq. 2 and 3) are not derived from the zoo's code; the
closed-form ``param_count`` and the graph's PARAM tensors are written independently and must
agree exactly.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphs
from graphs import zoo
from graphs.errors import GraphError
from graphs.ir import DType, TensorRole
from graphs.ops.registry import TensorSpec, get_op

# Published totals (tied embeddings counted once). GPT-2: HF model cards / nanoGPT
# (124M is 124,439,808 exactly); Llama: the model cards' "params" figures.
PUBLISHED = {
    "gpt2": 124.4e6,
    "gpt2-medium": 355e6,
    "gpt2-large": 774e6,
    "gpt2-xl": 1.56e9,
    "llama2-7b": 6.74e9,
    "llama2-13b": 13.0e9,
    "llama2-70b": 69.0e9,
    "llama3-8b": 8.03e9,
    "llama3-70b": 70.6e9,
    "llama3.1-405b": 405.9e9,
    "llama3.1-8b": 8.03e9,
    "mixtral-8x7b": 46.7e9,   # model card; exactly 46,702,792,704 (tests/data/hf-configs)
    "deepseek-v3": 671e9,     # DeepSeek-V3 technical report: 671B total (MTP module apart)
}
SMALL = {"batch": 1, "seq": 16}  # param shapes do not depend on batch/seq; keeps builds cheap


def ops_of(graph):
    ops = graph.ops
    return list(ops.values()) if hasattr(ops, "values") else list(ops)


def graph_params(graph) -> int:
    return sum(t.numel for t in graph.tensors.values() if t.role is TensorRole.PARAM)


def compute_ops(graph):
    return [op for op in ops_of(graph) if op.kind not in ("input", "param")]


def forward_flops(graph) -> float:
    tensors = graph.tensors

    def specs(names):
        return tuple(TensorSpec(tensors[n].shape, tensors[n].dtype) for n in names)

    return sum(get_op(op.kind).flops(specs(op.inputs), specs(op.outputs), op.attrs)
               for op in compute_ops(graph))


@pytest.mark.parametrize("name", sorted(PUBLISHED), ids=sorted(PUBLISHED))
def test_graph_param_count_matches_published(name: str) -> None:
    graph = zoo.build(name, **SMALL)
    assert graph_params(graph) == pytest.approx(PUBLISHED[name], rel=5e-3)


@pytest.mark.parametrize("name", zoo.names(), ids=zoo.names())
def test_closed_form_count_equals_graph_count(name: str) -> None:
    assert zoo.param_count(name) == graph_params(zoo.build(name, **SMALL))


OVERRIDE_CASES = {
    "gpt2-narrow": ("gpt2", {"layers": 3, "hidden": 256, "heads": 4, "vocab": 1000}),
    "llama3-gqa2": ("llama3-8b", {"layers": 2, "hidden": 512, "heads": 8, "kv_heads": 2}),
    "llama2-mha": ("llama2-7b", {"layers": 1, "hidden": 256, "heads": 4, "ffn": 100}),
    "transformer": ("transformer", {"layers": 3, "hidden": 64, "heads": 4, "kv_heads": 1}),
    "mlp": ("mlp", {"layers": 5, "hidden": 32, "ffn": 48}),
    "mixtral-small": ("mixtral-8x7b", {"layers": 2, "hidden": 256, "heads": 8, "kv_heads": 2,
                                       "experts": 4, "top_k": 1, "expert_ffn": 64}),
}


@pytest.mark.parametrize("case", sorted(OVERRIDE_CASES), ids=sorted(OVERRIDE_CASES))
def test_closed_form_count_equals_graph_count_with_overrides(case: str) -> None:
    name, overrides = OVERRIDE_CASES[case]
    graph = zoo.build(name, batch=2, seq=8, **overrides)
    assert zoo.param_count(name, **overrides) == graph_params(graph)


def test_gpt2_small_count_by_hand() -> None:
    h, layers, vocab, context = 768, 12, 50257, 1024
    per_layer = 4 * h * h + 4 * h + 2 * 4 * h * h + 4 * h + h + 4 * h   # attn, mlp, 2 LNs
    assert zoo.param_count("gpt2") == layers * per_layer + vocab * h + context * h + 2 * h
    assert zoo.param_count("gpt2") == 124_439_808


# Non-source ops per decoder layer, counted by hand from the reference code:
# llama: rms, q/k/v einsum, 3 reshapes, 2 rotary, attention, merge, wo, add, rms, gate, up,
# silu, mul, down, add = 20; gpt2 adds 6 bias adds and has no rotary: 22; mlp: 2 einsum + gelu.
PER_LAYER_OPS = {"llama3-8b": 20, "llama2-7b": 20, "gpt2": 22, "transformer": 22, "mlp": 3}


@pytest.mark.parametrize("name", sorted(PER_LAYER_OPS), ids=sorted(PER_LAYER_OPS))
def test_layers_override_scales_op_count_linearly(name: str) -> None:
    counts = {n: len(compute_ops(zoo.build(name, layers=n, **SMALL))) for n in (1, 2, 5)}
    assert counts[2] - counts[1] == PER_LAYER_OPS[name]
    assert counts[5] - counts[1] == 4 * PER_LAYER_OPS[name]


@pytest.mark.parametrize("name", zoo.names(), ids=zoo.names())
def test_default_graph_validates_and_ends_in_the_right_output(name: str) -> None:
    graph = zoo.build(name)
    graph.validate()
    config = zoo.config(name)
    outputs = [t for t in graph.tensors.values() if t.role is TensorRole.OUTPUT]
    assert len(outputs) == 1
    if config.vocab is None:
        assert outputs[0].shape == (config.batch, config.seq, config.hidden)
    else:
        assert outputs[0].shape == ()
        targets = graph.tensors["targets"]
        assert (targets.shape, targets.dtype) == ((config.batch, config.seq), DType.INT64)


def test_llama3_8b_layer_structure() -> None:
    graph = zoo.build("llama3-8b", layers=1, batch=2, seq=32)
    shapes = {n: t.shape for n, t in graph.tensors.items() if t.role is TensorRole.PARAM}
    assert shapes["layers.0.attn.wq"] == (4096, 4096)
    assert shapes["layers.0.attn.wk"] == (4096, 1024)       # 8 KV heads × 128
    assert shapes["layers.0.attn.wv"] == (4096, 1024)
    assert shapes["layers.0.attn.wo"] == (4096, 4096)
    assert shapes["layers.0.mlp.w1"] == shapes["layers.0.mlp.w3"] == (4096, 14336)
    assert shapes["layers.0.mlp.w2"] == (14336, 4096)
    assert shapes["layers.0.attn_norm.weight"] == (4096,)
    assert shapes["head.weight"] == (4096, 128256)          # untied head
    assert shapes["embed.tokens"] == (128256, 4096)
    for table in ("rope.cos", "rope.sin"):
        assert graph.tensors[table].shape == (32, 64)
        assert graph.tensors[table].role is TensorRole.INPUT
    kinds = {op.kind for op in compute_ops(graph)}
    assert {"rms_norm", "rotary", "attention", "silu"} <= kinds
    assert not {"layer_norm", "gelu"} & kinds


def test_gpt2_is_tied_with_biases_and_learned_positions() -> None:
    graph = zoo.build("gpt2", layers=1, batch=2, seq=64)
    head = next(op for op in compute_ops(graph) if op.name == "head")
    assert "embed.tokens" in head.inputs
    assert "head.weight" not in graph.tensors
    params = {n: t.shape for n, t in graph.tensors.items() if t.role is TensorRole.PARAM}
    assert params["embed.positions"] == (1024, 768)
    assert params["layers.0.attn.bq"] == (768,)
    assert params["layers.0.mlp.b1"] == (3072,)
    assert params["layers.0.attn_norm.bias"] == (768,)
    kinds = {op.kind for op in compute_ops(graph)}
    assert {"layer_norm", "gelu", "embedding"} <= kinds
    assert not {"rms_norm", "rotary", "silu"} & kinds


def test_mlp_is_a_plain_stack() -> None:
    graph = zoo.build("mlp", layers=2, hidden=64, ffn=256, batch=4, seq=8)
    params = {n: t.shape for n, t in graph.tensors.items() if t.role is TensorRole.PARAM}
    assert params == {"layers.0.mlp.w1": (64, 256), "layers.0.mlp.w2": (256, 64),
                      "layers.1.mlp.w1": (64, 256), "layers.1.mlp.w2": (256, 64)}
    assert graph.tensors["x"].role is TensorRole.INPUT
    assert graph.tensors["x"].shape == (4, 8, 64)


# The registry counts causal attention as the full s×t score matrix (no /2), like Narayanan.
ATTENTION_CAUSAL_FACTOR = 1.0


def narayanan_forward_flops(config: zoo.ModelConfig, causal_factor: float) -> float:
    """Forward FLOPs per step: 2·tokens per weight element of the projections and FFN
    (Narayanan's 24·B·s·h² per layer, generalised to GQA and SwiGLU), the attention term
    4·B·s²·h per layer (times ``causal_factor``), and the logits 2·B·s·h·V."""
    b, s, h, f = config.batch, config.seq, config.hidden, config.ffn
    kv_width = config.kv_heads * (h // config.heads)
    ffn_matrices = 3 if config.activation is zoo.Activation.SWIGLU else 2
    projections = 2 * b * s * (2 * h * h + 2 * h * kv_width + ffn_matrices * h * f)
    attention = 4 * b * s * s * h * causal_factor
    return config.layers * (projections + attention) + 2 * b * s * h * config.vocab


@pytest.mark.parametrize("name", ["gpt2", "gpt2-medium", "llama2-7b", "llama3-8b"])
def test_forward_flops_match_narayanan(name: str) -> None:
    overrides = {"layers": 2, "batch": 1, "seq": 1024}
    config = zoo.config(name, **overrides)
    expected = narayanan_forward_flops(config, ATTENTION_CAUSAL_FACTOR)
    # Norms, activations, softmax and the loss add a few FLOPs per element (measured < 0.3%).
    assert forward_flops(zoo.build(name, **overrides)) == pytest.approx(expected, rel=1e-2)


def test_forward_flops_are_dominated_by_2_params_tokens() -> None:
    # llama3-8b at a short sequence: attention is small, so forward ≈ 2·P·tokens minus the
    # embedding table (a lookup, not a matmul).
    config = zoo.config("llama3-8b", batch=1, seq=128)
    matmul_params = zoo.param_count(config) - config.vocab * config.hidden
    expected = 2 * matmul_params * config.tokens
    assert forward_flops(zoo.build_config(config)) == pytest.approx(expected, rel=1e-2)


@pytest.mark.parametrize(("typo", "suggestion"), [
    ("gpt-2", "gpt2"), ("llama3-7b", "llama3-8b"), ("llama-2-70b", "llama2-70b"),
    ("gpt2-xxl", "gpt2-xl"), ("llama31-405b", "llama3.1-405b"),
    ("GPT2", "gpt2"), ("Llama3-8B", "llama3-8b"),   # case alone: suggested, and alone
])
def test_unknown_model_suggests_close_names(typo: str, suggestion: str) -> None:
    with pytest.raises(zoo.UnknownModelError) as caught:
        zoo.build(typo)
    assert suggestion in caught.value.suggestions
    assert suggestion in str(caught.value) and typo in str(caught.value)
    if typo.lower() == suggestion:
        assert caught.value.suggestions == (suggestion,)
    assert isinstance(caught.value, GraphError)


BAD_OVERRIDES = {
    "heads-not-dividing": ("gpt2", {"heads": 7}, "heads", "divide"),
    "kv-not-dividing": ("llama3-8b", {"kv_heads": 5}, "kv_heads", "divide"),
    "seq-beyond-context": ("gpt2", {"seq": 2048}, "seq", "context 1024"),
    "zero-layers": ("llama2-7b", {"layers": 0}, "layers", "positive"),
    "typo": ("gpt2", {"hiden": 512}, "hiden", 'did you mean "hidden"'),
    "heads-on-mlp": ("mlp", {"heads": 4}, "heads", "does not apply"),
    "bad-dtype": ("gpt2", {"dtype": "fp12"}, "dtype", "fp12"),
    "odd-rope-dim": ("llama3-8b", {"hidden": 4104, "heads": 8, "kv_heads": 8}, "heads", "even"),
    # the flag's spelling (--top-k), never the keyword's (top_k)
    "zero-top-k": ("mixtral-8x7b", {"top_k": 0}, "top_k",
                   "top-k must be a positive integer, got 0; pass --top-k 1 or more"),
    "zero-experts": ("mixtral-8x7b", {"experts": 0}, "experts", "pass --experts 1 or more"),
}


@pytest.mark.parametrize("case", sorted(BAD_OVERRIDES), ids=sorted(BAD_OVERRIDES))
def test_bad_overrides_raise_a_clear_error(case: str) -> None:
    name, overrides, field, text = BAD_OVERRIDES[case]
    with pytest.raises(zoo.ModelConfigError) as caught:
        zoo.build(name, **overrides)
    assert caught.value.field == field
    assert text in str(caught.value)
    assert name in str(caught.value)


def test_overrides_follow_the_reference_rules() -> None:
    # meta-llama FeedForward: int(2·4·2048/3) = 5461 → int(1.3·5461) = 7099 → ceil to 1024s.
    assert zoo.config("llama3-8b", hidden=2048).ffn == 7168
    assert zoo.config("gpt2", hidden=512, heads=8).ffn == 2048
    assert zoo.config("gpt2", hidden=512, heads=8, ffn=1000).ffn == 1000
    assert zoo.config("llama2-7b", heads=16).kv_heads == 16      # MHA stays MHA
    assert zoo.config("llama3-8b", heads=16).kv_heads == 8       # GQA keeps its KV heads
    assert zoo.config("gpt2", batch=None).batch == 8             # None means "not given"


def test_published_ffn_rule_reproduces_every_llama_width() -> None:
    expected = {"llama2-7b": 11008, "llama2-13b": 13824, "llama2-70b": 28672,
                "llama3-8b": 14336, "llama3-70b": 28672, "llama3.1-405b": 53248}
    assert {name: zoo.config(name).ffn for name in expected} == expected


def test_dtype_override_applies_to_every_float_tensor() -> None:
    graph = zoo.build("llama3-8b", layers=1, batch=1, seq=8, dtype="f32")
    params = [t for t in graph.tensors.values() if t.role is TensorRole.PARAM]
    assert params and all(t.dtype is DType.F32 for t in params)
    assert zoo.config("gpt2", dtype=DType.F16).dtype is DType.F16


def test_builds_are_deterministic() -> None:
    first = zoo.build("llama3-8b", layers=3).to_dict()
    second = zoo.build("llama3-8b", layers=3).to_dict()
    assert json.dumps(first, sort_keys=False) == json.dumps(second, sort_keys=False)


def test_largest_model_builds_with_all_its_layers() -> None:
    graph = zoo.build("llama3.1-405b")
    assert graph_params(graph) == zoo.param_count("llama3.1-405b")
    assert sum(1 for n in graph.tensors if n.endswith(".attn.wq")) == 126


def test_names_and_configs_are_listed_in_a_stable_order() -> None:
    assert zoo.names()[:3] == ("mlp", "transformer", "gpt2")
    assert len(zoo.names()) == 15 and len(set(zoo.names())) == 15
    config = zoo.config("llama3.1-405b")
    assert (config.layers, config.hidden, config.heads, config.kv_heads, config.vocab,
            config.context) == (126, 16384, 128, 8, 128256, 131072)
    assert math.isclose(config.rope_theta, 5e5)


def test_integer_dtype_is_refused() -> None:
    with pytest.raises(zoo.ModelConfigError, match="not a floating-point"):
        zoo.config("gpt2", dtype="int64")




@settings(max_examples=25, deadline=None)
@given(family=st.sampled_from(["gpt2", "llama3-8b", "llama2-7b", "transformer"]),
       layers=st.integers(1, 3), head_dim=st.sampled_from([2, 4, 8]),
       kv_heads=st.sampled_from([1, 2, 4]), groups=st.integers(1, 3),
       ffn=st.integers(1, 40), vocab=st.integers(2, 60))
def test_any_valid_override_builds_a_consistent_graph(
        family: str, layers: int, head_dim: int, kv_heads: int, groups: int, ffn: int,
        vocab: int) -> None:
    heads = kv_heads * groups
    overrides = {"layers": layers, "hidden": heads * head_dim, "heads": heads,
                 "kv_heads": kv_heads, "ffn": ffn, "batch": 2, "seq": 4}
    if family != "transformer":
        overrides["vocab"] = vocab
    graph = zoo.build(family, **overrides)
    graph.validate()
    assert graph_params(graph) == zoo.param_count(family, **overrides)
    params = graph.tensors
    assert params["layers.0.attn.wk"].shape == (heads * head_dim, kv_heads * head_dim)
    assert params["layers.0.mlp.w2"].shape == (ffn, heads * head_dim)


@pytest.mark.parametrize("name", ["mlp", "transformer", "gpt2", "llama3-8b"])
def test_zoo_graphs_survive_the_json_round_trip(name: str) -> None:
    graph = zoo.build(name, layers=2, batch=2, seq=16)
    text = graphs.dumps(graph)
    again = graphs.loads(text)
    assert again == graph
    assert graphs.dumps(again) == text
