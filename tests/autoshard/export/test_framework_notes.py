"""Exports of expert- and context-parallel plans say which parts need framework-level code.

The truths: the plan itself (its MoE ops' all-to-all reshards and axes, its ring-attention
strategies) and the framework APIs named, which must exist in the installed torch and JAX.
The expert-sharded parameters are placed by the scripts like any other (their DTensor
placements and PartitionSpecs shard dim 0 over the expert axes).
"""

from __future__ import annotations

import importlib

import pytest

import autoshard
from autoshard.export.framework_notes import framework_notes
from autoshard.export.lowering import lower_plan_reshards
from autoshard.export.plan_export import export_plan
from autoshard.export.plan_view import plan_links, plan_shardings
from autoshard.sharding.mesh import Mesh
from graphs import zoo


@pytest.fixture(scope="module")
def moe_plan():
    graph = zoo.build("mixtral-8x7b", layers=1, seq=1024)
    return autoshard.plan(graph, Mesh.parse("ep=8"), training=True)


def _scripts(plan) -> dict[str, str]:
    view = plan_shardings(plan)
    topology, links = plan_links(plan, view.mesh)
    reshards = lower_plan_reshards(plan, view, links, topology.device.hbm_bw_bytes_per_s)
    return {fmt: export_plan(plan, view, reshards, fmt) for fmt in ("dtensor", "jax")}


def test_moe_plan_names_the_dispatch_all_to_all(moe_plan) -> None:
    (note,) = framework_notes(moe_plan)
    assert note.topic == "MoE token dispatch/combine" and note.axes == ("ep",)
    assert "layers.0.moe.dispatch" in note.ops and "layers.0.moe.combine" in note.ops
    scripts = _scripts(moe_plan)
    for fmt, script in scripts.items():
        assert "MoE token dispatch/combine over ep" in script, fmt
    assert "torch.distributed.all_to_all_single" in scripts["dtensor"]
    assert "jax.lax.all_to_all in jax.shard_map" in scripts["jax"]
    assert '"layers.0.moe.experts.w13": ((8, 4096, 28672), torch.bfloat16, (Shard(0),))' \
        in scripts["dtensor"]


def test_ring_attention_plan_names_the_ring() -> None:
    graph = zoo.build("llama3.1-8b", layers=1, seq=65536, batch=1)
    plan = autoshard.plan(graph, Mesh.parse("cp=4"), training=True)
    (note,) = framework_notes(plan)
    assert note.topic == "ring attention" and note.axes == ("cp",)
    assert set(note.ops) == {"layers.0.attn.core", "bwd/layers.0.attn.core"}
    assert "ring attention over cp" in _scripts(plan)["dtensor"]


def test_a_dense_plan_needs_no_notes() -> None:
    plan = autoshard.plan(zoo.build("gpt2", layers=1, seq=64), Mesh.parse("dp=2,tp=2"))
    assert framework_notes(plan) == ()


@pytest.mark.parametrize(("module", "name"), [
    ("torch.distributed", "all_to_all_single"),
    ("torch.distributed.tensor.experimental", "context_parallel"),
    ("jax.lax", "all_to_all"), ("jax.lax", "ppermute"), ("jax", "shard_map"),
])
def test_the_named_apis_exist(module: str, name: str) -> None:
    pytest.importorskip(module.split(".")[0])
    assert hasattr(importlib.import_module(module), name)
