"""The memory a whole pipeline stage needs, as a constraint on the stage model's plan.

The stage model has ``size`` layers (plus the embedding and the head) and holds one
micro-batch's saved activations; a stage holds ``n`` layers, the embedding or the head or
neither, and the saved activations of the ``k`` micro-batches its schedule keeps in flight.
The cut search (:mod:`.search`) counts a stage's bytes as its parts' state, plus ``k`` times
their saved activations, plus the transient working set the stage model's peak holds beyond
its own state and saved activations. Per layer, state and saved activations are sums of the
chosen layouts' local bytes (:func:`.layer_costs.output_kinds`), linear in the choices, and
the stage model's layers are identical blocks, so the difference between the stage and the
stage model is linear too:

    stage bytes = stage-model peak + (n/size − 1)·state(layers) + (k·n/size − 1)·saved(layers)
                  + (pre − 1)·state(embedding) + (k·pre − 1)·saved(embedding)  (same for head)

with ``pre`` 1 when the stage holds the embedding, else 0. Added to every liveness row of the
stage model (``plan(held_bytes=...)``), the planner's memory constraint is the search's check
of that stage, solved exactly (one solve under the device's memory instead of a series of
stage-model solves under budgets guessed from the shortfall). The copies of a part the stage
does not hold are negative: the constraint stays linear and the coefficients stay equal in
every interior block, which the memory price (``solver.memory_price``) needs.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from autoshard.planning.pipeline.layer_costs import (
    PRE,
    SAVED,
    STATIC,
    LayerCosts,
    output_kinds,
    parts_of,
)
from autoshard.planning.pipeline.schedules import Schedule
from autoshard.planning.pipeline.simulate import in_flight
from graphs import Op, OpGraph


@dataclass(frozen=True, slots=True)
class StageShape:
    """One stage as the stage model must stand for it: ``size`` stage-model layers, the
    stage's ``layers``, ``in_flight`` micro-batches of saved activations (per chunk: an
    interleaved stage holds ``in_flight / v`` of its whole part), embedding and head."""

    size: int
    layers: int
    in_flight: float
    embedding: bool
    head: bool

    def copies(self, part: int) -> tuple[float, float]:
        """Extra copies (state, saved activations) of a part of the stage model's graph."""
        if part >= 0:
            ratio = self.layers / self.size
            return ratio - 1.0, self.in_flight * ratio - 1.0
        holds = self.embedding if part == PRE else self.head
        return (1.0 if holds else 0.0) - 1.0, (self.in_flight if holds else 0.0) - 1.0


def held_terms(shape: StageShape, graph: OpGraph, ops: Sequence[Op],
               out_bytes: Sequence[tuple[np.ndarray, ...]]) -> list[tuple[int, np.ndarray]]:
    """``(node, bytes per option)`` the constraint adds for ``shape`` (the planner's
    ``held_bytes`` hook: ``ops`` in node order, ``out_bytes`` per node and output)."""
    return list(_terms(shape, graph, ops, out_bytes, 0.0))


def stage_floor(shape: StageShape, graph: OpGraph, ops: Sequence[Op],
                out_bytes: Sequence[tuple[np.ndarray, ...]]) -> float:
    """The state and in-flight activations of ``shape``'s stage with every op at its leanest
    layout: a lower bound of what the stage holds whatever the plan."""
    return sum(float(vector.min()) for _, vector in _terms(shape, graph, ops, out_bytes, 1.0))


def _terms(shape: StageShape, graph: OpGraph, ops: Sequence[Op],
           out_bytes: Sequence[tuple[np.ndarray, ...]], own: float
           ) -> Iterator[tuple[int, np.ndarray]]:
    """Per node, its state and saved outputs' bytes times the stage's extra copies plus
    ``own`` (0: what the stage adds to the stage model; 1: the stage's whole)."""
    ordered = list(ops)
    part = parts_of(ordered)
    kinds = output_kinds(graph, ordered)
    for node, op in enumerate(ordered):
        state, saved = shape.copies(part[op.name])
        total = None
        for kind, vector in zip(kinds[op.name], out_bytes[node], strict=True):
            factor = own + (state if kind == STATIC else saved if kind == SAVED else -own)
            if factor:
                total = factor * vector if total is None else total + factor * vector
        if total is not None:
            yield node, total


def stage_shapes(size: int, model_layers: int, stages: int, micro_batches: int,
                 schedule: Schedule, virtual: int, counts: Sequence[int] | None = None
                 ) -> tuple[StageShape, ...]:
    """Every stage of the cut (``counts`` layers per chunk; the even cut of ``model_layers``
    when not given or not one count per chunk) under ``schedule``, for a stage model of
    ``size`` layers."""
    v = virtual if schedule is Schedule.INTERLEAVED else 1
    chunks = stages * v
    held = in_flight(schedule, stages, micro_batches, v)
    if counts is None or len(counts) != chunks:
        counts = _even(model_layers, chunks)
    return tuple(StageShape(size=size, layers=sum(counts[c] for c in range(s, chunks, stages)),
                            in_flight=held[s] / v, embedding=s == 0,
                            head=s == (chunks - 1) % stages) for s in range(stages))


def binding_stage(costs: LayerCosts, shapes: Sequence[StageShape]) -> StageShape:
    """The stage that holds the most (state plus in-flight activations) with the layouts
    whose per-part costs are ``costs``."""
    layer = costs.layers[0]
    for part in costs.layers[1:]:
        layer = layer + part
    layer = layer.scaled(1.0 / len(costs.layers))

    def need(shape: StageShape) -> float:
        parts = [layer.scaled(shape.layers)]
        parts += [costs.pre] if shape.embedding else []
        parts += [costs.post] if shape.head else []
        return sum(p.static_bytes + shape.in_flight * p.activation_bytes for p in parts)

    return max(shapes, key=need)  # the first of equals


class LeanestStage:
    """A ``held_bytes`` hook that adds nothing and notes, in ``shape``, the stage that holds
    the most even with every op at its leanest layout (:func:`stage_floor`). The fastest
    plan's own fullest stage can mislead: with its state replicated the head's stage looks
    fullest, once the state is sharded the first stage's activations in flight are.
    Stateful on purpose: the planner hands the per-option bytes only to its hook."""

    def __init__(self, shapes: Sequence[StageShape]):
        self.shapes = tuple(shapes)
        self.shape: StageShape | None = None

    def __call__(self, graph: OpGraph, ops: Sequence[Op],
                 out_bytes: Sequence[tuple[np.ndarray, ...]]) -> list[tuple[int, np.ndarray]]:
        self.shape = max(self.shapes, key=lambda s: stage_floor(s, graph, ops, out_bytes))
        return []


def _even(layers: int, chunks: int) -> list[int]:
    base, extra = divmod(layers, chunks)
    return [base + (1 if k >= chunks - extra else 0) for k in range(chunks)]


def frugal_schedule(schedule: Schedule | None, stages: int, micro_batches: int) -> Schedule:
    """The schedule whose memory the stage must fit: the one given, else the one of the
    search's candidates that keeps the fewest micro-batches in flight (1F1B: ``p`` on the
    first stage; GPipe when there are fewer micro-batches than stages)."""
    if schedule is not None:
        return schedule
    return Schedule.ONE_F_ONE_B if micro_batches >= stages else Schedule.GPIPE

