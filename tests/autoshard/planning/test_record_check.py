"""A plan's tensor records against the strategies of the ops that write them
(:mod:`autoshard.planning.record_check`): every plan the planner writes passes, read back from
``plan.json`` too; each kind of hand edit is refused with one message naming the tensor (or
op), what the file says and what the plan's ops give.

The oracle for "what the ops give" is the planner's own record before the edit: the edits
below change one field of one record, so the message must quote the original value as the
implied one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from autoshard.errors import PlanRecordError
from autoshard.planning.planner import plan as make_plan
from autoshard.planning.record import Plan
from autoshard.planning.record_check import check_reshard_endpoints, check_tensor_records
from autoshard.sharding.mesh import Mesh
from autoshard.verify.verification import planned_graph
from graphs import zoo

MLP = {"layers": 2, "hidden": 64, "ffn": 256, "batch": 16, "seq": 8}


@pytest.fixture(scope="module")
def tight() -> tuple[Plan, Any]:
    """The 2-layer MLP on dp=2,tp=2 in 100 KiB: weights sharded on both axes, a Partial
    activation resharded between the layers and a Partial graph output reduced to
    ``S(0) S(0)`` by its ``<output>`` reshard."""
    graph = zoo.build("mlp", **MLP)
    planned = make_plan(graph, Mesh.parse("dp=2,tp=2"), memory_limit=100 * 1024)
    assert planned.tensors["layers.1.mlp.down.out"].placements == ("S(0)", "S(0)")
    assert [r.consumer for r in planned.reshards] == ["layers.1.mlp.up", "<output>"]
    return planned, graph


@pytest.mark.parametrize(("model", "shape", "mesh", "options"), [
    ("mlp", MLP, "dp=2,tp=2", {"memory_limit": 100 * 1024}),
    ("gpt2", {"layers": 1, "seq": 64}, "dp=2,tp=2", {"training": True}),
    ("llama3-8b", {"layers": 1, "seq": 128, "hidden": 256, "heads": 4, "kv_heads": 2,
                   "ffn": 512, "vocab": 96}, "dp=2,tp=2",
     {"training": True, "recompute": "selective", "micro_batches": 2}),
], ids=["mlp-tight", "gpt2-train", "llama-selective-2mb"])
def test_every_written_plan_passes(model: str, shape: dict[str, int], mesh: str,
                                   options: dict[str, Any]) -> None:
    graph = zoo.build(model, **shape)
    planned = make_plan(graph, Mesh.parse(mesh), **options)
    for candidate in (planned, Plan.from_dict(planned.to_dict())):
        check_tensor_records(candidate, planned_graph(candidate, graph))
        check_reshard_endpoints(candidate)


def _tensor(name: str, **fields: Any) -> Any:
    def edit(planned: Plan) -> Plan:
        tensors = dict(planned.tensors)
        tensors[name] = dataclasses.replace(tensors[name], **fields)
        return dataclasses.replace(planned, tensors=tensors)
    return edit


def _strategy(name: str, label: str) -> Any:
    def edit(planned: Plan) -> Plan:
        ops = dict(planned.ops)
        ops[name] = dataclasses.replace(ops[name], strategy=label)
        return dataclasses.replace(planned, ops=ops)
    return edit


def _without(name: str) -> Any:
    def edit(planned: Plan) -> Plan:
        return dataclasses.replace(planned, tensors={k: v for k, v in planned.tensors.items()
                                                     if k != name})
    return edit


def _extra(name: str) -> Any:
    def edit(planned: Plan) -> Plan:
        return dataclasses.replace(planned, tensors={**planned.tensors,
                                                     name: planned.tensors["x"]})
    return edit


UP = "layers.0.mlp.up.out"
OUT = "layers.1.mlp.down.out"


@pytest.mark.parametrize(("edit", "item", "pieces"), [
    (_tensor(UP, placements=("S(2)", "R"), partition_spec=(None, None, "dp")), UP,
     ['is laid out S(2) R, but op "layers.0.mlp.up" (strategy "dp:o tp:o") writes it as '
      "S(2) S(2)"]),
    (_tensor(UP, partition_spec=(None, None, ("tp", "dp"))), UP,
     ['has partition_spec [null, null, ["tp", "dp"]]', 'writes it with [null, null, ["dp", '
      '"tp"]]']),
    (_tensor(UP, shape=(16, 8, 128)), UP,
     ['has shape [16, 8, 128], but in the model (written by op "layers.0.mlp.up") it is '
      "[16, 8, 256]"]),
    (_tensor(UP, dtype="f32"), UP, ['has dtype "f32"', 'it is "bf16"']),
    (_tensor(OUT, placements=("R", "R"), partition_spec=(None, None, None)), OUT,
     ['is laid out R R, but op "layers.1.mlp.down" (strategy "dp:i tp:i") writes it as '
      "S(0) S(0)"]),
    (_strategy("layers.0.mlp.gelu", "bogus"), "layers.0.mlp.gelu",
     ['plan.json op "layers.0.mlp.gelu" (gelu) has strategy "bogus", which is not a strategy '
      "of that op on mesh dp=2,tp=2", "give the op one of its strategies"]),
    (_without("x"), "x", ['plan.json has no record of tensor "x", which op "x" writes']),
    (_extra("ghost"), "ghost", ['plan.json records tensor "ghost", which no op of model']),
], ids=["layout", "axis-order", "shape", "dtype", "completed-output", "unknown-strategy",
        "missing-record", "extra-record"])
def test_edits_are_refused_naming_what_differs(tight: tuple[Plan, Any], edit: Any, item: str,
                                               pieces: list[str]) -> None:
    planned, graph = tight
    check_tensor_records(planned, graph)  # the unedited plan passes
    with pytest.raises(PlanRecordError) as info:
        check_tensor_records(edit(planned), graph)
    message = str(info.value)
    assert info.value.item == item and "\n" not in message
    for piece in pieces:
        assert piece in message


@pytest.mark.parametrize(("edit", "piece"), [
    (_tensor("layers.0.mlp.down.out", placements=("R", "R"),
             partition_spec=(None, None, None)),
     'tensor "layers.0.mlp.down.out" is laid out R R, but its reshard layers.0.mlp.down -> '
     "layers.1.mlp.up starts from P(sum) P(sum)"),
    (_tensor(OUT, placements=("R", "R"), partition_spec=(None, None, None)),
     f'tensor "{OUT}" is laid out R R, but its reshard layers.1.mlp.down -> <output> ends in '
     "S(0) S(0)"),
], ids=["reshard-source", "output-target"])
def test_without_the_model_reshards_must_start_from_their_tensor(
        tight: tuple[Plan, Any], edit: Any, piece: str) -> None:
    planned, _ = tight
    check_reshard_endpoints(planned)
    with pytest.raises(PlanRecordError) as info:
        check_reshard_endpoints(edit(planned))
    assert piece in str(info.value)
