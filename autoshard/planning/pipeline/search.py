"""Choose a schedule and stage boundaries for per-layer costs, by simulated step time.

For each candidate schedule (one, or all with ``auto``) the stage cut comes from
:func:`.partition.balanced_cut` (or the user's ``--stages``), is refined on the simulated
step, and is kept if every stage fits its memory: parameters, gradients and optimizer state of
its layers, the activations of the micro-batch chunks its schedule keeps in flight
(:func:`.simulate.in_flight`; for ZB-H1, whose deferred Ws keep their inputs after B, the
peak over the simulated timeline, :func:`.simulate.held_bytes`), and the transient working
set the intra-stage plan measured.
The fastest that fits wins; ties go to the schedule listed first (the simpler one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autoshard.errors import MemoryTooSmallError, PipelineError
from autoshard.planning.pipeline.layer_costs import LayerCosts, PartCost
from autoshard.planning.pipeline.partition import Cut, balanced_cut, make_cut, refine
from autoshard.planning.pipeline.schedules import Schedule, check_micro_batches
from autoshard.planning.pipeline.simulate import (
    ChunkCost,
    Timeline,
    held_bytes,
    in_flight,
    simulate,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """What the search is given besides the layer costs."""

    stages: int
    micro_batches: int
    send_s: float  # one micro-batch's boundary activation over the pp link
    limit_bytes: float  # per device, reserve already taken off
    transient_bytes: float  # working set beyond static state and saved activations
    virtual: int = 2  # chunks per stage of the interleaved schedule
    layers: tuple[int, ...] | None = None  # --stages: layers per chunk


@dataclass(frozen=True, slots=True)
class Choice:
    """A schedule, its cut, the simulated timeline and each physical stage's bytes."""

    schedule: Schedule
    chunks_per_stage: int
    cut: Cut
    timeline: Timeline
    stage_bytes: tuple[float, ...]
    stage_parts: tuple[PartCost, ...]
    held_bytes: tuple[float, ...]  # per stage, the peak activations (and W inputs) held


def candidates(schedule: Schedule | None, setting: Setting, layers: int) -> list[Schedule]:
    """``schedule`` alone (checked), or with ``auto`` (None) every schedule the micro-batch
    and layer counts allow."""
    p, m = setting.stages, setting.micro_batches
    if schedule is not None:
        check_micro_batches(schedule, p, m)
        if schedule is Schedule.INTERLEAVED and layers < p * setting.virtual:
            raise PipelineError(f"the interleaved schedule with {setting.virtual} chunks per "
                                f"stage needs at least {p * setting.virtual} layers, the model "
                                f"has {layers}", stages=p, schedule=schedule.value)
        return [schedule]
    out = [Schedule.GPIPE]
    if m >= p:
        out += [Schedule.ONE_F_ONE_B, Schedule.ZB_H1]
        if m % p == 0 and layers >= p * setting.virtual:
            out.append(Schedule.INTERLEAVED)
    return out


def choose(costs: LayerCosts, setting: Setting, schedule: Schedule | None) -> Choice:
    """The fastest candidate that fits (see the module docstring)."""
    found: list[Choice] = []
    smallest = float("inf")
    for candidate in candidates(schedule, setting, len(costs.layers)):
        choice, needed = _best_cut(costs, setting, candidate)
        if choice is not None:
            found.append(choice)
        smallest = min(smallest, needed)
    if not found:
        raise MemoryTooSmallError(needed_bytes=smallest, limit_bytes=setting.limit_bytes,
                                  mesh=f"pp={setting.stages} stages", exact=False)
    return min(found, key=lambda c: c.timeline.step_s)


def _best_cut(costs: LayerCosts, setting: Setting, schedule: Schedule
              ) -> tuple[Choice | None, float]:
    p, m = setting.stages, setting.micro_batches
    v = setting.virtual if schedule is Schedule.INTERLEAVED else 1
    held = in_flight(schedule, p, m, v)

    def stage_bytes(cut: Cut) -> tuple[tuple[PartCost, ...], tuple[float, ...],
                                       tuple[float, ...]]:
        parts = [PartCost() for _ in range(p)]
        for k, chunk in enumerate(cut.chunks):
            parts[k % p] = parts[k % p] + chunk
        if schedule.splits_backward:  # deferred Ws: what each stage holds depends on timing
            spans = _timeline(schedule, cut, setting, v).spans
            kept = tuple(held_bytes(spans[s], part.activation_bytes, part.weight_bytes)
                         for s, part in enumerate(parts))
        else:
            kept = tuple(held[s] / v * part.activation_bytes for s, part in enumerate(parts))
        return tuple(parts), tuple(part.static_bytes + k + setting.transient_bytes
                                   for part, k in zip(parts, kept, strict=True)), kept

    def fits(cut: Cut) -> bool:
        return max(stage_bytes(cut)[1]) <= setting.limit_bytes

    def step_of(cut: Cut) -> float:
        return _timeline(schedule, cut, setting, v).step_s

    if setting.layers is not None:
        cut = _given_cut(costs, setting, v, schedule)
    else:
        def memory_of(part: PartCost, k: int) -> float:
            return part.static_bytes + held[k] * part.activation_bytes + setting.transient_bytes

        balanced = balanced_cut(costs, p * v, p, setting.limit_bytes, memory_of)
        cut = balanced if balanced is not None else make_cut(costs, _even(len(costs.layers),
                                                                           p * v))
        if balanced is not None and fits(balanced):
            cut = refine(balanced, costs, step_of, fits)
    parts, sizes, kept = stage_bytes(cut)
    if max(sizes) > setting.limit_bytes:
        return None, max(sizes)
    return Choice(schedule=schedule, chunks_per_stage=v, cut=cut,
                  timeline=_timeline(schedule, cut, setting, v), stage_bytes=sizes,
                  stage_parts=parts, held_bytes=kept), max(sizes)


def _timeline(schedule: Schedule, cut: Cut, setting: Setting, v: int) -> Timeline:
    p = setting.stages
    chunks = [ChunkCost(c.forward_s, c.backward_s, c.weight_s,
                        setting.send_s if k < len(cut.chunks) - 1 else 0.0)
              for k, c in enumerate(cut.chunks)]
    tails = [sum(c.tail_s for k, c in enumerate(cut.chunks) if k % p == s) for s in range(p)]
    return simulate(schedule, chunks, setting.micro_batches, p, tails)


def _given_cut(costs: LayerCosts, setting: Setting, v: int, schedule: Schedule) -> Cut:
    layers = setting.layers or ()
    want = setting.stages * v
    if len(layers) != want or sum(layers) != len(costs.layers) or min(layers) < 1:
        what = f"{want} chunks ({v} per stage)" if v > 1 else f"{want} stages"
        raise PipelineError(f"--stages {','.join(map(str, layers))} must give the layers of "
                            f"each of the {what} of the {schedule.value} schedule, at least one "
                            f"each, summing to the model's {len(costs.layers)} layers",
                            stages=setting.stages, schedule=schedule.value)
    return make_cut(costs, layers)


def _even(layers: int, chunks: int) -> Sequence[int]:
    base, extra = divmod(layers, chunks)
    return [base + (1 if k >= chunks - extra else 0) for k in range(chunks)]
