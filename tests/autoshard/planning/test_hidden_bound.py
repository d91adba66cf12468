"""Communication hidden behind compute never exceeds that compute.

The walk that found the defect: llama3-8b (2 layers) under Megatron on dp=2,fsdp=4,tp=4 said
13.5 ms of communication hidden behind 11.6 ms of compute. Two causes, each checked here
against hand rules rather than the planner's own sums:

* a gradient reduced over two axes (reduce-scatter over fsdp, all-reduce over dp) is priced by
  its busiest axis, the other axis's step pipelined beside it: that step ran beside
  communication, not compute. Per reshard behind an op: hidden = min(busiest, cover),
  beside other axes = Σ collectives − busiest (module docstring of
  ``autoshard.planning.step_parts``);
* several reshards behind one op (FSDP's gathers of a LayerNorm's weight and bias) each hid
  behind the op's whole compute. The op's compute is now split by tensor bytes (equal for a
  norm's weight and bias: half each), so they hide at most that compute together.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict

import pytest

import autoshard
from autoshard.planning.record import Plan, ReshardRecord
from graphs import zoo
from tests.support.alpha_beta import alpha_beta_preset

LOCAL = ("all_slice", "replicated_to_partial")


@functools.cache
def walk_plan() -> Plan:
    graph = zoo.build("llama3-8b", layers=2)
    return autoshard.plan(graph, autoshard.Mesh.parse("dp=2,fsdp=4,tp=4"), training=True,
                          strategy="megatron")


@functools.cache
def fsdp_plan() -> Plan:
    graph = zoo.build("gpt2", layers=2, batch=8, seq=128, hidden=256, heads=4, vocab=1024)
    return autoshard.plan(graph, autoshard.Mesh.parse("dp=2,fsdp=4"), training=True,
                          strategy="fsdp", topology=alpha_beta_preset("dgx-h100"))


def busiest(record: ReshardRecord) -> float:
    per_axis: dict[str, float] = defaultdict(float)
    for c in record.collectives:
        if c.kind not in LOCAL:
            for axis in c.axes:
                per_axis[axis] += c.seconds
    return max(per_axis.values(), default=0.0)


def by_hider(plan: Plan) -> dict[str, list[ReshardRecord]]:
    found: dict[str, list[ReshardRecord]] = defaultdict(list)
    for record in plan.reshards:
        if record.overlap.startswith("op "):
            found[record.overlap.removeprefix("op ")].append(record)
    return found


@pytest.mark.parametrize("planned", [walk_plan, fsdp_plan], ids=["walk-megatron", "fsdp"])
def test_hidden_is_the_hand_rule_and_never_exceeds_the_compute(planned) -> None:
    plan = planned()
    obj = plan.objective
    hidden = beside = 0.0
    for hider, records in by_hider(plan).items():
        compute = plan.ops[hider].compute_s
        here = sum(r.count * min(busiest(r), r.cover * compute) for r in records)
        runs = max(r.count for r in records)
        assert here <= runs * compute * (1 + 1e-12), hider  # one op hides at most itself
        hidden += here
        beside += sum(r.count * (sum(c.seconds for c in r.collectives if c.kind not in LOCAL)
                                 - busiest(r)) for r in records)
    assert obj.hidden_s == pytest.approx(hidden, rel=1e-9)
    assert obj.concurrent_s == pytest.approx(beside, rel=1e-9, abs=1e-15)
    assert obj.hidden_s <= obj.compute_s
    assert obj.compute_s + obj.comm_s - obj.hidden_s - obj.concurrent_s == pytest.approx(
        obj.total_s, rel=1e-9)


def test_the_walks_gradients_pipeline_across_axes() -> None:
    """The Megatron plan's data-parallel gradients reduce over fsdp and dp: part of their
    communication ran beside the other axis, so it is reported apart from what hid behind
    compute."""
    plan = walk_plan()
    two_axes = [r for r in plan.reshards if r.overlap
                and len({a for c in r.collectives for a in c.axes}) > 1]
    assert two_axes and plan.objective.concurrent_s > 0


def test_a_norms_weight_and_bias_split_its_compute_by_bytes() -> None:
    plan = fsdp_plan()
    norms = {h: rs for h, rs in by_hider(plan).items() if len(rs) > 1}
    assert norms  # every LayerNorm: weight and bias gathered for it
    for hider, records in norms.items():
        sizes = [math.prod(plan.tensors[r.tensor].shape) for r in records]
        assert [r.cover for r in records] == pytest.approx([s / sum(sizes) for s in sizes])
        assert sum(r.cover for r in records) == pytest.approx(1.0)
        assert hider.endswith("norm"), hider
