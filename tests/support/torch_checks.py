"""Independent oracles for the torch importer tests: torch's own parameter and FLOP counts and
torch's own forward pass, compared with what the imported graph says and computes."""

from __future__ import annotations

import numpy as np
import torch

from graphs import OpGraph, get_op
from graphs.autodiff_eval import evaluate
from graphs.importers.torch_export import constant_feeds, import_torch

MATMUL_KINDS = ("einsum", "attention")


def graph_param_elements(graph: OpGraph) -> int:
    return sum(t.numel for t in graph.tensors.values() if graph.producer(t.name).kind == "param")


def graph_flops(graph: OpGraph, kinds: tuple[str, ...] | None = None) -> float:
    total = 0.0
    for op in graph.ops:
        if kinds is None or op.kind in kinds:
            ins, outs = graph.specs(op)
            total += get_op(op.kind).flops(ins, outs, graph.attrs(op))
    return total


def torch_flops(model: torch.nn.Module, args: tuple, kwargs: dict) -> int:
    """FlopCounterMode's count of one forward: matmuls, convolutions and attention only.

    Attention runs on torch's math backend: the CPU flash kernel is not in the counter's
    table (it would count 0), the math backend's two batched matmuls are."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with (sdpa_kernel(SDPBackend.MATH),
          torch.utils.flop_counter.FlopCounterMode(display=False) as counter):
        model(*args, **kwargs)
    return counter.get_total_flops()


def run_imported(real: torch.nn.Module, example, name: str) -> tuple[dict, object]:
    """Import ``real`` (a non-meta module) and evaluate the graph in NumPy on its weights and
    the example inputs; returns (tensor values, the import)."""
    imported = import_torch(real, example, name=name)
    graph = imported.graph
    feeds = {n: p.detach().numpy() for n, p in real.named_parameters()}
    args, kwargs = (example, {}) if isinstance(example, tuple) else ((), example)
    placeholders = [s.arg.name for s in imported.program.graph_signature.input_specs
                    if s.kind.name == "USER_INPUT"]
    leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    for name_, value in zip(placeholders, leaves, strict=True):
        if name_ in graph.tensors:
            feeds[name_] = value.detach().numpy()
    feeds.update(constant_feeds(imported, real, example))
    return evaluate(graph, feeds), imported


def assert_close(got: np.ndarray, want: torch.Tensor, rtol: float, atol: float) -> None:
    np.testing.assert_allclose(got, want.detach().numpy(), rtol=rtol, atol=atol)
