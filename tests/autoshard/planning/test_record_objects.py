"""A plan's tensor records hand the frameworks their own objects: ``jax_partition_spec()`` goes
straight into ``NamedSharding`` and ``dtensor_placements()`` into ``distribute_tensor``.

Independent truths: JAX's own HloSharding of the ``NamedSharding`` it builds from the record's
spec (against the HloSharding exporter, which is checked against XLA in test_hlo.py), and the
DTensor exporter's placements (checked against torch's classes in test_dtensor.py) for the
sharding read back from ``plan.json``. ``plan.json`` itself is unchanged by the methods.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import autoshard
from autoshard.errors import PlacementError
from autoshard.export import plan_shardings, to_dtensor, to_hlo_sharding
from autoshard.planning.record import Plan, TensorRecord
from graphs import zoo


def _hand_plan() -> Plan:
    """Four tensors on dp=2,tp=2: an axis order against mesh order (tp major), a pending sum,
    a pending max, and a replicated one."""
    tensor = {"dtype": "f32", "role": "activation", "sdy": None}
    data = {"format": "autoshard.plan/v1", "model": "m", "fingerprint": "f",
            "mesh": {"axes": [{"name": "dp", "size": 2}, {"name": "tp", "size": 2}]},
            "topology": {"name": "dgx-h100", "links": []},
            "objective": {"total_s": 0, "compute_s": 0, "comm_s": 0, "lower_bound_s": 0,
                          "optimal": True, "gap": 0, "status": "optimal", "solve_s": 0},
            "memory": {"peak_bytes_per_device": 0, "limit_bytes": None},
            "tensors": {
                "ordered": {**tensor, "shape": [8, 4], "placements": ["S(0)", "S(0)"],
                            "partition_spec": [["tp", "dp"], None]},
                "summed": {**tensor, "shape": [8, 4], "placements": ["P(sum)", "S(1)"],
                           "partition_spec": None},
                "maxed": {**tensor, "shape": [8], "placements": ["R", "P(max)"],
                          "partition_spec": None},
                "whole": {**tensor, "shape": [8], "placements": ["R", "R"],
                          "partition_spec": [None]}},
            "ops": {}, "reshards": []}
    return Plan.from_dict(data)


@pytest.mark.jax
def test_jax_partition_spec_goes_into_named_sharding() -> None:
    from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

    plan = _hand_plan()
    mesh = AbstractMesh((2, 2), ("dp", "tp"))
    view = plan_shardings(plan)
    ordered = plan.tensors["ordered"].jax_partition_spec()
    assert ordered == PartitionSpec(("tp", "dp"), None)
    for name in ("ordered", "whole"):
        sharding = NamedSharding(mesh, plan.tensors[name].jax_partition_spec())
        ndim = len(plan.tensors[name].shape)
        assert str(sharding._to_xla_hlo_sharding(ndim)) == to_hlo_sharding(view.shardings[name])
    summed = plan.tensors["summed"].jax_partition_spec()
    assert summed == PartitionSpec(None, "tp", unreduced={"dp"})
    with pytest.raises(PlacementError, match=r'Partial\(max\) on mesh axis "tp"'):
        plan.tensors["maxed"].jax_partition_spec()


@pytest.mark.torch
def test_dtensor_placements_are_torch_objects() -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard

    plan = _hand_plan()
    view = plan_shardings(plan)
    for name, record in plan.tensors.items():
        assert record.dtensor_placements() == to_dtensor(view.shardings[name]), name
    assert plan.tensors["summed"].dtensor_placements() == (Partial("sum"), Shard(1))
    assert plan.tensors["whole"].dtensor_placements() == (Replicate(), Replicate())
    assert str(plan.tensors["ordered"].dtensor_placements()[0]) == "_S(0, 2)"


@pytest.mark.jax
def test_every_tensor_of_a_real_plan_has_its_spec(tmp_path: Path) -> None:
    from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec

    graph = zoo.build("gpt2", layers=1, batch=8, seq=32, hidden=64, heads=4, vocab=512)
    planned = autoshard.plan(graph, autoshard.Mesh.parse("dp=2,tp=4"), memory_limit=120e3)
    planned.save(tmp_path)
    text = (tmp_path / "plan.json").read_text()
    plan = Plan.load(tmp_path / "plan.json")
    assert plan.to_json() == text  # the methods add nothing to plan.json
    mesh = AbstractMesh((2, 4), ("dp", "tp"))
    stored = json.loads(text)["tensors"]
    sharded = 0
    for name, record in plan.tensors.items():
        if any(p.startswith("P") for p in record.placements):
            continue
        spec = record.jax_partition_spec()
        entries = stored[name]["partition_spec"]
        assert spec == PartitionSpec(*[tuple(e) if isinstance(e, list) else e
                                       for e in entries]), name
        assert NamedSharding(mesh, spec).spec == spec
        sharded += spec != PartitionSpec(*([None] * len(record.shape)))
    assert sharded > 10


def test_a_record_outside_a_plan_says_so() -> None:
    record = TensorRecord(shape=(4,), dtype="f32", role="param", placements=("R",),
                          partition_spec=(None,), sdy=None)
    with pytest.raises(PlacementError, match="belongs to no plan"):
        record.sharding()
