"""The torch importer on plain torch modules: parameters, FLOPs and values against torch's own,
opaque ops for what it cannot map, names, determinism, and plans over the result."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import autoshard
from graphs import dumps
from graphs.importers import UnmappedOpsError, UnmappedOpsWarning, from_torch, unmapped_ops
from tests.support.torch_checks import (
    MATMUL_KINDS,
    assert_close,
    graph_flops,
    graph_param_elements,
    run_imported,
    torch_flops,
)

pytestmark = pytest.mark.torch


class Attention(nn.Module):
    """Hand-written causal grouped-query attention block with RMSNorm and a SwiGLU MLP."""

    def __init__(self, width: int = 32, heads: int = 4, kv_heads: int = 2) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.norm = nn.RMSNorm(width, eps=1e-6)
        self.q = nn.Linear(width, width, bias=False)
        self.kv = nn.Linear(width, 2 * kv_heads * self.head_dim, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.gate = nn.Linear(width, 2 * width, bias=False)
        self.up = nn.Linear(width, 2 * width, bias=False)
        self.down = nn.Linear(2 * width, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm(x)
        q = self.q(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, s, 2 * self.kv_heads, self.head_dim).transpose(1, 2).chunk(2, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.down(F.silu(self.gate(x)) * self.up(x))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(16, 32), nn.Linear(32, 16)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.tanh(self.layers[0](x)) * 0.5 - 1.0
        y = torch.softmax(self.layers[1](y.pow(2)), dim=-1)
        return torch.log_softmax(y, dim=-1).sum(dim=0).mean() / 3.0


class Padded(nn.Module):
    """Constant padding as ``F.pad`` spells it (the last dim's widths first) and as Hugging
    Face's causal-LM loss shifts its labels (one value after the last position)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.pad(self.proj(x), (1, 2, 0, 3), value=-1.5)   # dims -1 and -2
        return F.pad(y, (0, 1)) * 2.0                       # zeros, the default


def _encoder() -> nn.Module:
    return nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                      batch_first=True)


CASES = {
    "mlp": (MLP, lambda: (torch.randn(4, 16),)),
    "attention-gqa": (Attention, lambda: (torch.randn(2, 8, 32),)),
    "encoder-layer": (_encoder, lambda: (torch.randn(2, 8, 32),)),
    "padded": (Padded, lambda: (torch.randn(2, 4, 6),)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    torch.manual_seed(0)
    make, inputs = CASES[request.param]
    model = make().eval()
    example = inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnmappedOpsWarning)   # every op maps
        values, imported = run_imported(model, example, request.param)
    return model, example, values, imported


def test_parameters_are_the_modules_own(case) -> None:
    model, _, _, imported = case
    graph = imported.graph
    params = {n for n, t in graph.tensors.items() if graph.producer(n).kind == "param"}
    assert params == {n for n, _ in model.named_parameters()}
    assert graph_param_elements(graph) == sum(p.numel() for p in model.parameters())


def test_matmul_flops_equal_torch_flop_counter(case) -> None:
    model, example, _, imported = case
    assert graph_flops(imported.graph, MATMUL_KINDS) == torch_flops(model, example, {})


def test_values_equal_the_torch_forward(case) -> None:
    model, example, values, imported = case
    with torch.no_grad():
        want = model(*example)
    (out,) = imported.graph.outputs
    assert_close(values[out], want, rtol=1e-5, atol=1e-5)


def test_gqa_and_causality_are_recognised() -> None:
    graph = from_torch(Attention().eval(), (torch.randn(2, 8, 32),))
    (attn,) = [op for op in graph.ops if op.kind == "attention"]
    assert attn.name == "/attention" or attn.name.endswith("attention")
    assert attn.attrs["causal"] is True
    q, k, _ = (graph.tensors[t].shape for t in attn.inputs)
    assert (q[2], k[2]) == (4, 2)


def test_ops_are_named_after_their_modules() -> None:
    with torch.device("meta"):
        model = MLP()
    graph = from_torch(model, (torch.empty(4, 16, device="meta"),))
    names = [op.name for op in graph.ops]
    assert "layers.0/linear" in names and "layers.1/linear.bias" in names
    assert len(set(names)) == len(names)


def test_same_module_same_bytes() -> None:
    with torch.device("meta"):
        model = Attention()
    x = torch.empty(2, 8, 32, device="meta")
    assert dumps(from_torch(model, (x,))) == dumps(from_torch(model, (x,)))


class Cumulative(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.cumsum(x, dim=1)) + torch.cumsum(x, dim=0).sort(dim=1).values


def test_unmapped_ops_import_as_opaque_with_a_warning() -> None:
    with pytest.warns(UnmappedOpsWarning, match=r"aten\.cumsum\.default x2.*aten\.sort"):
        graph = from_torch(Cumulative(), (torch.randn(4, 8),))
    assert unmapped_ops(graph) == {"aten.cumsum.default": 2, "aten.sort.default": 1}
    plan = autoshard.plan(graph, autoshard.Mesh.parse("tp=2"))
    for op in graph.ops:
        if op.kind == "opaque":
            assert all(p == "R" for p in plan.tensors[op.outputs[0]].placements)


def test_strict_names_every_unmapped_op_with_its_count() -> None:
    with pytest.raises(UnmappedOpsError, match=r"aten\.cumsum\.default x2, aten\.sort\.default x1"):
        from_torch(Cumulative(), (torch.randn(4, 8),), strict=True)


@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_imported_block_plans_and_every_parameter_is_placed(training: bool) -> None:
    with torch.device("meta"):
        model = Attention()
    graph = from_torch(model, (torch.empty(4, 8, 32, device="meta"),))
    if training:   # a scalar loss for the training step: mean of the block's output
        graph = _with_mean_loss(graph)
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=2,tp=2"), training=training)
    for name, _ in model.named_parameters():
        assert len(plan.tensors[name].placements) == 2
    assert np.isfinite(plan.objective.total_s)


def _with_mean_loss(graph):
    from graphs.io import graph_from_dict

    document = graph.to_dict()
    (out,) = document["outputs"]
    document["tensors"][out]["role"] = "activation"
    document["tensors"]["loss"] = {"shape": [], "dtype": "f32", "role": "output"}
    rank = len(document["tensors"][out]["shape"])
    document["ops"].append({"name": "loss", "kind": "mean", "inputs": [out], "outputs": ["loss"],
                            "attrs": {"dims": list(range(rank))}})
    document["outputs"] = ["loss"]
    return graph_from_dict(document)
