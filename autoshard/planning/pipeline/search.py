"""Choose a schedule and stage boundaries for per-layer costs, by simulated step time.

For each candidate schedule (one, or with ``auto`` every one the micro-batches, the layers
and a ``--stages`` list fit: one count per pp stage for GPipe, 1F1B and ZB-H1, per chunk for
the interleaved one) the stage cut comes from :func:`.partition.balanced_cut` (or the
user's ``--stages``), is refined on the simulated step, and is kept if every stage fits its
memory: parameters, gradients and optimizer state of its layers, the activations of the
micro-batch chunks its schedule keeps in flight (:func:`.simulate.in_flight`; for ZB-H1,
whose deferred Ws keep their inputs after B, the peak over the simulated timeline,
:func:`.simulate.held_bytes`), and the transient working set the intra-stage plan measured.
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
    mesh: str = ""  # the whole mesh, pp axis included (what a refusal names)


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
    and layer counts allow and the ``--stages`` list, if any, fits (:func:`fitting_stages`)."""
    p, m = setting.stages, setting.micro_batches
    schedule = fitting_stages(schedule, setting.layers, layers, p, setting.virtual, m)
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
    if setting.layers is None:
        return out
    return [s for s in out if _fits(s, len(setting.layers), p, setting.virtual)]


def fitting_stages(schedule: Schedule | None, counts: Sequence[int] | None, layers: int,
                   stages: int, virtual: int, micro_batches: int) -> Schedule | None:
    """The schedule to run a ``--stages`` list under: ``schedule`` when given, the
    interleaved one when ``auto`` (None) and only it fits the list, else None (``auto``:
    :func:`candidates` keeps the schedules that fit).

    The list is one layer count per chunk, so its length says which schedules it can mean:
    one entry per pp stage fits GPipe, 1F1B and ZB-H1, pp × ``--virtual-stages`` the
    interleaved schedule. Checked here, before any solve, so that a list no schedule can
    run is one clear error rather than a refusal from whichever candidate the search tries
    first (raises :class:`PipelineError`)."""
    if counts is None:
        return schedule
    _check_counts(counts, layers, stages)
    fits = [s for s in Schedule if _fits(s, len(counts), stages, virtual)]
    if schedule is not None:
        if schedule not in fits:
            raise _misfit(counts, stages, virtual, schedule)
        return schedule
    if not fits:
        raise _misfit(counts, stages, virtual, None)
    if fits != [Schedule.INTERLEAVED]:
        return None
    if micro_batches < stages or micro_batches % stages:  # check_micro_batches' rule
        raise PipelineError(f"{_entries(counts)}, one per chunk of the interleaved schedule "
                            f"(pp × --virtual-stages), which needs the micro-batches "
                            f"({micro_batches}) to be a multiple of the pipeline stages "
                            f"({stages}); change --global-batch or --micro-batch, or give "
                            f"{stages} entries (one per pp stage) for the other schedules",
                            stages=stages, micro_batches=micro_batches,
                            schedule=Schedule.INTERLEAVED.value)
    return Schedule.INTERLEAVED


def _fits(schedule: Schedule, entries: int, stages: int, virtual: int) -> bool:
    """Whether ``entries`` layer counts are one per chunk of ``schedule``."""
    return entries == stages * (virtual if schedule is Schedule.INTERLEAVED else 1)


def _or(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _entries(counts: Sequence[int]) -> str:
    return f"--stages {','.join(map(str, counts))} has {len(counts)} entries"


def _check_counts(counts: Sequence[int], layers: int, stages: int) -> None:
    """Counts that no schedule can run: a chunk without layers, or not the model's layers."""
    text = ",".join(map(str, counts))
    if min(counts) < 1:
        raise PipelineError(f"--stages {text}: every stage (or chunk) needs at least one "
                            f"layer", stages=stages)
    if sum(counts) != layers:
        raise PipelineError(f"--stages {text} sums to {sum(counts)} layers, the model has "
                            f"{layers}", stages=stages)


def _misfit(counts: Sequence[int], stages: int, virtual: int,
            schedule: Schedule | None) -> PipelineError:
    """The lengths that fit: every schedule's (``auto``), or the given schedule's and which
    schedules the list would fit instead."""
    per_stage = f"{stages} (one per pp stage)"
    per_chunk = (f"{stages * virtual} (pp × --virtual-stages, one per chunk of the "
                 f"interleaved schedule)")
    if schedule is None:
        lengths = per_stage if virtual == 1 else f"{per_stage} or {per_chunk}"
        return PipelineError(f"{_entries(counts)}: give {lengths}", stages=stages)
    want = per_chunk if schedule is Schedule.INTERLEAVED else per_stage
    others = [s.value for s in Schedule if _fits(s, len(counts), stages, virtual)]
    instead = f"; {len(counts)} entries fit --schedule {_or(others)}, or auto" if others else ""
    return PipelineError(f"{_entries(counts)} but the {schedule.value} schedule needs "
                         f"{want}{instead}", stages=stages, schedule=schedule.value)


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
                                  mesh=setting.mesh or f"pp={setting.stages}", exact=False)
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
    """The user's ``--stages`` cut (already checked against ``schedule`` by
    :func:`candidates`, which only yields the schedules the list fits)."""
    layers = setting.layers or ()
    assert len(layers) == setting.stages * v, (layers, schedule)
    return make_cut(costs, layers)


def _even(layers: int, chunks: int) -> Sequence[int]:
    base, extra = divmod(layers, chunks)
    return [base + (1 if k >= chunks - extra else 0) for k in range(chunks)]
