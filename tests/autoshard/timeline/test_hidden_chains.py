"""Reshards hidden behind one op, priced and drawn by hand: a gradient whose reduction spans two
mesh axes, and a norm's weight and bias gathered behind the norm.

Worked on paper from the pipelining rule (the steps of one reshard pipeline across mesh
axes, so it lasts as long as its busiest axis, each step starting no earlier and ending no
earlier than the one it depends on) and the op model (a reshard hidden behind an op costs what
its share of the op's compute does not cover; the shares of one op add to one):

* ``grad/w``: reduce-scatter over fsdp 30 µs, then all-reduce over dp 20 µs, behind
  ``bwd/layers.0.mm``. Drawn fsdp [0, 30], dp [10, 30]. With 40 µs of compute nothing is
  exposed: hidden behind compute = the busiest axis, 30 µs ≤ 40; the dp step's 20 µs ran beside
  the fsdp step. With 20 µs of compute 10 µs are exposed and hidden = 20 µs = the compute.
* a norm (10 µs) gathers weight and bias over dp, 8 µs each, half its compute each: each
  exposes max(0, 8 − 5) = 3 µs, hidden 5 + 5 = 10 µs ≤ 10; drawn dp [0, 8] then [8, 16], and
  the norm's slot is 10 + 3 + 3 = 16 µs. (Each given the whole 10 µs, as before the shares,
  they hid 16 µs behind 10 µs of compute and shared the dp stream.)
"""

from __future__ import annotations

import itertools

import pytest

from autoshard.planning.record import CollectiveRecord, Objective, OpRecord, Plan, ReshardRecord
from autoshard.planning.step import Overlap, StepOptions
from autoshard.planning.step_parts import concurrent_seconds
from autoshard.planning.step_problem import step_seconds
from autoshard.timeline import step_timeline
from graphs import Op

US = 1e-6


def op(kind: str, compute_us: float) -> OpRecord:
    return OpRecord(kind=kind, strategy="hand", compute_s=compute_us * US, comm_s=0.0,
                    flops=1.0, memory_bytes=0.0, local_inputs=((4, 4),),
                    local_outputs=((4, 4),))


def coll(kind: str, axis: str, us: float) -> CollectiveRecord:
    return CollectiveRecord(kind=kind, axes=(axis,), group_size=2, bytes=1024.0,
                            seconds=us * US)


def plan_of(ops: dict[str, OpRecord], reshards: list[ReshardRecord], total_us: float) -> Plan:
    objective = Objective(total_s=total_us * US, compute_s=0.0, comm_s=0.0, lower_bound_s=0.0,
                          optimal=True, gap=0.0, status="optimal", solve_s=0.0)
    return Plan(model="hand", mesh=(("dp", 2), ("fsdp", 2)), topology="hand", links=(),
                objective=objective, peak_bytes_per_device=0.0, limit_bytes=None,
                memory_breakdown={}, tensors={}, ops=ops, reshards=tuple(reshards),
                fingerprint="hand", stats={"settings": {"overlap": "op"}})


def gradient_plan(compute_us: float, total_us: float) -> Plan:
    ops = {"w": op("param", 0), "bwd/layers.0.mm": op("einsum", compute_us),
           "opt/w": op("adamw_step", 3)}
    grad = ReshardRecord(tensor="grad/w", producer="bwd/layers.0.mm", consumer="opt/w",
                         src=("P(sum)", "P(sum)"), dst=("R", "S(0)"),
                         collectives=(coll("reduce_scatter", "fsdp", 30),
                                      coll("all_reduce", "dp", 20)),
                         overlap="op bwd/layers.0.mm")
    return plan_of(ops, [grad], total_us)


def norm_plan() -> Plan:
    ops = {"w": op("param", 0), "b": op("param", 0), "layers.0.norm": op("layer_norm", 10)}
    gathers = [ReshardRecord(tensor=name, producer=name, consumer="layers.0.norm",
                             src=("S(0)", "R"), dst=("R", "R"),
                             collectives=(coll("all_gather", "dp", 8),),
                             overlap="op layers.0.norm", cover=0.5) for name in ("w", "b")]
    return plan_of(ops, gathers, 16)


CASES = {
    # plan, compute, communication, hidden, beside other axes, step (µs)
    "gradient-covered": (gradient_plan(40, 43), 43, 50, 30, 20, 43),
    "gradient-exposed": (gradient_plan(20, 33), 23, 50, 20, 20, 33),
    "norm-weight-bias": (norm_plan(), 10, 16, 10, 0, 16),
}


def parts(plan: Plan) -> tuple[float, float, float, float]:
    """(step, compute, communication, beside other axes) in µs, from the records alone."""
    ops = [Op(name=n, kind=r.kind, inputs=(), outputs=()) for n, r in plan.ops.items()]
    step = step_seconds(ops, dict(plan.ops), list(plan.reshards),
                        StepOptions(overlap=Overlap.OP))
    compute = sum(r.count * r.compute_s for r in plan.ops.values())
    comm = sum(r.count * r.seconds for r in plan.reshards)
    return step / US, compute / US, comm / US, concurrent_seconds(plan.reshards, 1) / US


@pytest.mark.parametrize("name", CASES)
def test_hidden_never_exceeds_the_compute_beside_it(name) -> None:
    plan, compute, comm, hidden, beside, step = CASES[name]
    got_step, got_compute, got_comm, got_beside = parts(plan)
    assert (got_step, got_compute, got_comm, got_beside) == pytest.approx(
        (step, compute, comm, beside), rel=1e-12)
    got_hidden = got_compute + got_comm - got_step - got_beside
    assert got_hidden == pytest.approx(hidden, rel=1e-12)
    hider = next(r for r in plan.reshards).overlap.removeprefix("op ")
    assert got_hidden <= plan.ops[hider].compute_s / US * (1 + 1e-12)


DRAWN = {
    "gradient-covered": {"fsdp": [(0, 30)], "dp": [(10, 30)]},
    "gradient-exposed": {"fsdp": [(0, 30)], "dp": [(10, 30)]},
    "norm-weight-bias": {"dp": [(0, 8), (8, 16)]},
}


@pytest.mark.parametrize("name", CASES)
def test_the_trace_draws_the_chain_pipelined_one_step_per_axis_at_a_time(name) -> None:
    plan, *_, step = CASES[name]
    timeline = step_timeline(plan)
    for axis, spans in DRAWN[name].items():
        drawn = sorted((s.start_s / US, s.end_s / US) for s in timeline.slices
                       if s.track.thread == axis)
        assert drawn == [pytest.approx(span, abs=1e-9) for span in spans]
        assert all(a[1] <= b[0] + 1e-9 for a, b in itertools.pairwise(drawn))
    assert timeline.end_s / US == pytest.approx(step, rel=1e-12)
