"""Every zoo model's plans, executed on emulated 1-D, 2-D and 3-D meshes, match the unsharded
model; so do training steps (backward and optimizer, next-step reshards included).

The truth is the unsharded NumPy run of the same graph on the same random inputs (inside
:func:`autoshard.verify.emulator.emulate`); the mutation tests (tests/test_emulate_mutations.py)
show the same comparison fails on wrong plans. Plans are forced to shard by a memory limit below
the unconstrained plan's peak, so they contain tensor/sequence parallelism and reshards, not
only replication.
"""

from __future__ import annotations

import json

import pytest

import autoshard
from autoshard.errors import MemoryTooSmallError
from autoshard.planning.record import Plan
from autoshard.verify.emulator import emulate
from autoshard.verify.verification import verify
from graphs import zoo

SMALL = {"layers": 1, "batch": 4, "seq": 8, "dtype": "f32"}


def small_overrides(name: str) -> dict:
    """Small dims keeping each model's kind (MLP, MHA or GQA, learned or rotary positions)."""
    config = zoo.config(name)
    if config.family is zoo.Family.MLP:
        return {**SMALL, "hidden": 16, "ffn": 32}
    out = {**SMALL, "hidden": 32, "heads": 4, "ffn": 64}
    if config.kv_heads < config.heads:
        out["kv_heads"] = 2
    if config.vocab is not None:
        out["vocab"] = 64
    return out


_PLANS: dict[str, Plan] = {}


def sharded_plan(graph, mesh, **options) -> Plan:
    """A plan under a memory limit tight enough that parameters and activations are sharded
    (the tightest of the limits tried that the planner can meet). Zoo models that are the
    same graph at these small dims (GPT-2 sizes, Llama GQA models) share one plan."""
    document = {**graph.to_dict(), "name": ""}
    key = json.dumps([document, str(mesh), options], sort_keys=True, default=str)
    if key not in _PLANS:
        _PLANS[key] = _plan(graph, mesh, **options)
    return _PLANS[key]


def _plan(graph, mesh, **options) -> Plan:
    free = autoshard.plan(graph, mesh, **options)
    for fraction in (0.35, 0.5, 0.7):
        try:
            return autoshard.plan(graph, mesh, memory_limit=fraction * free.peak_bytes_per_device,
                                  time_limit=3, **options)
        except MemoryTooSmallError:
            continue
    return free


def _assert_passed(result) -> None:
    assert result.passed, result.summary()
    assert result.divergence is None
    assert result.max_rel_err <= 1e-5


@pytest.mark.parametrize("mesh_text", ["tp=4", "dp=2,tp=2"], ids=["1d", "2d"])
@pytest.mark.parametrize("name", zoo.names())
def test_zoo_inference_plans_match_the_unsharded_model(name: str, mesh_text: str) -> None:
    graph = zoo.build(name, **small_overrides(name))
    plan = sharded_plan(graph, autoshard.Mesh.parse(mesh_text))
    assert any(rec.strategy != "R" for rec in plan.ops.values())
    result = emulate(plan, graph, seed=1)
    _assert_passed(result)
    assert result.ops_run == sum(op.kind not in ("input", "param") for op in graph.ops)
    assert result.reshards_run == len(plan.reshards)
    assert result.collectives_run == sum(len(r.collectives) for r in plan.reshards)
    assert {o.tensor for o in result.outputs} == set(graph.outputs)


@pytest.mark.parametrize("name", ["gpt2", "llama3-8b"])
def test_zoo_plans_on_a_3d_mesh(name: str) -> None:
    """2×2×2 with fast links and a short solver time limit: the (possibly unproven) plan
    mixes every collective kind; it must still compute the model."""
    graph = zoo.build(name, **small_overrides(name))
    mesh = autoshard.Mesh.parse("a=2,b=2,c=2")
    links = dict.fromkeys(mesh.axis_names, "alpha:1ns,bw:100TB/s")
    plan = autoshard.plan(graph, mesh, links=links, time_limit=2)
    result = emulate(plan, graph, seed=2)
    _assert_passed(result)
    assert result.devices == 8


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize(("name", "mesh_text"), [("mlp", "tp=4"), ("mlp", "dp=2,tp=2"),
                                                 ("gpt2", "tp=4"), ("llama3-8b", "tp=4")])
def test_training_steps_update_parameters_like_the_unsharded_step(name: str, mesh_text: str,
                                                                  optimizer: str) -> None:
    graph = zoo.build(name, **small_overrides(name))
    plan = sharded_plan(graph, autoshard.Mesh.parse(mesh_text), training=True,
                        optimizer=optimizer)
    verification = verify(plan, graph, seed=3)
    assert verification.passed, verification.message
    updated = {o.tensor for o in verification.result.outputs}
    params = [t.name for t in graph.tensors.values() if t.role.value == "param"]
    assert {f"{p}.next" for p in params} <= updated


def test_plan_file_round_trip_emulates_the_same(tmp_path) -> None:
    graph = zoo.build("gpt2", **small_overrides("gpt2"))
    plan = sharded_plan(graph, autoshard.Mesh.parse("dp=2,tp=2"))
    plan.save(tmp_path)
    loaded = Plan.load(tmp_path / "plan.json")
    first, again = emulate(plan, graph, seed=4), emulate(loaded, graph, seed=4)
    _assert_passed(again)
    assert (first.max_abs_err, first.collectives_run) == (again.max_abs_err,
                                                         again.collectives_run)
