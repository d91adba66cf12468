"""Expert and context parallelism under the step model (micro-batches, overlap).

Oracles, from how gradient accumulation runs (Megatron-Core, torchtitan): each micro-batch runs
the forward and backward once, so the token all-to-alls of expert parallelism (dispatch and
combine) and ring attention's K/V passes run once per micro-batch, at the size of one
micro-batch; the optimizer, and with it the expert weights' update, once per step. The plan's
records say so (``count``), never hide an all-to-all (activation traffic is on the critical
path), and add up to the objective: Σ count·seconds − hidden = total.
"""

from __future__ import annotations

import pytest

import autoshard
from graphs import zoo

MICRO = 4


def _plans() -> dict[int, autoshard.Plan]:
    graph = zoo.build("mixtral-8x7b", layers=1, batch=4, seq=256)
    mesh = autoshard.Mesh.parse("ep=4,tp=2")
    return {m: autoshard.plan(graph, mesh, training=True, micro_batches=m,
                              expert_axes=("ep",)) for m in (1, MICRO)}


@pytest.fixture(scope="module")
def plans() -> dict[int, autoshard.Plan]:
    return _plans()


def _all_to_alls(plan: autoshard.Plan) -> list:
    return [r for r in plan.reshards if "moe" in r.tensor
            and any(c.kind == "all_to_all" for c in r.collectives)]


def test_expert_all_to_alls_run_once_per_micro_batch_and_are_never_hidden(plans) -> None:
    single, many = _all_to_alls(plans[1]), _all_to_alls(plans[MICRO])
    assert many and all(r.count == MICRO and r.overlap == "" for r in many)
    # the same buffer of one micro-batch each time (the plans may move it at different points)
    sizes = {c.bytes for r in single for c in r.collectives if c.kind == "all_to_all"}
    assert {c.bytes for r in many for c in r.collectives if c.kind == "all_to_all"} == sizes


def test_expert_weights_update_once_per_step(plans) -> None:
    plan = plans[MICRO]
    updates = [r for name, r in plan.ops.items()
               if name.startswith("opt/") and ".moe.experts." in name and r.compute_s > 0]
    assert updates and all(r.count == 1 for r in updates)
    experts = [r for name, r in plan.ops.items()
               if name.startswith(("layers.0.moe.experts.gate_up", "bwd/layers.0.moe.experts."))]
    assert experts and all(r.count == MICRO for r in experts)


def test_records_add_up_to_the_objective(plans) -> None:
    for plan in plans.values():
        ops = sum(r.count * (r.compute_s + r.comm_s) for r in plan.ops.values())
        moves = sum(r.count * c.seconds for r in plan.reshards for c in r.collectives)
        assert ops + moves - plan.objective.hidden_s - plan.objective.concurrent_s == \
            pytest.approx(plan.objective.total_s, rel=1e-9)


def test_ring_attention_passes_run_once_per_micro_batch() -> None:
    graph = zoo.build("llama3.1-8b", layers=1, batch=1, seq=4096)
    mesh = autoshard.Mesh.parse("cp=2")
    ring = lambda op, s: op.kind.startswith("attention") and s.label != "cp:s*"  # noqa: E731
    plan = autoshard.plan(graph, mesh, training=True, micro_batches=MICRO, exclude=ring)
    cores = {n: r for n, r in plan.ops.items() if n.endswith("attn.core")}
    assert cores and all(r.strategy == "cp:s*" and r.count == MICRO for r in cores.values())
    passes = [c for r in cores.values() for c in r.intra_op]
    assert passes and all(c.kind == "collective_permute" for c in passes)
