"""The torch importer on Hugging Face GPT-2 and Llama (GQA) built from their configs (random
init, no download): parameters, FLOPs and logits against torch's own, and plans over them."""

from __future__ import annotations

import os

import pytest
import torch

import autoshard
from graphs.importers import from_torch, unmapped_ops
from tests.support.torch_checks import (
    MATMUL_KINDS,
    assert_close,
    graph_flops,
    graph_param_elements,
    run_imported,
    torch_flops,
)

os.environ["HF_HUB_OFFLINE"] = "1"
import transformers  # imported after HF_HUB_OFFLINE is set: never reach the Hub

transformers.logging.set_verbosity_error()

pytestmark = pytest.mark.torch
BATCH, SEQ, VOCAB = 2, 16, 128


def _gpt2() -> torch.nn.Module:
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                     n_positions=32, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def _llama(layers: int = 2) -> torch.nn.Module:
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=layers, num_attention_heads=4,
                                      num_key_value_heads=2, vocab_size=VOCAB,
                                      max_position_embeddings=32, bos_token_id=0,
                                      eos_token_id=0)
    return transformers.LlamaForCausalLM(config)


MODELS = {"gpt2": _gpt2, "llama-gqa": _llama}


def _ids(seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module", params=sorted(MODELS))
def imported(request):
    torch.manual_seed(0)
    model = MODELS[request.param]().eval()
    inputs = {"input_ids": _ids(1), "use_cache": False}
    values, result = run_imported(model, inputs, request.param)
    return request.param, model, inputs, values, result


def test_parameter_count_is_the_models_unique_parameters(imported) -> None:
    _, model, _, _, result = imported
    graph = result.graph
    params = {n for n, t in graph.tensors.items() if graph.producer(n).kind == "param"}
    assert params == {n for n, _ in model.named_parameters()}      # tied lm_head counted once
    assert graph_param_elements(graph) == sum(p.numel() for p in model.parameters())


def test_matmul_flops_equal_torch_flop_counter(imported) -> None:
    _, model, inputs, _, result = imported
    assert graph_flops(result.graph, MATMUL_KINDS) == torch_flops(model, (), inputs)


def test_logits_equal_the_torch_forward(imported) -> None:
    _, model, inputs, values, result = imported
    with torch.no_grad():
        want = model(**inputs).logits
    (out,) = result.graph.outputs
    assert_close(values[out], want, rtol=1e-4, atol=1e-5)


def test_attention_is_the_fused_kind_with_gqa_and_causal_mask(imported) -> None:
    name, _, _, _, result = imported
    attention = [op for op in result.graph.ops if op.kind == "attention"]
    assert len(attention) == 2 and all(op.attrs["causal"] for op in attention)
    k_heads = result.graph.tensors[attention[0].inputs[1]].shape[2]
    assert k_heads == (2 if name == "llama-gqa" else 4)
    assert unmapped_ops(result.graph) == {}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_plans_place_every_named_parameter(name: str, training: bool) -> None:
    with torch.device("meta"):
        model = MODELS[name]()
    inputs = {"input_ids": _ids(1).to("meta"), "labels": _ids(2).to("meta"), "use_cache": False}
    graph = from_torch(model, inputs, name=name, strict=True)   # HF's label shift maps too
    assert len(graph.outputs) == 1 and graph.tensors[graph.outputs[0]].shape == ()
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=2,tp=2"), training=training)
    for param, _ in model.named_parameters():
        assert len(plan.tensors[param].placements) == 2
        if training:      # AdamW moments of every parameter: the backward reached it
            assert f"opt/{param}.m" in plan.tensors


def test_imported_layers_are_planned_once_and_proven_for_the_whole_model() -> None:
    """Module-path op names (``model.layers.3/add``) let the planner find the 6 identical
    layers; the periodic plan costs the same as the whole-graph optimum."""
    from autoshard.planning import planner
    with torch.device("meta"):
        model = _llama(layers=6)
    inputs = {"input_ids": _ids(1).to("meta"), "labels": _ids(2).to("meta"), "use_cache": False}
    graph = from_torch(model, inputs, name="llama6", strict=True)
    mesh = autoshard.Mesh.parse("dp=2,tp=2")
    # Without overlap the per-layer problem is a plain sum, which the periodic
    # decomposition proves exactly; overlap's exactness is tested in test_periodic.
    fast = autoshard.plan(graph, mesh, training=True, overlap="none")
    assert fast.stats["layers"] == 6 and fast.stats["solver"] == "periodic"
    assert fast.objective.optimal
    original = planner.repeated_blocks
    planner.repeated_blocks = lambda names, keys: None
    try:
        whole = autoshard.plan(graph, mesh, training=True, overlap="none")
    finally:
        planner.repeated_blocks = original
    assert whole.stats["solver"] != "periodic"
    assert fast.objective.total_s == pytest.approx(whole.objective.total_s, rel=1e-9)
