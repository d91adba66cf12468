"""The stage model planned under a whole stage's memory (:mod:`.stage_memory`).

Oracle: the cut search's count of a stage's bytes, written out here from the per-part costs
of the plan's records (state of the stage's layers, embedding or head; ``k`` micro-batches of
their saved activations; the transient the stage model's peak holds beyond its own state and
saved activations). The constraint the planner gets (liveness rows plus ``held_bytes``) is
built from the per-option byte vectors instead, so a limit equal to the stage's bytes must
keep the unconstrained plan and one byte less must change it to a plan whose stage fits.

(The search clamps a negative transient at zero, when the stage model's peak comes before
its gradients are all alive; the constraint counts ``peak + held``, as here unclamped, and
``fit_memory`` takes what the clamp adds off the next budget.)
"""

from __future__ import annotations

import functools

import pytest

from autoshard.planning.pipeline.layer_costs import LayerCosts, layer_costs
from autoshard.planning.pipeline.schedules import Schedule
from autoshard.planning.pipeline.stage_memory import (
    LeanestStage,
    StageShape,
    binding_stage,
    held_terms,
    stage_floor,
    stage_shapes,
)
from autoshard.planning.planner import plan, training_step_graph
from autoshard.planning.record import Plan
from autoshard.sharding.mesh import Mesh
from graphs import zoo

SHAPE = {"seq": 64, "hidden": 128, "ffn": 256, "heads": 8, "batch": 2, "layers": 4}
M = 8


@pytest.fixture(scope="module")
def stage_model() -> tuple:
    train = training_step_graph(zoo.build("llama3-8b", **SHAPE), "adamw", "none")
    mesh = Mesh.parse("dp=2,tp=2")
    return train, mesh, plan(train, mesh, micro_batches=M)


def stage_bytes(intra: Plan, costs: LayerCosts, shape: StageShape) -> float:
    parts = [layer.scaled(shape.layers / shape.size) for layer in costs.layers]
    parts += [costs.pre] if shape.embedding else []
    parts += [costs.post] if shape.head else []
    static = sum(p.static_bytes for p in (costs.pre, *costs.layers, costs.post))
    saved = intra.memory_breakdown["activations_saved"]
    transient = intra.peak_bytes_per_device - static - saved
    return sum(p.static_bytes + shape.in_flight * p.activation_bytes for p in parts) \
        + transient


@pytest.mark.parametrize("shape", [
    StageShape(size=4, layers=8, in_flight=2.0, embedding=True, head=False),
    StageShape(size=4, layers=6, in_flight=3.0, embedding=False, head=False),
])
def test_the_constraint_is_the_stages_bytes(stage_model, shape: StageShape) -> None:
    train, mesh, free = stage_model
    need = stage_bytes(free, layer_costs(train, free), shape)
    held = functools.partial(held_terms, shape)
    same = plan(train, mesh, micro_batches=M, memory_limit=need * (1 + 1e-12),
                held_bytes=held)
    assert same.objective.total_s == pytest.approx(free.objective.total_s, rel=1e-12)
    tighter = plan(train, mesh, micro_batches=M, memory_limit=need - 1.0, held_bytes=held)
    assert stage_bytes(tighter, layer_costs(train, tighter), shape) <= need - 1.0
    assert tighter.objective.total_s > free.objective.total_s


def test_the_binding_stage_of_1f1b_is_the_first_or_the_last(stage_model) -> None:
    train, _, free = stage_model
    costs = layer_costs(train, free)
    found = binding_stage(costs, stage_shapes(4, 16, 4, M, Schedule.ONE_F_ONE_B, 2))
    assert found.size == 4 and found.layers == 4
    first = StageShape(size=4, layers=4, in_flight=4.0, embedding=True, head=False)
    last = StageShape(size=4, layers=4, in_flight=1.0, embedding=False, head=True)
    assert found in (first, last)
    interleaved = stage_shapes(4, 16, 2, M, Schedule.INTERLEAVED, 2)
    assert [s.layers for s in interleaved] == [8, 8]  # two chunks of four layers each


def test_the_leanest_floor_is_below_what_a_plan_holds(stage_model) -> None:
    """Each stage's floor (every op at its leanest layout, from the per-option bytes) is at
    most that stage's state and in-flight activations under the fastest plan (summed from
    its records), and the hook that records the fullest floor leaves the plan unchanged."""
    train, mesh, free = stage_model
    shapes = stage_shapes(4, 16, 4, M, Schedule.ONE_F_ONE_B, 2)
    floors: dict[StageShape, float] = {}

    def record(graph, ops, out_bytes):
        floors.update({s: stage_floor(s, graph, ops, out_bytes) for s in shapes})
        return []

    lean = LeanestStage(shapes)
    again = plan(train, mesh, micro_batches=M, held_bytes=lean)
    plan(train, mesh, micro_batches=M, held_bytes=record)
    assert again.objective.total_s == free.objective.total_s
    costs = layer_costs(train, free)
    for shape in shapes:
        parts = [layer.scaled(shape.layers / shape.size) for layer in costs.layers]
        parts += [costs.pre] if shape.embedding else []
        parts += [costs.post] if shape.head else []
        held = sum(p.static_bytes + shape.in_flight * p.activation_bytes for p in parts)
        assert 0 < floors[shape] <= held * (1 + 1e-12)
    assert lean.shape == max(shapes, key=floors.__getitem__)
