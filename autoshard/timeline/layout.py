"""Placing one stage's work on its tracks: the compute stream, one track per mesh axis.

A :class:`Layout` keeps ``now``, the time the compute stream is free, and appends slices:

* :meth:`exposed`: a reshard the compute waits for. Its collectives run one after the other;
  each holds every mesh axis it spans at once (it appears on each of their tracks at the same
  time), and its local steps (slices, copies in HBM) run on the compute track.
* :meth:`op`: an op's compute, then its intra-op collectives (exposed). Reshards hidden
  behind the op (:mod:`autoshard.planning.overlap_op`) start when its compute starts, one after
  another: each has its share of the op's compute (``ReshardRecord.cover``) and takes the
  longer of that share and its busiest axis, the window the op model prices it in. Inside it,
  the reshard's steps run pipelined across their axes (:mod:`.chain`: staggered, each axis one
  step at a time, the chain as long as its busiest axis). The compute stream moves on after
  the op's compute plus what each hidden reshard's busiest axis exceeds its share by: exactly
  the seconds the op model charges. (A plan written before the shares existed gave each
  reshard the op's whole compute; its reshards start together, as it priced them.)
* :meth:`window`: the layer model's window (:mod:`autoshard.planning.overlap_layer`): its
  ops' compute on the compute track and its records' chains on the axis tracks, all from the
  window's start; the window lasts its busiest stream.

The model charges per axis, not per collective: a collective over two axes holds both at once
when the chain can be drawn that way; otherwise (:mod:`.chain`'s last resort) each axis's
share is laid out on its own track and the two tracks may show it at different times. That is
what the model counts; a real collective over two axes would need both at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from autoshard.planning.record import CollectiveRecord, ReshardRecord
from autoshard.planning.step import LOCAL_KINDS, Phase, axis_seconds
from autoshard.timeline.anchors import OpInfo
from autoshard.timeline.chain import chain_starts
from autoshard.timeline.slices import Category, Slice, Track


class Layout:
    """The slices of one stage laid out so far; ``now`` is when its compute stream is free."""

    def __init__(self, process: str) -> None:
        self.process = process
        self.compute = Track(process, "compute")
        self.step = Track(process, "step")
        self.windows = Track(process, "windows")
        self.now = 0.0
        self.slices: list[Slice] = []

    def axis(self, name: str) -> Track:
        return Track(self.process, name)

    def on(self, track: Track) -> list[Slice]:
        """The slices laid out on ``track`` so far, in layout order."""
        return [s for s in self.slices if s.track == track]

    def add(self, track: Track, name: str, start_s: float, seconds: float,
            category: Category, args: Mapping[str, Any]) -> float:
        """Append one slice; return when it ends."""
        end = start_s + seconds
        self.slices.append(Slice(track=track, name=name, start_s=start_s, end_s=end,
                                 category=category, args=dict(args)))
        return end

    # ---- exposed work ----------------------------------------------------------------------
    def exposed(self, record: ReshardRecord, context: Mapping[str, Any]) -> None:
        """A reshard the compute waits for, its collectives one after the other."""
        self.collectives(record.collectives, {**reshard_args(record), **context},
                         Category.EXPOSED)

    def collectives(self, collectives: Iterable[CollectiveRecord], args: Mapping[str, Any],
                    category: Category) -> None:
        for collective in collectives:
            merged = {**args, **collective_args(collective)}
            name = f"{collective.kind} {args.get('tensor', args.get('op', ''))}".strip()
            if collective.kind in LOCAL_KINDS or not collective.axes:
                self.now = self.add(self.compute, name, self.now, collective.seconds,
                                    Category.LOCAL, merged)
                continue
            for axis in collective.axes:
                self.add(self.axis(axis), name, self.now, collective.seconds, category, merged)
            self.now += collective.seconds

    # ---- ops -----------------------------------------------------------------------------
    def op(self, op: OpInfo, hidden: list[ReshardRecord], context: Mapping[str, Any]) -> None:
        """An op with the reshards hidden behind it (op overlap model), then its intra-op
        collectives."""
        start, compute_s = self.now, op.record.compute_s
        if not _is_idle_source(op):
            self.add(self.compute, op.name, start, compute_s, Category.COMPUTE,
                     {**op_args(op), **context})
        together = sum(r.cover for r in hidden) > 1.0 + 1e-9  # a plan priced before shares
        stall, cursor, ends = 0.0, start, [start + compute_s]
        for record in hidden:
            args = {**reshard_args(record), **context, **layer_arg(op), "hides_behind": op.name}
            ends.extend(self.streams(start if together else cursor, [(record, args)]).values())
            busiest = max(axis_seconds(record).values(), default=0.0)
            cover = record.cover * compute_s
            stall += max(0.0, busiest - cover)
            cursor += max(busiest, cover)
        # the model's seconds; the max only absorbs rounding (the streams end by then)
        self.now = max(start + compute_s + stall, *ends)
        for record in hidden:
            self.local_steps(record, {**reshard_args(record), **context, **layer_arg(op)})
        self.intra_op(op, context)

    def window(self, label: str, members: list[OpInfo],
               records: list[tuple[ReshardRecord, bool]], context: Mapping[str, Any]) -> None:
        """A layer-model window: ``members``' compute and ``records``' collectives (each with
        whether it runs every micro-batch) side by side from ``now``; it lasts its busiest
        stream (:func:`window_seconds`). Then the records' local steps and the members'
        intra-op collectives, exposed."""
        start = cursor = self.now
        for op in members:
            cursor = self.add(self.compute, op.name, cursor, op.record.compute_s,
                              Category.COMPUTE, {**op_args(op), **context})
        where = {**context, **({} if not members else layer_arg(members[0])),
                 "window": label}
        ends = self.streams(start, [(r, {**reshard_args(r), **where}) for r, _ in records])
        seconds = window_seconds(sum_compute(members), records)
        self.mark(self.windows, label, start, start + seconds, Category.WINDOW,
                  {**where, "compute_s": sum_compute(members),
                   **{f"{axis}_s": end - start for axis, end in sorted(ends.items())}})
        self.now = max(start + seconds, cursor, *ends.values())
        for record, _ in records:
            self.local_steps(record, {**reshard_args(record), **where})
        for op in members:
            self.intra_op(op, context)

    def intra_op(self, op: OpInfo, context: Mapping[str, Any]) -> None:
        """The op's own collectives (its ``comm_s``), exposed; a plan.json without their list
        gets one slice of ``comm_s`` on the compute track."""
        record = op.record
        args = {"op": op.name, "kind": record.kind, "strategy": record.strategy, **context}
        if record.intra_op:
            self.collectives(record.intra_op, args, Category.INTRA_OP)
        elif record.comm_s > 0:
            self.now = self.add(self.compute, f"intra-op collectives {op.name}", self.now,
                                record.comm_s, Category.INTRA_OP, args)

    def local_steps(self, record: ReshardRecord, args: Mapping[str, Any]) -> None:
        """An overlapped reshard's local steps: exposed, on the compute track."""
        local = [c for c in record.collectives if c.kind in LOCAL_KINDS]
        self.collectives(local, args, Category.LOCAL)

    def streams(self, start_s: float,
                records: list[tuple[ReshardRecord, Mapping[str, Any]]]) -> dict[str, float]:
        """Overlapped reshards from ``start_s``, each a chain pipelined across its axes
        (:func:`.chain.chain_starts`: one step per axis at a time, all within the busiest
        axis's seconds); return when each axis's stream ends."""
        chains = [[c for c in record.collectives if c.kind not in LOCAL_KINDS and c.axes]
                  for record, _ in records]
        ends: dict[str, float] = {}
        for (record, args), chain, starts in zip(records, chains,
                                                 chain_starts(chains, start_s), strict=True):
            for collective, begins in zip(chain, starts, strict=True):
                merged = {**args, **collective_args(collective)}
                for axis, begin in begins.items():
                    end = self.add(self.axis(axis), f"{collective.kind} {record.tensor}",
                                   begin, collective.seconds, Category.OVERLAPPED, merged)
                    ends[axis] = max(ends.get(axis, start_s), end)
        return ends

    # ---- marks -----------------------------------------------------------------------------
    def mark(self, track: Track, name: str, start_s: float, end_s: float, category: Category,
             args: Mapping[str, Any]) -> None:
        """A slice spanning work already laid out (a micro-batch, a window)."""
        self.slices.append(Slice(track=track, name=name, start_s=start_s, end_s=end_s,
                                 category=category, args=dict(args)))


def window_seconds(compute_s: float, records: list[tuple[ReshardRecord, bool]]) -> float:
    """How long a window lasts: the longest of its compute and each mesh axis's collectives,
    summed as :func:`autoshard.planning.overlap_layer.layer_seconds` sums them (per-step
    traffic on top of the per-micro-batch traffic), so the seconds are the model's to the
    last bit."""
    every: dict[str, float] = {}
    once: dict[str, float] = {}
    for record, each_micro_batch in records:
        target = every if each_micro_batch else once
        for axis, seconds in axis_seconds(record).items():
            target[axis] = target.get(axis, 0.0) + seconds
    streams = {a: every.get(a, 0.0) + once.get(a, 0.0) for a in {*every, *once}}
    return max(compute_s, *streams.values(), 0.0)


def sum_compute(ops: list[OpInfo]) -> float:
    total = 0.0
    for op in ops:
        total += op.record.compute_s
    return total


def _is_idle_source(op: OpInfo) -> bool:
    """Parameters, inputs and optimizer state hold values and cost nothing: no slice."""
    record = op.record
    return op.phase is Phase.SOURCE and not record.compute_s and not record.comm_s


def layer_arg(op: OpInfo) -> dict[str, Any]:
    return {} if op.layer is None else {"layer": op.layer}


def op_args(op: OpInfo) -> dict[str, Any]:
    record = op.record
    shapes = " ".join("x".join(map(str, s)) or "scalar" for s in record.local_inputs)
    return {"op": op.name, "kind": record.kind, "strategy": record.strategy,
            "flops": record.flops, "phase": op.phase.value,
            **({} if op.layer is None else {"layer": op.layer}),
            "local_inputs": shapes, "runs_per_step": record.count}


def reshard_args(record: ReshardRecord) -> dict[str, Any]:
    return {"tensor": record.tensor, "producer": record.producer,
            "consumer": record.consumer, "src": " ".join(record.src),
            "dst": " ".join(record.dst), "overlap": record.overlap,
            "runs_per_step": record.count}


def collective_args(collective: CollectiveRecord) -> dict[str, Any]:
    return {"collective": collective.kind, "bytes": collective.bytes,
            "group_size": collective.group_size, "axes": ",".join(collective.axes)}


__all__ = ["Layout", "collective_args", "layer_arg", "op_args", "reshard_args",
           "sum_compute", "window_seconds"]
