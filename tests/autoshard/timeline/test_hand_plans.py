"""Timelines of plans written by hand, against positions worked out on paper.

Each plan has round numbers (microseconds) and two micro-batches: a forward matmul fed by a
parameter gather, an activation reshard, an op with an intra-op all-reduce and a graph output,
a backward matmul whose gradient is reduced once per step, an optimizer step and the updated
parameter moved back for the next step. Every slice's start and end below is derived by hand
from the rules in the timeline's docstrings (exposed work stops the compute; a hidden reshard
starts with its hider and stops the compute by what the hider's compute does not cover; a layer
window lasts its busiest stream), and the step's total by hand from the step model's cost
formulas; ``step_seconds`` (the planner's own recount) must agree with the hand total, which
shows the hand plans are plans the model could have made.
"""

from __future__ import annotations

import pytest

from autoshard.errors import TimelineError
from autoshard.planning.record import CollectiveRecord, Objective, OpRecord, Plan, ReshardRecord
from autoshard.planning.step import Overlap, StepOptions
from autoshard.planning.step_problem import step_seconds
from autoshard.timeline import Category, step_timeline
from graphs import Op

US = 1e-6


def op(kind: str, compute_us: float, count: int, *, intra: tuple = ()) -> OpRecord:
    comm = sum(c.seconds for c in intra)
    return OpRecord(kind=kind, strategy="hand", compute_s=compute_us * US, comm_s=comm,
                    flops=1.0, memory_bytes=0.0, local_inputs=((4, 4),), local_outputs=((4, 4),),
                    intra_op=intra, count=count)


def coll(kind: str, axes: tuple[str, ...], us: float) -> CollectiveRecord:
    return CollectiveRecord(kind=kind, axes=axes, group_size=2, bytes=1024.0, seconds=us * US)


def reshard(tensor: str, producer: str, consumer: str, collectives: tuple, count: int,
            overlap: str = "") -> ReshardRecord:
    return ReshardRecord(tensor=tensor, producer=producer, consumer=consumer, src=("S(0)",),
                         dst=("R",), collectives=collectives, count=count, overlap=overlap)


def ops_of(m: int) -> dict[str, OpRecord]:
    return {
        "w": op("param", 0, m),
        "x": op("input", 0, m),
        "layers.0.mm": op("einsum", 10, m),
        "layers.0.act": op("gelu", 5, m, intra=(coll("all_reduce", ("tp",), 2),)),
        "bwd/layers.0.mm": op("einsum", 20, m),
        "opt/w": op("adamw_step", 3, 1),
    }


def plan_of(ops: dict[str, OpRecord], reshards: list[ReshardRecord], m: int, overlap: str,
            total_us: float) -> Plan:
    objective = Objective(total_s=total_us * US, compute_s=0.0, comm_s=0.0, lower_bound_s=0.0,
                          optimal=True, gap=0.0, status="optimal", solve_s=0.0,
                          micro_batches=m)
    return Plan(model="hand", mesh=(("dp", 2), ("tp", 2)), topology="hand", links=(),
                objective=objective, peak_bytes_per_device=0.0, limit_bytes=None,
                memory_breakdown={}, tensors={}, ops=ops, reshards=tuple(reshards),
                fingerprint="hand", stats={"settings": {"overlap": overlap,
                                                        "micro_batches": m}})


def op_model_plan() -> Plan:
    reshards = [
        reshard("w", "w", "layers.0.mm", (coll("all_gather", ("dp",), 16),), 2,
                "op layers.0.mm"),
        reshard("layers.0.mm.out", "layers.0.mm", "layers.0.act",
                (coll("all_reduce", ("tp",), 4),), 2),
        reshard("layers.0.act.out", "layers.0.act", "<output>",
                (coll("all_reduce", ("tp",), 3),), 2),
        reshard("grad/w", "bwd/layers.0.mm", "opt/w",
                (coll("reduce_scatter", ("dp",), 12), coll("all_slice", ("tp",), 1)), 1,
                "op bwd/layers.0.mm"),
        reshard("w.next", "opt/w", "<next step>", (coll("all_gather", ("dp",), 7),), 1),
    ]
    return plan_of(ops_of(2), reshards, 2, "op", 111)


def layer_model_plan() -> Plan:
    reshards = [
        reshard("w", "w", "layers.0.mm", (coll("all_gather", ("dp",), 16),), 2,
                "layer fwd 0"),
        reshard("w", "w", "bwd/layers.0.mm", (coll("all_gather", ("dp",), 8),), 2,
                "layer bwd 0"),
        reshard("layers.0.mm.out", "layers.0.mm", "layers.0.act",
                (coll("all_reduce", ("tp",), 4),), 2),
        reshard("layers.0.act.out", "layers.0.act", "<output>",
                (coll("all_reduce", ("tp",), 3),), 2),
        reshard("grad/w", "bwd/layers.0.mm", "opt/w",
                (coll("reduce_scatter", ("dp",), 12), coll("all_slice", ("tp",), 1)), 1,
                "layer bwd 0"),
        reshard("w.next", "opt/w", "<next step>", (coll("all_gather", ("dp",), 7),), 1,
                "layer fwd 0"),
    ]
    return plan_of(ops_of(2), reshards, 2, "layer", 101)


def positions(plan: Plan) -> dict[tuple[str, str, object], list[tuple[float, float]]]:
    """(track, slice name, micro-batch) → every (start, end) in microseconds, in time order."""
    found: dict[tuple[str, str, object], list[tuple[float, float]]] = {}
    for piece in step_timeline(plan).slices:
        key = (piece.track.thread, piece.name, piece.args.get("micro_batch"))
        found.setdefault(key, []).append((piece.start_s / US, piece.end_s / US))
    return {key: sorted(spans) for key, spans in found.items()}


def model_seconds(plan: Plan, overlap: Overlap) -> float:
    ops = [Op(name=name, kind=rec.kind, inputs=(), outputs=()) for name, rec in plan.ops.items()]
    return step_seconds(ops, dict(plan.ops), list(plan.reshards),
                        StepOptions(micro_batches=plan.objective.micro_batches, overlap=overlap))


# ops 2·10 + 2·(5 + 2) + 2·20 + 3 = 77; gather 2·max(0, 16 − 10) = 12; activation 2·4 = 8;
# output 2·3 = 6; gradient 1 + max(0, 12 − 20) = 1 (its slice); next step 7: 111 µs.
OP_MODEL = {
    ("compute", "layers.0.mm", 0): (0, 10), ("dp", "all_gather w", 0): (0, 16),
    ("tp", "all_reduce layers.0.mm.out", 0): (16, 20), ("compute", "layers.0.act", 0): (20, 25),
    ("tp", "all_reduce layers.0.act", 0): (25, 27),
    ("tp", "all_reduce layers.0.act.out", 0): (27, 30),
    ("compute", "bwd/layers.0.mm", 0): (30, 50), ("step", "micro-batch 0", 0): (0, 50),
    ("compute", "layers.0.mm", 1): (50, 60), ("dp", "all_gather w", 1): (50, 66),
    ("tp", "all_reduce layers.0.mm.out", 1): (66, 70), ("compute", "layers.0.act", 1): (70, 75),
    ("tp", "all_reduce layers.0.act", 1): (75, 77),
    ("tp", "all_reduce layers.0.act.out", 1): (77, 80),
    ("compute", "bwd/layers.0.mm", 1): (80, 100), ("dp", "reduce_scatter grad/w", 1): (80, 92),
    ("compute", "all_slice grad/w", 1): (100, 101), ("step", "micro-batch 1", 1): (50, 101),
    ("compute", "opt/w", None): (101, 104), ("dp", "all_gather w.next", None): (104, 111),
    ("step", "optimizer step", None): (101, 111),
}

# ops 77; activation 8 and output 6 as above; forward window: one micro-batch max(15, 16),
# the last max(15, 16 + 7), less the 2·15 of compute counted in the ops: 9; backward window:
# max(20, 8) + max(20, 8 + 12) − 2·20 = 0; the gradient's local slice 1: 101 µs.
LAYER_MODEL = {
    ("tp", "all_reduce layers.0.mm.out", 0): (0, 4), ("windows", "layer fwd 0", 0): (4, 20),
    ("compute", "layers.0.mm", 0): (4, 14), ("compute", "layers.0.act", 0): (14, 19),
    ("dp", "all_gather w", 0): [(4, 20), (25, 33)], ("tp", "all_reduce layers.0.act", 0): (20, 22),
    ("tp", "all_reduce layers.0.act.out", 0): (22, 25),
    ("windows", "layer bwd 0", 0): (25, 45), ("compute", "bwd/layers.0.mm", 0): (25, 45),
    ("step", "micro-batch 0", 0): (0, 45),
    ("tp", "all_reduce layers.0.mm.out", 1): (45, 49), ("windows", "layer fwd 0", 1): (49, 72),
    ("compute", "layers.0.mm", 1): (49, 59), ("compute", "layers.0.act", 1): (59, 64),
    ("dp", "all_gather w", 1): [(49, 65), (77, 85)], ("dp", "all_gather w.next", 1): (65, 72),
    ("tp", "all_reduce layers.0.act", 1): (72, 74),
    ("tp", "all_reduce layers.0.act.out", 1): (74, 77),
    ("windows", "layer bwd 0", 1): (77, 97), ("compute", "bwd/layers.0.mm", 1): (77, 97),
    ("dp", "reduce_scatter grad/w", 1): (85, 97), ("compute", "all_slice grad/w", 1): (97, 98),
    ("step", "micro-batch 1", 1): (45, 98),
    ("compute", "opt/w", None): (98, 101), ("step", "optimizer step", None): (98, 101),
}


@pytest.mark.parametrize(("make", "overlap", "expected", "total_us"), [
    (op_model_plan, Overlap.OP, OP_MODEL, 111), (layer_model_plan, Overlap.LAYER, LAYER_MODEL, 101),
], ids=["op", "layer"])
def test_slices_sit_where_the_hand_derivation_puts_them(make, overlap, expected, total_us) -> None:
    plan = make()
    assert model_seconds(plan, overlap) == pytest.approx(total_us * US, rel=1e-12)
    found = positions(plan)
    assert set(found) == set(expected)
    for key, spans in expected.items():
        spans = spans if isinstance(spans, list) else [spans]
        assert found[key] == [(pytest.approx(a), pytest.approx(b)) for a, b in spans], key
    assert step_timeline(plan).end_s == pytest.approx(total_us * US, rel=1e-12)


def test_the_layer_plan_gathers_twice_per_micro_batch_window() -> None:
    """Both runs of the forward gather and of the backward one are drawn, the once-per-step
    traffic only in the last micro-batch's windows."""
    slices = step_timeline(layer_model_plan()).slices
    gathers = [(s.name, s.args["micro_batch"], s.start_s / US) for s in slices
               if s.track.thread == "dp"]
    assert gathers == [("all_gather w", 0, pytest.approx(4)),
                       ("all_gather w", 0, pytest.approx(25)),
                       ("all_gather w", 1, pytest.approx(49)),
                       ("all_gather w.next", 1, pytest.approx(65)),
                       ("all_gather w", 1, pytest.approx(77)),
                       ("reduce_scatter grad/w", 1, pytest.approx(85))]


def test_overlap_none_is_the_plain_sum_in_order() -> None:
    """The op plan with nothing hidden: every collective stops the compute, 111 + 2·10 (the
    part of each gather run its matmul covered) + 12 (the whole gradient reduction) = 143 µs."""
    plan = op_model_plan()
    exposed = [ReshardRecord(**{**_fields(r), "overlap": ""}) for r in plan.reshards]
    plain = plan_of(dict(plan.ops), exposed, 2, "none", 143)
    assert model_seconds(plain, Overlap.NONE) == pytest.approx(143 * US, rel=1e-12)
    timeline = step_timeline(plain)
    assert timeline.end_s == pytest.approx(143 * US, rel=1e-12)
    comm = [s for s in timeline.slices if s.category is Category.EXPOSED]
    compute = [s for s in timeline.slices if s.track.thread == "compute"]
    assert not [(a.name, b.name) for a in comm for b in compute
                if a.start_s < b.end_s - 1e-15 and b.start_s < a.end_s - 1e-15]


def _fields(record: ReshardRecord) -> dict:
    return {f: getattr(record, f) for f in record.__dataclass_fields__}


# ---------------------------------------------------------------- inconsistent records
def test_a_reshard_run_more_often_than_its_hider_is_refused() -> None:
    plan = op_model_plan()
    broken = [ReshardRecord(**{**_fields(r), "count": 3}) if r.tensor == "w" else r
              for r in plan.reshards]
    with pytest.raises(TimelineError, match=r"reshard of w \(w -> layers.0.mm\) runs 3 times"):
        step_timeline(plan_of(dict(plan.ops), broken, 2, "op", 111))


def test_an_unknown_hider_is_named() -> None:
    plan = op_model_plan()
    broken = [ReshardRecord(**{**_fields(r), "overlap": "op gone"}) if r.tensor == "w" else r
              for r in plan.reshards]
    with pytest.raises(TimelineError, match="hides behind op 'gone'") as caught:
        step_timeline(plan_of(dict(plan.ops), broken, 2, "op", 111))
    assert caught.value.item == "reshard of w (w -> layers.0.mm)"


def test_op_counts_must_match_the_micro_batches() -> None:
    plan = op_model_plan()
    ops = {**plan.ops, "layers.0.mm": op("einsum", 10, 1)}
    with pytest.raises(TimelineError, match=r"op layers\.0\.mm \(fwd\) runs 1 times per step, "
                                            r"expected 2"):
        step_timeline(plan_of(ops, list(plan.reshards), 2, "op", 111))


def test_mixed_overlap_models_are_refused() -> None:
    mixed = [*op_model_plan().reshards, *layer_model_plan().reshards[:1]]
    with pytest.raises(TimelineError, match="mix the op and layer overlap models"):
        step_timeline(plan_of(ops_of(2), mixed, 2, "op", 0))
