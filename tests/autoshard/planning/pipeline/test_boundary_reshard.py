"""A stage boundary pays the reshards of a layer boundary, besides the point-to-point send.

Closed form: with the residual stream pinned sequence-sharded over ``tp`` (``S(1)``, batch
over ``dp``) and every layer's first norm pinned to write it replicated over ``tp``, the
activation arriving at the next layer (the next stage's first op) is all-gathered over ``tp``
once per micro-batch: ``collective_seconds(all_gather, (b / dp)·s·h·2 bytes, tp)`` by the
collective model (the buffer each device ends with). The residual add reads it as it comes.
"""

from __future__ import annotations

import pytest

from autoshard.planning.pins import parse_pins
from autoshard.planning.pipeline.pipelined import PipelineOptions, plan_pipeline
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.sharding.mesh import Mesh
from costmodel import CollectiveKind, collective_seconds
from graphs import zoo

SHAPE = {"seq": 64, "hidden": 128, "ffn": 256, "heads": 8, "batch": 4}


def build(layers: int):
    return zoo.build("llama3-8b", **{**SHAPE, "layers": layers})


def test_a_sequence_sharded_boundary_read_replicated_is_one_all_gather() -> None:
    pins = parse_pins({"pin": [
        {"tensors": ["layers.*.ffn_residual.out", "layers.*.attn_residual.out"],
         "placements": {"dp": "S(0)", "tp": "S(1)"}},
        {"tensors": "layers.*.attn_norm.out", "placements": {"dp": "S(0)", "tp": "R"}},
    ]}, "test")
    piped = plan_pipeline(build(8), Mesh.parse("dp=2,pp=2,tp=2"), stage_graph=build,
                          micro_batches=4, pins=pins,
                          pipeline=PipelineOptions(schedule="1f1b", stages=(4, 4)))
    record = piped.pipeline
    b, s, h = SHAPE["batch"], SHAPE["seq"], SHAPE["hidden"]
    tp = MeshLinks.build(Mesh.parse("dp=2,tp=2"), resolve_topology("dgx-h100")).group(("tp",))
    gather = float(collective_seconds(CollectiveKind.ALL_GATHER, b // 2 * s * h * 2, tp))
    assert gather > 0
    assert record["boundary_reshard"]["forward_s"] == pytest.approx(gather, rel=1e-9)
    # the receiving stage pays the forward part, per micro-batch; stage 0 only sends
    first, second = record["stage"]
    assert second["boundary_reshard_s"] == pytest.approx(
        record["boundary_reshard"]["receiver_s"], rel=1e-12)
    assert first["boundary_reshard_s"] == pytest.approx(
        record["boundary_reshard"]["sender_s"], rel=1e-12)
    assert record["boundary_reshard"]["receiver_s"] >= gather
