"""A pipelined plan's step as a timeline: one process per stage, re-simulated from plan.json's
``pipeline`` record (:mod:`autoshard.planning.pipeline.simulate`), so it ends at the plan's
step time.

Each stage has these tracks:

* ``step``: its F, B and W tasks per micro-batch as the schedule ran them (the gaps between
  them are the bubble and the transfer waits), then its tail (gradient sync and optimizer);
* ``compute`` and one track per mesh axis other than ``pp``: inside each task, the ops and
  reshards the pricing charged to that chunk and phase (:mod:`autoshard.planning.pipeline.
  stage_rows`: the stage model's records copied onto the stage's layers) laid out as the
  SPMD step lays out its ops (:mod:`.layout`), from the task's start; inside the tail, the
  tail's. A reshard hidden behind an op whose pricing charged it to the tail (a gradient
  reduction into the optimizer, hidden behind the backward op that made the gradient) runs
  beside that op in its last runs, and what it does not hide delays the tail; such
  reductions may overlap one another on an axis (the pricing holds each against its own
  op's compute), which the trace shows as a second lane (``dp #2``);
* ``pp``: the point-to-point transfers it sends, each micro-batch's activation to the next
  virtual stage after its forward and its gradient to the previous one after its backward,
  each as long as the plan's price for one boundary activation on the ``pp`` link
  (``pipeline.p2p_send_s``); the receiving task starts no earlier than its end.

A plan.json written before ``pipeline.charges`` draws only the ``step`` and ``pp`` tracks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autoshard.planning.pipeline.schedules import Kind, Task, parse_schedule
from autoshard.planning.pipeline.simulate import ChunkCost, simulate
from autoshard.planning.pipeline.stage_rows import StageOp, StageReshard, StageRows, stage_rows
from autoshard.planning.record import Plan, ReshardRecord
from autoshard.planning.step import axis_seconds, phase_of
from autoshard.timeline.anchors import OpInfo
from autoshard.timeline.layout import Layout, reshard_args
from autoshard.timeline.slices import Category, Slice, Timeline, Track
from graphs import Op

PP_AXIS = "pp"
NAMES = {Kind.F: "forward", Kind.B: "backward", Kind.W: "weight grad"}


def pipeline_timeline(plan: Plan) -> Timeline:
    """See the module docstring; ``plan`` must have a ``pipeline`` record."""
    record: Any = plan.pipeline
    p, m = record["stages"], record["micro_batches"]
    costs = record["chunk_costs"]
    send_s = record["p2p_send_s"]
    chunks = [ChunkCost(f, b, w, send_s if k < len(costs) - 1 else 0.0)
              for k, (f, b, w) in enumerate(costs)]
    tails = [row["tail_s"] for row in record["stage"]]
    schedule = parse_schedule(record["schedule"])
    timeline = simulate(schedule, chunks, m, p, tails)
    rows = stage_rows(plan.ops, plan.reshards, record)
    axes = [name for name, _ in plan.mesh if name != PP_AXIS]
    slices: list[Slice] = []
    tracks: list[Track] = []
    for s, spans in enumerate(timeline.spans):
        stage = _Stage(s, p, m, rows, schedule.splits_backward)
        for task, start, end in spans:
            stage.task(task, start, end)
        stage.tail(timeline.finish_s[s], tails[s])
        stage.transfers(spans, len(chunks), send_s, record.get("p2p_bytes"))
        slices.extend(stage.layout.slices)
        tracks.extend(stage.tracks(axes))
    return Timeline(slices=tuple(slices), tracks=tuple(tracks), end_s=timeline.step_s,
                    metadata={"model": plan.model, "schedule": record["schedule"],
                              "stages": p, "micro_batches": m,
                              "step_s": plan.objective.total_s})


class _Stage:
    """One stage's layout: its tasks, its tail and the transfers it sends."""

    def __init__(self, stage: int, stages: int, micro_batches: int, rows: StageRows | None,
                 split: bool) -> None:
        self.stage, self.stages, self.m, self.split = stage, stages, micro_batches, split
        self.layout = Layout(process=f"stage {stage}")
        self.pp = self.layout.axis(PP_AXIS)
        self.ops = [] if rows is None else [r for r in rows.ops if r.stage == stage]
        self.reshards = [] if rows is None else [r for r in rows.reshards if r.stage == stage]
        where = {op.name: (op.chunk, self._group(op.phase)) for op in self.ops}
        self.compute_s = {op.name: op.record.compute_s for op in self.ops}
        # hidden behind an op that runs in another task than the one it is charged to (a
        # gradient reduction into the optimizer, behind the backward op that made it)
        self.crossing = [r for r in self.reshards if _hider(r) is not None
                         and where.get(_hider(r) or "") != (r.chunk, self._group(r.phase))]

    def _group(self, phase: str) -> str:
        """The task a phase's work runs in: F, B (W when the schedule splits it) or the
        tail."""
        return {"forward": "F", "backward": "B", "tail": "T",
                "weight": "W" if self.split else "B"}[phase]

    def _runs(self, row: StageOp | StageReshard, micro: int) -> bool:
        """Whether a per-micro-batch row runs in micro-batch ``micro`` (its last
        ``count``)."""
        return micro >= self.m - row.record.count

    # ---- tasks ---------------------------------------------------------------------------
    def task(self, task: Task, start: float, end: float) -> None:
        chunk = task.chunk * self.stages + self.stage
        self.layout.mark(self.layout.step, f"{NAMES[task.kind]} mb {task.micro}", start, end,
                         Category.COMPUTE, {"micro_batch": task.micro, "chunk": chunk})
        group = task.kind.value
        ops = [op for op in self.ops if op.chunk == chunk and self._group(op.phase) == group
               and self._runs(op, task.micro)]
        if task.kind is not Kind.F:  # the backward runs the layers in reverse
            ops.sort(key=lambda op: -op.order)
        here = [r for r in self.reshards if r.chunk == chunk and self._runs(r, task.micro)]
        reshards = [r for r in here if self._group(r.phase) == group and r not in self.crossing]
        waits = [r for r in here if self._group(r.phase) == group and r in self.crossing]
        beside = [r for r in self.crossing if self._runs(r, task.micro)]
        self.layout.now = start
        self._run(ops, reshards, beside, waits,
                  {"micro_batch": task.micro, "chunk": chunk})

    def tail(self, start: float, seconds: float) -> None:
        """The gradient sync and optimizer after the last task."""
        self.layout.mark(self.layout.step, "gradient sync + optimizer", start, start + seconds,
                         Category.STEP, {})
        ops = [op for op in self.ops if op.phase == "tail" for _ in range(op.record.count)]
        tail = [r for r in self.reshards if r.phase == "tail"]
        expanded = [r for r in tail for _ in range(r.record.count)]
        self.layout.now = start
        self._run(ops, [r for r in expanded if r not in self.crossing], [],
                  [r for r in expanded if r in self.crossing], {})

    def _run(self, ops: Sequence[StageOp], reshards: Sequence[StageReshard],
             beside: Sequence[StageReshard], waits: Sequence[StageReshard],
             context: Mapping[str, Any]) -> None:
        """First the ``waits`` (what the reductions hidden in another task did not hide),
        then ``ops`` in order, each with the exposed ``reshards`` it reads before it, those
        hidden behind it beside it, and ``beside`` (charged elsewhere) beside it without
        delaying it; exposed reshards no op here reads after their producer; the rest
        last."""
        for row in waits:
            record = row.record
            busiest = max(axis_seconds(record).values(), default=0.0)
            cover = record.cover * self.compute_s.get(_hider(row) or "", 0.0)
            self.layout.now += max(0.0, busiest - cover)
            self.layout.local_steps(record, {**reshard_args(record), **context,
                                             "phase": row.phase})
        names = {op.name for op in ops}
        placed: set[int] = set()
        for op in ops:
            for i, row in enumerate(reshards):
                if i not in placed and _hider(row) is None and op.name in row.record.consumers:
                    placed.add(i)
                    self.layout.exposed(row.record, {**context, "phase": row.phase})
            hidden = [(i, row) for i, row in enumerate(reshards)
                      if i not in placed and _hider(row) == op.name]
            placed.update(i for i, _ in hidden)
            start = self.layout.now
            self.layout.op(_info(op), [row.record for _, row in hidden],
                           {**context, "phase": op.phase})
            alongside = [row for row in beside if _hider(row) == op.name]
            if alongside:
                self.layout.streams(start, [(row.record, {**reshard_args(row.record),
                                                          **context, "phase": row.phase,
                                                          "hides_behind": op.name})
                                            for row in alongside])
            for i, row in enumerate(reshards):
                if i not in placed and _hider(row) is None \
                        and row.record.producer == op.name \
                        and not any(name in names for name in row.record.consumers):
                    placed.add(i)
                    self.layout.exposed(row.record, {**context, "phase": row.phase})
        for i, row in enumerate(reshards):
            if i not in placed:
                self._leftover(row.record, {**context, "phase": row.phase})

    def _leftover(self, record: ReshardRecord, args: Mapping[str, Any]) -> None:
        """A reshard whose ops do not run here: exposed, or its unhidden part."""
        target = record.overlap.removeprefix("op ") if record.overlap.startswith("op ") else ""
        if not target:
            self.layout.exposed(record, args)
            return
        start = self.layout.now
        self.layout.streams(start, [(record, {**reshard_args(record), **args})])
        busiest = max(axis_seconds(record).values(), default=0.0)
        cover = record.cover * self.compute_s.get(target, 0.0)
        self.layout.now = start + max(0.0, busiest - cover)
        self.layout.local_steps(record, {**reshard_args(record), **args})

    # ---- transfers -----------------------------------------------------------------------
    def transfers(self, spans: Sequence[tuple[Task, float, float]], virtual: int,
                  send_s: float, nbytes: float | None) -> None:
        """The activations and gradients this stage sends: after a forward of any virtual
        stage but the last, to the next; after a backward of any but the first, back."""
        if self.stages < 2:
            return
        for task, _, end in spans:
            k = task.chunk * self.stages + self.stage
            if task.kind is Kind.F and k < virtual - 1:
                what, to = "activation", (k + 1) % self.stages
            elif task.kind is Kind.B and k > 0:
                what, to = "gradient", (k - 1) % self.stages
            else:
                continue
            args = {"micro_batch": task.micro, "chunk": k, "to_stage": to,
                    "collective": "collective_permute", "axes": PP_AXIS,
                    **({} if nbytes is None else {"bytes": nbytes})}
            self.layout.add(self.pp, f"send {what} mb {task.micro} to stage {to}", end,
                            send_s, Category.P2P, args)

    def tracks(self, axes: Sequence[str]) -> list[Track]:
        """Display order: step, compute, the mesh axes in mesh order, pp; tracks that got
        no slice are left out."""
        used = {piece.track for piece in self.layout.slices}
        order = [self.layout.step, self.layout.compute,
                 *(self.layout.axis(a) for a in axes), self.pp]
        extra = sorted(used - set(order))
        return [t for t in order if t in used] + extra


def _hider(row: StageReshard) -> str | None:
    """The op a reshard hides behind (op overlap model), else None (exposed; the layer
    model's windows are priced as exposed inside a pipeline, :func:`layer_costs`)."""
    overlap = row.record.overlap
    return overlap.removeprefix("op ") if overlap.startswith("op ") else None


def _info(op: StageOp) -> OpInfo:
    phase = phase_of(Op(name=op.name, kind=op.record.kind, inputs=(), outputs=()))
    return OpInfo(name=op.name, record=op.record, phase=phase, layer=None, slot="")


__all__ = ["pipeline_timeline"]
