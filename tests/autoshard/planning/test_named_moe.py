"""The named hand plans on a mixture of experts.

Oracle: data parallelism (Li et al. 2020, PyTorch DDP) all-reduces every parameter's whole
gradient once per step, the experts' too: for Mixtral's packed gate/up weight that is
E·h·2f bf16 elements, counted here from the model's published shapes (8 experts, hidden 4096,
FFN 14336). The load-balancing statistics (per-expert counts, the auxiliary loss) have no batch
dim, so the plans keep them replicated; the search may never be slower than a hand plan.
"""

from __future__ import annotations

import pytest

import autoshard
from graphs import zoo

W13_BYTES = 8 * 4096 * 2 * 14336 * 2


@pytest.fixture(scope="module")
def graph():
    return zoo.build("mixtral-8x7b", layers=1, batch=8, seq=256)


def test_ddp_all_reduces_the_whole_expert_gradient(graph) -> None:
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=8"), training=True, strategy="ddp")
    assert plan.tensors["layers.0.moe.experts.w13"].placements == ("R",)
    (move,) = [r for r in plan.reshards if r.tensor == "grad/layers.0.moe.experts.w13"]
    assert [(c.kind, c.bytes) for c in move.collectives] == [("all_reduce", W13_BYTES)]
    assert plan.tensors["layers.0.moe.aux_counts.out"].placements == ("R",)


@pytest.mark.parametrize(("mesh", "strategies"), [("dp=8", ("ddp", "zero1", "zero2", "fsdp")),
                                                  ("dp=2,tp=4", ("megatron", "megatron-sp"))])
def test_the_search_is_never_slower_than_a_hand_plan(graph, mesh, strategies) -> None:
    mesh = autoshard.Mesh.parse(mesh)
    best = autoshard.plan(graph, mesh, training=True).objective.total_s
    for strategy in strategies:
        hand = autoshard.plan(graph, mesh, training=True, strategy=strategy).objective.total_s
        assert best <= hand * (1 + 1e-9), strategy
