"""Expert- and context-parallel plans run on the emulated mesh and match the unsharded model.

The oracle is the unsharded NumPy run of the same graph on the same random inputs (exact top-k
routing and capacity drops on those inputs; the full causal attention), compared after every
op and reshard by :func:`autoshard.verify.emulator.emulate`.
"""

from __future__ import annotations

import autoshard
from autoshard.verify.verification import verify
from graphs import zoo


def _attention_not_ring(op, strategy) -> bool:
    return op.kind.startswith("attention") and "s*" not in strategy.per_axis


def test_ring_attention_plan_matches_unsharded_at_its_own_sizes(monkeypatch) -> None:
    """Ring attention forced on every attention (blocks of 8 tokens on 4 devices, causal,
    grouped-query heads), run at the graph's own sizes: the blockwise forward and backward.
    (The planner offers rings from 2,048-token blocks; lowered here to plan tiny ones.)"""
    monkeypatch.setattr("autoshard.planning.node_costs.MIN_RING_BLOCK", 1)
    graph = zoo.build("llama3.1-8b", layers=1, batch=2, seq=32, hidden=64, heads=4,
                      kv_heads=2, ffn=96, vocab=64)
    plan = autoshard.plan(graph, autoshard.Mesh.parse("cp=4"), training=True,
                          exclude=_attention_not_ring)
    assert plan.ops["layers.0.attn.core"].strategy.endswith("cp:s*")
    assert plan.ops["bwd/layers.0.attn.core"].strategy.endswith("cp:s*")
    result = verify(plan, graph, scale=False)
    assert result.passed, result.message


def test_search_picks_ring_attention_for_a_long_sequence_and_it_verifies() -> None:
    graph = zoo.build("llama3.1-8b", layers=1, seq=65536, batch=1)
    plan = autoshard.plan(graph, autoshard.Mesh.parse("cp=4"), training=True)
    assert plan.ops["layers.0.attn.core"].strategy == "cp:s*"
    steps = plan.ops["layers.0.attn.core"].intra_op
    assert [c.kind for c in steps] == ["collective_permute"] * 3
    result = verify(plan, graph)
    assert result.passed, result.message


def test_expert_parallel_plan_with_all_to_all_matches_unsharded() -> None:
    graph = zoo.build("mixtral-8x7b", layers=1, seq=1024)
    plan = autoshard.plan(graph, autoshard.Mesh.parse("ep=8"), training=True)
    kinds = {c.kind for r in plan.reshards if r.tensor == "layers.0.moe.dispatch.out"
             for c in r.collectives}
    assert kinds == {"all_to_all"}
    result = verify(plan, graph)
    assert result.passed, result.message
    assert "experts" not in result.scaled_dims          # 8 experts on 8 devices stay 8
    assert result.scaled_dims["expert_ffn"] == (14336, 8)
