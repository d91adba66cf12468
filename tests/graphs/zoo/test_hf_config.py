"""Models from Hugging Face ``config.json`` files against independent truth.

Oracles: the five real configs in ``tests/data/hf-configs/`` and their published parameter
counts (README there), which neither the graph nor the closed form are derived from; the zoo
presets built from nanoGPT / Meta's published sizes (an HF GPT-2 or Llama-3.1-8B config must
give the same graph as the zoo's ``gpt2`` / ``llama3-8b``); hand-written per-layer counts and
tensor shapes read from the Hugging Face modeling code (Qwen2Attention biases q, k, v and not o).
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphs
from graphs import zoo
from graphs.errors import GraphError
from graphs.ir import DType, TensorRole

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "hf-configs"

# Published totals, copied from tests/data/hf-configs/README.md (tied embeddings counted once).
PUBLISHED = {
    "gpt2.json": 124_439_808,
    "llama-3.2-1b.json": 1_235_814_400,
    "llama-3.1-8b.json": 8_030_261_248,
    "mistral-7b-v0.1.json": 7_241_732_096,
    "qwen2.5-7b.json": 7_615_616_512,
    "mixtral-8x7b-v0.1.json": 46_702_792_704,
}
FILES = sorted(PUBLISHED)
SMALL = {"batch": 1, "seq": 16}  # parameter shapes do not depend on batch or seq


def params(graph: graphs.OpGraph) -> dict[str, tuple[int, ...]]:
    return {n: t.shape for n, t in graph.tensors.items() if t.role is TensorRole.PARAM}


def graph_params(graph: graphs.OpGraph) -> int:
    return sum(t.numel for t in graph.tensors.values() if t.role is TensorRole.PARAM)


def build(file: str, **overrides) -> graphs.OpGraph:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zoo.UnmodelledFieldsWarning)
        return zoo.from_hf_config(CONFIGS / file, **overrides)


def tiny_llama(**fields) -> dict:
    base = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "vocab_size": 100, "max_position_embeddings": 256}
    return {**base, **fields}


# ---- published counts -----------------------------------------------------------------------
@pytest.mark.parametrize("file", FILES, ids=FILES)
def test_graph_param_count_equals_published(file: str) -> None:
    assert graph_params(build(file, **SMALL)) == PUBLISHED[file]


@pytest.mark.parametrize("file", FILES, ids=FILES)
def test_closed_form_count_equals_published(file: str) -> None:
    model = zoo.read_hf_config(CONFIGS / file)
    assert model.param_count() == zoo.param_count(model.config) == PUBLISHED[file]


@pytest.mark.parametrize("file", FILES, ids=FILES)
def test_config_files_are_recognised_and_default_graphs_validate(file: str) -> None:
    assert zoo.is_hf_config(CONFIGS / file)
    assert zoo.is_hf_config(json.loads((CONFIGS / file).read_text()))
    graph = build(file, layers=2)
    graph.validate()
    assert graph.name == file.removesuffix(".json")
    (loss,) = [t for t in graph.tensors.values() if t.role is TensorRole.OUTPUT]
    assert loss.shape == ()


# ---- against the zoo presets (published sizes from nanoGPT and Meta) -----------------------
@pytest.mark.parametrize(("file", "preset"), [("gpt2.json", "gpt2"),
                                              ("llama-3.1-8b.json", "llama3-8b"),
                                              ("mixtral-8x7b-v0.1.json", "mixtral-8x7b")])
def test_same_graph_as_the_zoo_preset_of_the_same_architecture(file: str, preset: str) -> None:
    overrides = {"layers": 2, "batch": 2, "seq": 64}
    ours = graphs.io.graph_to_dict(build(file, **overrides))
    theirs = graphs.io.graph_to_dict(zoo.build(preset, **overrides))
    assert ours["name"] == file.removesuffix(".json")
    assert {**ours, "name": preset} == theirs


# ---- structure ------------------------------------------------------------------------------
def test_qwen2_biases_q_k_v_but_not_o_nor_the_mlp() -> None:
    shapes = params(build("qwen2.5-7b.json", layers=1, **SMALL))
    assert shapes["layers.0.attn.bq"] == (3584,)
    assert shapes["layers.0.attn.bk"] == shapes["layers.0.attn.bv"] == (512,)  # 4 KV heads × 128
    assert not {"layers.0.attn.bo", "layers.0.mlp.b1", "layers.0.mlp.b2", "layers.0.mlp.b3"} \
        & set(shapes)
    assert shapes["layers.0.mlp.w1"] == (3584, 18944)
    assert shapes["head.weight"] == (3584, 152064)


@pytest.mark.parametrize("file", ["llama-3.1-8b.json", "llama-3.2-1b.json",
                                  "mistral-7b-v0.1.json"])
def test_llama_family_has_eight_kv_heads_and_no_biases(file: str) -> None:
    graph = build(file, layers=1, **SMALL)
    shapes = params(graph)
    config = json.loads((CONFIGS / file).read_text())
    head_dim = config.get("head_dim", config["hidden_size"] // config["num_attention_heads"])
    assert graph.tensors["layers.0.attn.k_heads.out"].shape == (1, 16, 8, head_dim)
    assert shapes["layers.0.attn.wk"] == (config["hidden_size"], 8 * head_dim)
    assert not [name for name in shapes if name.split(".")[-1].startswith("b")]


@pytest.mark.parametrize(("file", "tied"), [("gpt2.json", True), ("llama-3.2-1b.json", True),
                                            ("llama-3.1-8b.json", False),
                                            ("mistral-7b-v0.1.json", False),
                                            ("qwen2.5-7b.json", False)])
def test_tied_models_reuse_the_token_table_as_head(file: str, tied: bool) -> None:
    graph = build(file, layers=1, **SMALL)
    head = next(op for op in graph.ops if op.name == "head")
    assert ("embed.tokens" in head.inputs) is tied
    assert ("head.weight" in graph.tensors) is not tied


def test_gpt2_has_learned_positions_biases_and_layer_norm() -> None:
    graph = build("gpt2.json", layers=1, **SMALL)
    shapes = params(graph)
    assert shapes["embed.positions"] == (1024, 768)
    assert shapes["layers.0.attn.bo"] == (768,)
    assert shapes["layers.0.mlp.b1"] == (3072,)
    assert shapes["layers.0.attn_norm.bias"] == (768,)
    kinds = {op.kind for op in graph.ops}
    assert {"layer_norm", "gelu"} <= kinds and not {"rms_norm", "rotary"} & kinds


def test_explicit_head_dim_need_not_be_hidden_over_heads() -> None:
    # Mistral-Nemo style: hidden 5120, 32 heads of 128 (4096 ≠ 5120), 8 KV heads.
    config = tiny_llama(model_type="mistral", hidden_size=80, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16)
    graph = zoo.from_hf_config(config, seq=8)
    shapes = params(graph)
    assert shapes["layers.0.attn.wq"] == (80, 64) and shapes["layers.0.attn.wo"] == (64, 80)
    assert shapes["layers.0.attn.wk"] == (80, 32)
    assert graph.tensors["rope.cos"].shape == (8, 8)
    h, a, k, f, v = 80, 64, 32, 96, 100
    per_layer = 2 * h * a + 2 * h * k + 3 * h * f + 2 * h
    assert graph_params(graph) == zoo.read_hf_config(config).param_count() \
        == 2 * per_layer + 2 * v * h + h


def test_op_and_tensor_names_follow_the_zoo_layer_pattern() -> None:
    graph = build("llama-3.2-1b.json", layers=4, **SMALL)
    for index in range(4):
        assert f"layers.{index}.attn.wq" in graph.tensors
        assert f"layers.{index}.mlp.w2" in graph.tensors
    assert "layers.4.attn.wq" not in graph.tensors


# ---- shapes of the step ---------------------------------------------------------------------
def test_default_shapes_do_not_come_from_max_position_embeddings() -> None:
    assert zoo.read_hf_config(CONFIGS / "llama-3.1-8b.json").config.seq == 4096  # of 131072
    assert zoo.read_hf_config(CONFIGS / "gpt2.json").config.seq == 1024
    assert zoo.read_hf_config(tiny_llama()).config.seq == 256  # capped by the context
    model = zoo.read_hf_config(CONFIGS / "qwen2.5-7b.json")
    assert (model.config.batch, model.config.dtype) == (8, DType.BF16)


def test_seq_beyond_learned_positions_is_an_error() -> None:
    with pytest.raises(zoo.ModelConfigError) as caught:
        zoo.read_hf_config(CONFIGS / "gpt2.json", seq=2048)
    assert caught.value.field == "seq" and "1024" in str(caught.value)


def test_overrides_batch_seq_layers_dtype_apply() -> None:
    graph = build("mistral-7b-v0.1.json", batch=3, seq=32, layers=2, dtype="f32")
    assert graph.tensors["tokens"].shape == (3, 32)
    assert all(t.dtype is DType.F32 for t in graph.tensors.values() if t.role is TensorRole.PARAM)
    assert "layers.1.attn.wq" in graph.tensors and "layers.2.attn.wq" not in graph.tensors
    model = zoo.read_hf_config(CONFIGS / "mistral-7b-v0.1.json", layers=2, batch=None)
    assert graph_params(graph) == model.param_count() and model.config.batch == 8


@pytest.mark.parametrize(("key", "config_key"), [("hidden", "hidden_size"),
                                                 ("ffn", "intermediate_size"),
                                                 ("heads", "num_attention_heads"),
                                                 ("kv_heads", "num_key_value_heads"),
                                                 ("vocab", "vocab_size")])
def test_architecture_overrides_are_refused_naming_the_config_key(key: str,
                                                                   config_key: str) -> None:
    with pytest.raises(zoo.ModelConfigError) as caught:
        zoo.read_hf_config(CONFIGS / "qwen2.5-7b.json", **{key: 64})
    assert caught.value.field == key
    assert f'"{config_key}"' in str(caught.value) and "edit the file" in str(caught.value)


def test_gpt2_refused_override_names_its_own_key_and_a_typo_gets_a_suggestion() -> None:
    with pytest.raises(zoo.ModelConfigError, match='"n_embd"'):
        zoo.read_hf_config(CONFIGS / "gpt2.json", hidden=512)
    with pytest.raises(zoo.ModelConfigError, match='did you mean "seq"'):
        zoo.read_hf_config(CONFIGS / "gpt2.json", sqe=512)


# ---- unmodelled fields: one warning line ----------------------------------------------------
def test_mistral_window_is_named_only_when_shorter_than_seq() -> None:
    assert zoo.read_hf_config(CONFIGS / "mistral-7b-v0.1.json").warning is None  # seq 4096
    warning = zoo.read_hf_config(CONFIGS / "mistral-7b-v0.1.json", seq=8192).warning
    assert warning is not None and "\n" not in warning
    assert "sliding_window=4096" in warning and "8192" in warning
    assert "mistral-7b-v0.1" in warning


def test_qwen2_window_counts_only_when_use_sliding_window() -> None:
    assert zoo.read_hf_config(CONFIGS / "qwen2.5-7b.json", seq=8192).warning is None
    config = {**json.loads((CONFIGS / "qwen2.5-7b.json").read_text()),
              "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20}
    warning = zoo.read_hf_config(config, seq=8192).warning
    assert warning is not None and "8 of 28 layers" in warning


@pytest.mark.parametrize(("fields", "named"), [
    ({"attention_bias": True, "mlp_bias": True}, "attention_bias=true, mlp_bias=true"),
    ({"num_local_experts": 8, "num_experts_per_tok": 2}, "num_local_experts=8"),
    ({"hidden_act": "gelu"}, 'hidden_act="gelu"'),
    ({"attention_dropout": 0.1}, "attention_dropout=0.1"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5"),
    ({"quantization_config": {"bits": 4}}, "quantization_config"),
])
def test_unmodelled_fields_are_named(fields: dict, named: str) -> None:
    warning = zoo.read_hf_config(tiny_llama(**fields)).warning
    assert warning is not None and named in warning and "\n" not in warning


def test_neutral_values_and_rope_scaling_are_not_warned() -> None:
    config = tiny_llama(attention_bias=False, mlp_bias=False, attention_dropout=0.0,
                        rope_scaling={"rope_type": "llama3", "factor": 8.0},
                        rope_theta=5e5, rms_norm_eps=1e-5, num_local_experts=0)
    assert zoo.read_hf_config(config).warning is None


def test_gpt2_dropout_defaults_are_named_as_hugging_face_sets_them() -> None:
    warning = zoo.read_hf_config(CONFIGS / "gpt2.json").warning
    assert warning is not None
    assert "embd_pdrop=0.1, resid_pdrop=0.1, attn_pdrop=0.1" in warning
    no_dropout = {**json.loads((CONFIGS / "gpt2.json").read_text()),
                  "embd_pdrop": 0.0, "resid_pdrop": 0.0, "attn_pdrop": 0}
    assert zoo.read_hf_config(no_dropout).warning is None


def test_from_hf_config_warns_once_and_read_hf_config_never() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        zoo.read_hf_config(CONFIGS / "mistral-7b-v0.1.json", seq=8192)
        assert caught == []
        zoo.from_hf_config(CONFIGS / "mistral-7b-v0.1.json", seq=8192, layers=1)
    assert [w.category for w in caught] == [zoo.UnmodelledFieldsWarning]
    assert "sliding_window=4096" in str(caught[0].message)


# ---- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("model_type", "text"), [
    ("Llama", "did you mean llama"), ("t5", "not supported"),
])
def test_unknown_model_type_lists_the_supported_ones(model_type: str, text: str) -> None:
    with pytest.raises(zoo.UnknownModelTypeError) as caught:
        zoo.read_hf_config(tiny_llama(model_type=model_type))
    message = str(caught.value)
    assert text in message and "gpt2, llama, mistral, mixtral, qwen2, qwen2_moe" in message
    assert ("did you mean" in message) is (model_type == "Llama")
    assert caught.value.field == "model_type" and isinstance(caught.value, GraphError)


BAD_FIELDS = {
    "missing-hidden": ({"hidden_size": None}, "hidden_size", "missing"),
    "string-size": ({"intermediate_size": "96"}, "intermediate_size", '"96" (a string)'),
    "float-layers": ({"num_hidden_layers": 2.0}, "num_hidden_layers", "positive integer"),
    "bool-heads": ({"num_attention_heads": True}, "num_attention_heads", "a boolean"),
    "zero-vocab": ({"vocab_size": 0}, "vocab_size", "positive integer"),
    "tie-as-text": ({"tie_word_embeddings": "yes"}, "tie_word_embeddings", "true or false"),
    "kv-not-dividing": ({"num_key_value_heads": 3}, "num_key_value_heads", "does not divide"),
    "heads-not-dividing": ({"num_attention_heads": 5, "num_key_value_heads": 5},
                           "num_attention_heads", "does not divide"),
    "odd-head-dim": ({"head_dim": 15}, "head_dim", "even head dim"),
    "model-type-number": ({"model_type": 3}, "model_type", "must be a string"),
    "no-model-type": ({"model_type": None}, "model_type", "missing"),
}


@pytest.mark.parametrize("case", sorted(BAD_FIELDS), ids=sorted(BAD_FIELDS))
def test_malformed_fields_name_the_file_and_the_field(case: str, tmp_path: Path) -> None:
    changes, field, text = BAD_FIELDS[case]
    config = {k: v for k, v in {**tiny_llama(), **changes}.items()
              if not (v is None and k in changes)}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(config))
    with pytest.raises(zoo.HFConfigError) as caught:
        zoo.from_hf_config(path)
    assert caught.value.field == field and caught.value.file == str(path)
    assert text in str(caught.value)
    assert str(caught.value).startswith(f'{path}: field "{field}"')


@pytest.mark.parametrize(("text", "message"), [
    ('{"model_type": "llama",', "not valid JSON at line 1"),
    ("[1, 2]", "must hold a JSON object"),
    ("\xff\xfe", "cannot read"),
])
def test_a_file_that_is_not_a_config_object_is_one_error(text: str, message: str,
                                                          tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(zoo.HFConfigError) as caught:
        zoo.from_hf_config(path)
    assert caught.value.file == str(path) and caught.value.field is None
    assert message in str(caught.value)
    assert not zoo.is_hf_config(path)


def test_a_missing_file_and_a_graph_file_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(zoo.HFConfigError, match="cannot read the config"):
        zoo.read_hf_config(tmp_path / "nope.json")
    graph_file = tmp_path / "graph.json"
    graphs.dump(zoo.build("mlp", layers=1, hidden=8, ffn=16, batch=2, seq=4), graph_file)
    assert not zoo.is_hf_config(graph_file)
    with pytest.raises(zoo.HFConfigError, match="autoshard graph file"):
        zoo.read_hf_config(graph_file)


# ---- names, directories, determinism --------------------------------------------------------
def test_names_come_from_the_file_its_directory_or_the_hugging_face_cache(tmp_path: Path) -> None:
    plain = tmp_path / "Llama-3.2-1B"
    plain.mkdir()
    shutil.copy(CONFIGS / "llama-3.2-1b.json", plain / "config.json")
    assert zoo.is_hf_config(plain)
    assert zoo.read_hf_config(plain).config.name == "Llama-3.2-1B"
    assert zoo.read_hf_config(plain / "config.json").file == str(plain / "config.json")
    cache = tmp_path / "models--meta-llama--Llama-3.2-1B" / "snapshots" / ("ab" * 20)
    cache.mkdir(parents=True)
    shutil.copy(CONFIGS / "llama-3.2-1b.json", cache / "config.json")
    assert zoo.read_hf_config(cache / "config.json").config.name == "Llama-3.2-1B"
    assert zoo.read_hf_config(tiny_llama()).config.name == "llama"
    assert zoo.read_hf_config(tiny_llama(), name="mine").config.name == "mine"


def test_same_config_gives_byte_identical_graph_json() -> None:
    first = graphs.dumps(build("qwen2.5-7b.json", layers=3, **SMALL))
    again = graphs.dumps(build("qwen2.5-7b.json", layers=3, **SMALL))
    as_dict = json.loads((CONFIGS / "qwen2.5-7b.json").read_text())
    from_dict = graphs.dumps(zoo.from_hf_config(as_dict, name="qwen2.5-7b", layers=3, **SMALL))
    assert first == again == from_dict
    assert graphs.loads(first) == build("qwen2.5-7b.json", layers=3, **SMALL)


def test_file_dtype_sets_the_default() -> None:
    assert zoo.read_hf_config(tiny_llama(torch_dtype="float32")).config.dtype is DType.F32
    assert zoo.read_hf_config(tiny_llama(dtype="float16")).config.dtype is DType.F16
    assert zoo.read_hf_config(tiny_llama(torch_dtype="float32"), dtype="bf16").config.dtype \
        is DType.BF16


def test_a_file_dtype_that_is_not_a_float_is_planned_in_bf16_and_said() -> None:
    with pytest.warns(zoo.UnmodelledFieldsWarning, match='torch_dtype "int8"'):
        assert zoo.read_hf_config(tiny_llama(torch_dtype="int8")).config.dtype is DType.BF16
    with warnings.catch_warnings():
        warnings.simplefilter("error", zoo.UnmodelledFieldsWarning)  # --dtype chose: no word
        assert zoo.read_hf_config(tiny_llama(torch_dtype="int8"), dtype="f32").config.dtype \
            is DType.F32


@settings(max_examples=25, deadline=None)
@given(model_type=st.sampled_from(["llama", "mistral", "qwen2", "gpt2"]),
       layers=st.integers(1, 3), head_dim=st.sampled_from([2, 4, 8]),
       kv_heads=st.sampled_from([1, 2]), groups=st.integers(1, 3), ffn=st.integers(1, 40),
       vocab=st.integers(2, 60), tied=st.booleans())
def test_any_valid_config_builds_a_graph_whose_count_is_the_closed_form(
        model_type: str, layers: int, head_dim: int, kv_heads: int, groups: int, ffn: int,
        vocab: int, tied: bool) -> None:
    heads = kv_heads * groups
    hidden = heads * head_dim
    if model_type == "gpt2":
        config = {"model_type": "gpt2", "n_embd": hidden, "n_layer": layers, "n_head": heads,
                  "n_inner": ffn, "n_positions": 8, "vocab_size": vocab,
                  "tie_word_embeddings": tied}
        qkv_bias, out_bias, norms, positions = 2 * hidden + hidden, hidden + ffn + hidden, 4, 8
        kv_heads, gated = heads, 2
    else:
        config = tiny_llama(model_type=model_type, hidden_size=hidden, num_hidden_layers=layers,
                            num_attention_heads=heads, num_key_value_heads=kv_heads,
                            intermediate_size=ffn, vocab_size=vocab, tie_word_embeddings=tied)
        qkv_bias = hidden + 2 * kv_heads * head_dim if model_type == "qwen2" else 0
        out_bias, norms, positions, gated = 0, 2, 0, 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zoo.UnmodelledFieldsWarning)  # GPT-2's dropout
        graph = zoo.from_hf_config(config, batch=2, seq=4)
    graph.validate()
    kv = kv_heads * head_dim
    per_layer = 2 * hidden * hidden + 2 * hidden * kv + gated * hidden * ffn + qkv_bias \
        + out_bias + norms * hidden
    final_norm = norms // 2 * hidden
    expected = layers * per_layer + (1 if tied else 2) * vocab * hidden + final_norm \
        + positions * hidden
    assert graph_params(graph) == zoo.read_hf_config(config).param_count() == expected
