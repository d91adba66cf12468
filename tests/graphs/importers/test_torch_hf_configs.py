"""Every aten op the torch importer meets on Hugging Face GPT-2, Llama, Mistral and Qwen2 is
mapped: the five real ``config.json`` files of tests/data/hf-configs, built by ``transformers``
(random init, no download) with their architecture fields as published and only the sizes
shrunk, imported with and without ``labels``.

The ``aten.pad`` that shifts the labels when a model is called with ``labels`` is a
``constant_pad`` (its values are checked against torch in test_torch.py). The oracle for the
exact (erf) GELU, which GPT-2 configs select with ``activation_function="gelu"``, is torch's
own forward pass (the logits).
"""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch

from graphs.importers import from_torch, unmapped_ops
from tests.support import DATA_DIR
from tests.support.torch_checks import assert_close, run_imported

os.environ["HF_HUB_OFFLINE"] = "1"
import transformers  # imported after HF_HUB_OFFLINE is set: never reach the Hub

transformers.logging.set_verbosity_error()

pytestmark = pytest.mark.torch
VOCAB, BATCH, SEQ = 128, 2, 16
SMALL = {
    "gpt2": {"n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 32},
    "llama": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "max_position_embeddings": 32},
}
SMALL["mistral"] = SMALL["qwen2"] = {k: v for k, v in SMALL["llama"].items() if k != "head_dim"}
# Mixtral's routing (top-k, data-dependent gather/scatter) does not trace to a static graph;
# MoE models come from their config.json (tests/graphs/zoo), not from the torch importer
MOE_TYPES = {"mixtral"}
ALL_CONFIGS = sorted(p.name for p in (DATA_DIR / "hf-configs").glob("*.json"))
CONFIGS = [n for n in ALL_CONFIGS
           if json.loads((DATA_DIR / "hf-configs" / n).read_text())["model_type"] in SMALL]


def _model(name: str, **changes: object) -> torch.nn.Module:
    data = json.loads((DATA_DIR / "hf-configs" / name).read_text())
    data.update(SMALL[data["model_type"]], vocab_size=VOCAB, **changes)
    data = {k: v for k, v in data.items() if k not in ("architectures", "torch_dtype")}
    config = transformers.AutoConfig.for_model(**data)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _inputs(labels: bool) -> dict:
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    return {"input_ids": ids, "use_cache": False, **({"labels": ids.clone()} if labels else {})}


def test_the_configs_are_the_four_dense_families_and_moe() -> None:
    types = {json.loads((DATA_DIR / "hf-configs" / n).read_text())["model_type"]
             for n in CONFIGS}
    assert types == {"gpt2", "llama", "mistral", "qwen2"}
    assert len(CONFIGS) == 5  # every dense config is imported; only MoE ones are left out
    left_out = {json.loads((DATA_DIR / "hf-configs" / n).read_text())["model_type"]
                for n in set(ALL_CONFIGS) - set(CONFIGS)}
    assert left_out <= MOE_TYPES


@pytest.mark.parametrize("labels", [False, True], ids=["logits", "labels"])
@pytest.mark.parametrize("name", CONFIGS)
def test_no_aten_op_is_left_unmapped(name: str, labels: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = from_torch(_model(name), _inputs(labels), name=name)
    assert unmapped_ops(graph) == {}
    assert any(op.kind == "constant_pad" for op in graph.ops) == labels


def test_exact_gelu_is_mapped_and_computes_torchs_logits() -> None:
    model = _model("gpt2.json", activation_function="gelu")
    inputs = _inputs(labels=False)
    values, imported = run_imported(model, inputs, "gpt2-gelu")
    kinds = {op.kind for op in imported.graph.ops}
    assert "gelu_erf" in kinds and "gelu" not in kinds and not unmapped_ops(imported.graph)
    with torch.no_grad():
        want = model(**inputs).logits
    (out,) = imported.graph.outputs
    assert_close(values[out], want, rtol=1e-4, atol=1e-5)
