"""Mutation tests: wrong plans must fail emulation, and the failure must name the culprit.

Each mutation edits a correct plan (``dataclasses.replace``) the way a planner bug would:
(a) an op's strategy reads a tensor in another placement and no reshard was added; (b) a
reshard lost one of its collectives; (c) two nested all-gathers run in the wrong order (major
axis first); (d) a nonlinear op reads a Partial value its strategy needs Replicate; plus a
graph output left Partial. Every "wrong" case has a control that changes the same plan
correctly and passes, so the failure is the mutation's, not the harness's.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import autoshard
from autoshard.planning.record import CollectiveRecord, Plan, ReshardRecord
from autoshard.strategies.derive import enumerate_strategies
from autoshard.verify.emulator import emulate
from autoshard.verify.verification import planned_graph
from graphs import DType, zoo
from tests.autoshard.verify.test_zoo import sharded_plan, small_overrides

PLANS = [("gpt2", "tp=4"), ("gpt2", "dp=2,tp=2"), ("llama3-8b", "dp=2,tp=2")]


def _setup(name: str, mesh_text: str):
    graph = zoo.build(name, **small_overrides(name))
    plan = sharded_plan(graph, autoshard.Mesh.parse(mesh_text))
    assert emulate(plan, graph).passed
    return graph, plan


def _with_op(plan: Plan, op: str, label: str) -> Plan:
    return replace(plan, ops={**plan.ops, op: replace(plan.ops[op], strategy=label)})


def _flips(graph, plan: Plan, count: int):
    """The first ``count`` ops (schedule order) with another strategy that reads exactly one
    input in another placement: (op, new label)."""
    mesh = autoshard.Mesh(axes=plan.mesh)
    found = []
    for op in graph.topo_ops():
        if op.kind in ("input", "param") or len(found) == count:
            continue
        ins, outs = graph.specs(op)
        strategies = enumerate_strategies(op.kind, ins, outs, graph.attrs(op), mesh)
        current = next(s for s in strategies if s.label == plan.ops[op.name].strategy)
        for other in strategies:
            changed = [i for i, (a, b) in enumerate(zip(other.inputs, current.inputs,
                                                        strict=True)) if a != b]
            if len(changed) == 1:
                found.append((op.name, other.label))
                break
    return found


def _reshard_label(record: ReshardRecord) -> str:
    return f"{record.tensor} {record.producer}->{record.consumer}"


@pytest.mark.parametrize(("name", "mesh_text"), PLANS)
def test_a_flipped_input_placement_without_its_reshard_fails_at_that_op(name, mesh_text):
    graph, plan = _setup(name, mesh_text)
    flips = _flips(graph, plan, 3)
    assert len(flips) == 3
    for op, label in flips:
        result = emulate(_with_op(plan, op, label), graph)
        assert not result.passed, (op, label)
        assert result.divergence.name == op or result.divergence.name.endswith(f"->{op}"), \
            (op, label, str(result.divergence))


@pytest.mark.parametrize(("name", "mesh_text"), PLANS)
def test_a_dropped_collective_fails_at_that_reshard(name, mesh_text):
    graph, plan = _setup(name, mesh_text)
    targets = [k for k, r in enumerate(plan.reshards) if r.collectives]
    assert targets
    for k in targets[:3]:
        record = plan.reshards[k]
        for dropped in range(len(record.collectives)):
            kept = record.collectives[:dropped] + record.collectives[dropped + 1:]
            reshards = list(plan.reshards)
            reshards[k] = replace(record, collectives=kept)
            result = emulate(replace(plan, reshards=tuple(reshards)), graph)
            assert not result.passed
            assert result.divergence.name == _reshard_label(record), str(result.divergence)
            assert result.divergence.step == "reshard"


def _gather(axes: tuple[str, ...], mesh: autoshard.Mesh, nbytes: float) -> CollectiveRecord:
    size = math.prod(mesh.axis_size(a) for a in axes)
    return CollectiveRecord(kind="all_gather", axes=axes, group_size=size, bytes=nbytes,
                            seconds=0.0)


def _nested_gathers(plan: Plan, mesh: autoshard.Mesh):
    """A reshard whose one all-gather undoes a dim sharded by two axes (major, minor), split
    into the two one-axis gathers it is made of, minor first (bytes: the gathered output per
    device, half the tensor then all of it); the wrong order is the same two records
    swapped."""
    for k, record in enumerate(plan.reshards):
        for c in record.collectives:
            if c.kind != "all_gather" or len(c.axes) != 2 or len(record.collectives) != 1:
                continue
            tensor = plan.tensors[record.tensor]
            total = math.prod(tensor.shape) * DType(tensor.dtype).itemsize
            major, minor = c.axes
            right = (_gather((minor,), mesh, total / mesh.axis_size(major)),
                     _gather((major,), mesh, total))
            return k, right, right[::-1]
    return None


def test_swapped_nested_all_gathers_fail_at_that_reshard():
    graph = zoo.build("gpt2", **small_overrides("gpt2"))
    mesh = autoshard.Mesh.parse("dp=2,tp=2")
    plan = sharded_plan(graph, mesh)
    found = _nested_gathers(plan, mesh)
    assert found is not None, "the fixture plan has no two-axis all-gather"
    k, right, wrong = found
    record = plan.reshards[k]
    for collectives, ok in ((right, True), (wrong, False)):
        reshards = list(plan.reshards)
        reshards[k] = replace(record, collectives=collectives)
        result = emulate(replace(plan, reshards=tuple(reshards)), graph)
        assert result.passed is ok, result.summary()
        if not ok:
            assert result.divergence.name == _reshard_label(record)


def _replicated(plan: Plan) -> Plan:
    """The same plan with every op replicated and no reshards: trivially right."""
    return replace(plan, ops={n: replace(r, strategy="R") for n, r in plan.ops.items()},
                   reshards=())


@pytest.mark.parametrize(("name", "producer", "nonlinear", "weight"), [
    ("mlp", "layers.0.mlp.up", "layers.0.mlp.gelu", "layers.0.mlp.w1"),
    ("llama3-8b", "layers.0.mlp.gate", "layers.0.mlp.silu", "layers.0.mlp.w1"),
], ids=["gelu", "silu"])
def test_partial_into_a_nonlinear_op_fails_there(name, producer, nonlinear, weight):
    """The matmul before the activation runs as ``tp:P{1}``: its weight is split into
    Partial shares (a free R→P step) and its output is Partial. The activation needs it
    Replicate: with the all-reduce the plan passes, without it the activation is the culprit."""
    graph = zoo.build(name, **small_overrides(name))
    mesh = autoshard.Mesh.parse("tp=2")
    base = _replicated(autoshard.plan(graph, mesh))
    assert emulate(base, graph).passed
    w, out = base.tensors[weight], graph.op_by_name(producer).outputs[0]
    w_bytes = math.prod(w.shape) * DType(w.dtype).itemsize
    out_bytes = math.prod(base.tensors[out].shape) * DType(base.tensors[out].dtype).itemsize
    split = ReshardRecord(tensor=weight, producer=weight, consumer=producer, src=("R",),
                          dst=("P(sum)",), collectives=(CollectiveRecord(
                              kind="replicated_to_partial", axes=("tp",), group_size=2,
                              bytes=w_bytes, seconds=0.0),))
    reduce = ReshardRecord(tensor=out, producer=producer, consumer=nonlinear, src=("P(sum)",),
                           dst=("R",), collectives=(CollectiveRecord(
                               kind="all_reduce", axes=("tp",), group_size=2, bytes=out_bytes,
                               seconds=0.0),))
    partial = _with_op(base, producer, "tp:P{1}")
    right = emulate(replace(partial, reshards=(split, reduce)), graph)
    assert right.passed, right.summary()
    wrong = emulate(replace(partial, reshards=(split,)), graph)
    assert not wrong.passed
    assert wrong.divergence.name == nonlinear and wrong.divergence.step == "op"
    assert math.isfinite(wrong.divergence.abs_err)  # a numerical divergence, not a shape one


def _record(tensor, producer, consumer, src, dst, kind, nbytes) -> ReshardRecord:
    return ReshardRecord(tensor=tensor, producer=producer, consumer=consumer, src=src, dst=dst,
                         collectives=(CollectiveRecord(kind=kind, axes=("tp",), group_size=4,
                                                       bytes=float(nbytes), seconds=0.0),))


def test_a_graph_output_left_partial_fails_at_its_producer():
    """The loss runs batch-parallel (logits and targets sliced by batch): each device's loss
    is the mean of its rows, a Partial(avg) of the loss. With the all-reduce to ``<output>``
    the plan passes; without it the loss op is named."""
    graph = zoo.build("gpt2", **small_overrides("gpt2"))
    base = _replicated(autoshard.plan(graph, autoshard.Mesh.parse("tp=4")))
    logits = math.prod(graph.tensors["head.out"].shape) * 4
    targets = math.prod(graph.tensors["targets"].shape) * 8
    slices = (_record("head.out", "head", "loss", ("R",), ("S(0)",), "all_slice", logits / 4),
              _record("targets", "targets", "loss", ("R",), ("S(0)",), "all_slice",
                      targets / 4))
    reduce = _record("loss.out", "loss", "<output>", ("P(avg)",), ("R",), "all_reduce", 4)
    sharded = _with_op(base, "loss", "tp:d0")
    right = emulate(replace(sharded, reshards=(*slices, reduce)), graph)
    assert right.passed, right.summary()
    wrong = emulate(replace(sharded, reshards=slices), graph)
    assert not wrong.passed
    assert wrong.divergence.name == "loss"
    assert "Partial" in wrong.divergence.message


def test_an_unneeded_priced_reshard_is_reported():
    graph = zoo.build("mlp", **small_overrides("mlp"))
    base = _replicated(autoshard.plan(graph, autoshard.Mesh.parse("tp=2")))
    extra = ReshardRecord(tensor="layers.0.mlp.w1", producer="layers.0.mlp.w1",
                          consumer="layers.0.mlp.gelu", src=("R",), dst=("R",), collectives=())
    result = emulate(replace(base, reshards=(extra,)), graph)
    assert not result.passed
    assert result.divergence.name == "layers.0.mlp.w1 layers.0.mlp.w1->layers.0.mlp.gelu"


def test_an_updated_parameter_not_moved_back_fails_at_its_optimizer_step():
    """ZeRO by hand on a replicated SGD step: the step of w1 runs sharded by rows (parameter
    and gradient sliced), so w1.next is S(0) while w1 is stored R. With the priced
    all-gather to ``<next step>`` the plan passes; without it the step is named."""
    graph = zoo.build("mlp", **small_overrides("mlp"))
    mesh = autoshard.Mesh.parse("tp=2")
    base = _replicated(autoshard.plan(graph, mesh, training=True, optimizer="sgd"))
    step_graph = planned_graph(base, graph)
    assert emulate(base, step_graph).passed
    w, step = "layers.0.mlp.w1", "opt/layers.0.mlp.w1"
    total = math.prod(graph.tensors[w].shape) * 4

    def one(tensor, producer, consumer, src, dst, kind, nbytes):
        return ReshardRecord(tensor=tensor, producer=producer, consumer=consumer, src=src,
                             dst=dst, collectives=(CollectiveRecord(
                                 kind=kind, axes=("tp",), group_size=2, bytes=float(nbytes),
                                 seconds=0.0),))

    grad_producer = step_graph.producer(f"grad/{w}").name
    slices = (one(w, w, step, ("R",), ("S(0)",), "all_slice", total / 2),
              one(f"grad/{w}", grad_producer, step, ("R",), ("S(0)",), "all_slice", total / 2))
    back = one(f"{w}.next", step, "<next step>", ("S(0)",), ("R",), "all_gather", total)
    sharded = _with_op(base, step, "tp:d0")
    right = emulate(replace(sharded, reshards=(*slices, back)), step_graph)
    assert right.passed, right.summary()
    assert any(o.tensor == f"{w}.next (<next step>)" for o in right.outputs)
    wrong = emulate(replace(sharded, reshards=slices), step_graph)
    assert not wrong.passed
    assert wrong.divergence.name == step and "stored as" in wrong.divergence.message


def test_vocab_parallel_hand_rules_run_and_are_checked():
    """Megatron's vocab-parallel embedding (masked lookup → Partial) and loss (three
    all-reduces inside the op) on tp=4, by hand on a replicated plan: right as priced; the
    loss without its priced intra-op collectives, or the lookup's Partial read as
    Replicate, are named."""
    graph = zoo.build("gpt2", **small_overrides("gpt2"))
    base = _replicated(autoshard.plan(graph, autoshard.Mesh.parse("tp=4")))
    table = math.prod(graph.tensors["embed.tokens"].shape) * 4
    logits = math.prod(graph.tensors["head.out"].shape) * 4
    lookup = math.prod(graph.tensors["embed.lookup.out"].shape) * 4
    reshards = (
        _record("embed.tokens", "embed.tokens", "embed.lookup", ("R",), ("S(0)",), "all_slice",
                table / 4),
        _record("embed.lookup.out", "embed.lookup", "embed.add_positions", ("P(sum)",), ("R",),
                "all_reduce", lookup),
        _record("head.out", "head", "loss", ("R",), ("S(2)",), "all_slice", logits / 4))
    tokens = math.prod(graph.tensors["targets"].shape)
    intra = tuple(CollectiveRecord(kind="all_reduce", axes=("tp",), group_size=4,
                                   bytes=4.0 * tokens, seconds=0.0) for _ in range(3))
    plan = _with_op(_with_op(base, "embed.lookup", "tp:v*"), "loss", "tp:v*")
    plan = replace(plan, reshards=reshards,
                   ops={**plan.ops, "loss": replace(plan.ops["loss"], intra_op=intra)})
    right = emulate(plan, graph)
    assert right.passed, right.summary()
    unpriced = replace(plan, ops={**plan.ops, "loss": replace(plan.ops["loss"], intra_op=())})
    assert emulate(unpriced, graph).divergence.name == "loss"
    unreduced = emulate(replace(plan, reshards=reshards[::2]), graph)
    assert unreduced.divergence.name == "embed.add_positions"
