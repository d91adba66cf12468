"""A planned training (or inference) step as a timeline, from the plan's records alone.

The step runs its micro-batches one after the other, each the forward and backward ops in the
plan's (topological) order, then the optimizer ops once (:mod:`.anchors` says which record runs
where and how often). Each op's slot on the compute track is the model's price for it
(:mod:`.layout`): exposed reshards stop the compute while they run, hidden ones run beside the
op they hide behind and stop it only by what their share of that op's compute does not cover
(their steps pipelined across mesh axes, :mod:`.chain`), and with the
layer model each (phase, layer) window runs its compute and its axes' traffic side by side.
So the timeline ends at the plan's step time, ``plan.objective.total_s``, whatever the overlap
model, and works on any saved plan.json: older files without per-record counts are single
micro-batch plans with nothing overlapped, and lay out as such.

A step of many micro-batches repeats one micro-batch's work: every micro-batch before the
first that runs a once-per-step reshard lays out alike. The first ``drawn`` of those are drawn
slice by slice, the rest of them as one repeat block (a slice on the step track and on every
track the first micro-batch used, as long as those micro-batches together), then the
micro-batches that differ, in full. A 70B plan of 64 micro-batches is ~490,000 slices drawn
whole (a 170 MB trace) and a fifteenth of that with four drawn; the step still ends at the
plan's step time.

What the picture does not claim: when a framework issues each collective. The op model prices
a parameter gather as if prefetched during a window as long as its consumer's compute, and a
gradient reduction as if it ran beside the op that produced it (frameworks overlap it with the
backward of later layers); the timeline draws both beside that op, which shows what the model
counts as hidden and what as exposed. Gradient reductions that run once per step run with the
producer's last micro-batch; next-step gathers (layer model) run in the last forward window of
their parameter's layer, standing in for the next step's.
"""

from __future__ import annotations

from typing import Any

from autoshard.planning.record import Plan, ReshardRecord
from autoshard.timeline.anchors import OpInfo, StepView
from autoshard.timeline.layout import Layout, layer_arg
from autoshard.timeline.slices import Category, Timeline, Track

TRACE_FORMAT = "autoshard.trace/v1"

DRAWN_MICRO_BATCHES = 4
"""Alike micro-batches drawn slice by slice before the rest repeat as one block."""


def step_timeline(plan: Plan, drawn: int | None = DRAWN_MICRO_BATCHES) -> Timeline:
    """Lay out one step of ``plan`` (every device of an SPMD plan runs the same one), the
    alike micro-batches past the first ``drawn`` as one repeat block (``None``: every one
    drawn; see the module docstring).

    Raises:
        autoshard.errors.TimelineError: the records cannot make a step (an edited plan.json).
    """
    view = StepView.of(plan)
    mesh = ",".join(f"{name}={size}" for name, size in plan.mesh)
    layout = Layout(process=f"{plan.model} on {mesh} (every device)")
    alike = _alike_micro_batches(view)
    repeated = 0 if drawn is None else max(0, alike - max(drawn, 1))
    for micro_batch in range(view.micro_batches):
        if repeated and micro_batch == alike - repeated:
            _repeat(layout, micro_batch, repeated)
        if repeated and alike - repeated <= micro_batch < alike:
            continue
        start = layout.now
        _micro_batch(layout, view, micro_batch)
        layout.mark(layout.step, f"micro-batch {micro_batch}", start, layout.now,
                    Category.STEP, {"micro_batch": micro_batch})
    start = layout.now
    once = [op for op in view.ops if not op.per_micro_batch]
    for op in once:
        _op_block(layout, view, op, 0)
    for record in view.anchors.tail:
        for _ in range(record.count):
            layout.exposed(record, {})
    if once or view.anchors.tail:
        layout.mark(layout.step, "optimizer step", start, layout.now, Category.STEP, {})
    return Timeline(slices=tuple(layout.slices), tracks=_tracks(layout, plan),
                    end_s=layout.now, metadata=_metadata(plan, mesh, view))


def _alike_micro_batches(view: StepView) -> int:
    """How many micro-batches from the first lay out alike: a record run ``count`` < m
    times per step runs in the last ``count`` (:func:`_running`), so the first m - count of
    the largest such count run the same records."""
    m = view.micro_batches
    anchors = view.anchors
    groups = [*anchors.before.values(), *anchors.after.values(), *anchors.beside.values(),
              *anchors.window.values()]
    fewer = [r.count for records in groups for r in records if r.count < m]
    return m - max(fewer, default=0)


def _repeat(layout: Layout, first: int, count: int) -> None:
    """``count`` micro-batches from ``first`` that run as micro-batch 0 did: one block on
    the step track and on every track micro-batch 0 used, ``count`` times its length."""
    step = layout.on(layout.step)
    start0, end0 = step[0].start_s, step[0].end_s
    seconds = (end0 - start0) * count
    last = first + count - 1
    args = {"micro_batches": f"{first}-{last}", "count": count, "as_micro_batch": 0}
    used = dict.fromkeys(s.track for s in layout.slices
                         if s.track != layout.step and s.start_s < end0)
    for track in used:
        busy = sum(s.seconds for s in layout.on(track) if s.end_s <= end0)
        layout.mark(track, f"{count} x micro-batch 0's {track.thread}", layout.now,
                    layout.now + seconds, Category.REPEAT, {**args, "busy_s": busy * count})
    layout.mark(layout.step, f"micro-batches {first}-{last} (as micro-batch 0)", layout.now,
                layout.now + seconds, Category.REPEAT, args)
    layout.now += seconds


def _micro_batch(layout: Layout, view: StepView, micro_batch: int) -> None:
    """One micro-batch's ops in plan order; an active layer window is laid out whole where
    its first op stands."""
    per_micro_batch = [op for op in view.ops if op.per_micro_batch]
    laid: set[str] = set()
    for op in per_micro_batch:
        records = view.anchors.window.get(op.slot, [])
        active = [(r, r.count == view.micro_batches) for r in records
                  if micro_batch >= view.micro_batches - r.count]
        if not active:
            _op_block(layout, view, op, micro_batch)
        elif op.slot not in laid:
            laid.add(op.slot)
            members = [o for o in per_micro_batch if o.slot == op.slot]
            _window_block(layout, view, members, active, micro_batch)


def _op_block(layout: Layout, view: StepView, op: OpInfo, micro_batch: int) -> None:
    """The exposed reshards into ``op``, the op with what hides behind it, the exposed
    reshards after it: those of them that run in this micro-batch (their last ``count``)."""
    index, runs = (micro_batch, view.micro_batches) if op.per_micro_batch else (0, 1)
    context: dict[str, Any] = {"micro_batch": micro_batch} if op.per_micro_batch else {}
    anchors = view.anchors
    for record in _running(anchors.before.get(op.name, []), index, runs):
        layout.exposed(record, {**context, **layer_arg(op)})
    layout.op(op, _running(anchors.beside.get(op.name, []), index, runs), context)
    for record in _running(anchors.after.get(op.name, []), index, runs):
        layout.exposed(record, {**context, **layer_arg(op)})


def _running(records: list[ReshardRecord], index: int, runs: int) -> list[ReshardRecord]:
    """The records that run in run ``index`` of an anchor that runs ``runs`` times per step:
    a record run ``count`` times runs in the last ``count``."""
    return [r for r in records if index >= runs - r.count]


def _window_block(layout: Layout, view: StepView, members: list[OpInfo],
                  records: list[tuple[ReshardRecord, bool]], micro_batch: int) -> None:
    """A layer window: its ops' exposed inputs, the window, their exposed outputs."""
    context = {"micro_batch": micro_batch}
    m = view.micro_batches
    for op in members:
        for record in _running(view.anchors.before.get(op.name, []), micro_batch, m):
            layout.exposed(record, {**context, **layer_arg(op)})
    layout.window(members[0].slot, members, records, context)
    for op in members:
        for record in _running(view.anchors.after.get(op.name, []), micro_batch, m):
            layout.exposed(record, {**context, **layer_arg(op)})


def _tracks(layout: Layout, plan: Plan) -> tuple[Track, ...]:
    """Display order: the step's micro-batches, the compute stream, the mesh axes in mesh
    order (then any other axis a collective names), the layer windows when there are any."""
    used = {s.track for s in layout.slices}
    axes = [layout.axis(name) for name, _ in plan.mesh]
    extra = sorted(t for t in used if t not in {layout.step, layout.compute, layout.windows,
                                                *axes})
    tracks = [layout.step, layout.compute, *axes, *extra]
    return tuple(tracks) + ((layout.windows,) if layout.windows in used else ())


def _metadata(plan: Plan, mesh: str, view: StepView) -> dict[str, Any]:
    settings = dict(plan.stats).get("settings") or {}
    return {"format": TRACE_FORMAT, "model": plan.model, "mesh": mesh,
            "topology": plan.topology, "step_s": plan.objective.total_s,
            "micro_batches": view.micro_batches, "overlap": settings.get("overlap", "none"),
            "fingerprint": plan.fingerprint}


__all__ = ["DRAWN_MICRO_BATCHES", "TRACE_FORMAT", "step_timeline"]
