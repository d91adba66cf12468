"""Where each record of a saved plan belongs in a step, read from the records alone.

An op's phase comes from its kind and name (:func:`autoshard.planning.step.phase_of`): forward
and backward ops run once per micro-batch, optimizer ops once per step after the last one, and
its runs per step are :func:`autoshard.planning.step.node_counts`'s.
Every reshard record is anchored to the op (or layer window) it runs with:

* ``overlap == "op H"``: beside op ``H`` (a gather beside the op it feeds, a gradient
  reduction beside the op that produced it), in ``H``'s last ``count`` runs;
* ``overlap == "layer fwd 3"``: in that window, every micro-batch (``count`` = micro-batches)
  or only the last (once-per-step traffic);
* exposed (``""``): before its consumer when the consumer runs every micro-batch or the
  producer does not (activations, parameters into the optimizer), otherwise after its producer
  (a gradient reduction into the optimizer, a graph output's reduction, an updated value
  moved back for the next step), in the anchor's last ``count`` runs.

Counts that no anchor can run (a reshard run three times per step beside an op that runs
twice) make a :class:`~autoshard.errors.TimelineError` naming the record: such a plan.json was
edited or is inconsistent, and no schedule of it could add up to its objective.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from autoshard.errors import TimelineError
from autoshard.planning.layers import layer_of
from autoshard.planning.record import OpRecord, Plan, ReshardRecord
from autoshard.planning.step import (
    STORED_KINDS,
    Phase,
    node_counts,
    phase_of,
    slot_label,
    slot_of,
)
from graphs import Op


@dataclass(frozen=True, slots=True, kw_only=True)
class OpInfo:
    """One op of the plan: its record, phase, layer index (None outside the layers) and the
    label of its (phase, layer) window."""

    name: str
    record: OpRecord
    phase: Phase
    layer: int | None
    slot: str

    @property
    def per_micro_batch(self) -> bool:
        return self.phase is not Phase.OPTIMIZER


@dataclass(frozen=True, slots=True, kw_only=True)
class Anchors:
    """Reshard records by where they run: ``before``/``after``/``beside`` an op (by name),
    in a layer ``window`` (by label), or at the end of the step (``tail``: no op runs them)."""

    before: dict[str, list[ReshardRecord]]
    after: dict[str, list[ReshardRecord]]
    beside: dict[str, list[ReshardRecord]]
    window: dict[str, list[ReshardRecord]]
    tail: list[ReshardRecord]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepView:
    """A plan read as a step: ``micro_batches``, its ops in plan (topological) order and its
    reshards anchored."""

    micro_batches: int
    ops: tuple[OpInfo, ...]
    anchors: Anchors

    @classmethod
    def of(cls, plan: Plan) -> StepView:
        m = int(plan.objective.micro_batches)
        if m < 1:
            raise TimelineError(f"the plan has {m} micro-batches", item="objective")
        ops = tuple(_op_info(name, record, m) for name, record in plan.ops.items())
        return cls(micro_batches=m, ops=ops, anchors=_anchor(plan.reshards, ops, m))


def _op_info(name: str, record: OpRecord, m: int) -> OpInfo:
    op = Op(name=name, kind=record.kind, inputs=(), outputs=())
    phase = phase_of(op)
    expected = node_counts([op], m)[0]
    # parameters and optimizer state hold values and cost nothing: plans saved before they
    # were counted once per step counted them per micro-batch, which lays out the same
    allowed = {expected, m} if op.kind in STORED_KINDS else {expected}
    if record.count not in allowed:
        raise TimelineError(f"op {name} ({phase.value}) runs {record.count} times per step, "
                            f"expected {expected} with {m} micro-batches", item=name)
    found = layer_of(name)
    return OpInfo(name=name, record=record, phase=phase,
                  layer=None if found is None else found[0], slot=slot_label(slot_of(op)))


def _anchor(reshards: tuple[ReshardRecord, ...], ops: tuple[OpInfo, ...], m: int) -> Anchors:
    by_name = {op.name: op for op in ops}
    anchors = Anchors(before=defaultdict(list), after=defaultdict(list),
                      beside=defaultdict(list), window=defaultdict(list), tail=[])
    kinds = {r.overlap.split(" ", 1)[0] for r in reshards if r.overlap}
    if len(kinds) > 1:
        raise TimelineError("the reshards mix the op and layer overlap models",
                            item=", ".join(sorted(kinds)))
    for record in reshards:
        _place(record, by_name, anchors, m)
    return Anchors(before=dict(anchors.before), after=dict(anchors.after),
                   beside=dict(anchors.beside), window=dict(anchors.window),
                   tail=anchors.tail)


def _place(record: ReshardRecord, by_name: dict[str, OpInfo], anchors: Anchors,
           m: int) -> None:
    where = f"reshard of {record.tensor} ({record.producer} -> {record.consumer})"
    if record.count < 1:
        raise TimelineError(f"{where} runs {record.count} times per step", item=where)
    kind, _, target = record.overlap.partition(" ")
    if kind == "op":
        hider = by_name.get(target)
        if hider is None:
            raise TimelineError(f"{where} hides behind op {target!r}, which the plan does not "
                                "have", item=where)
        _check_runs(record, hider, m, where)
        anchors.beside[target].append(record)
    elif kind == "layer":
        if record.count not in (1, m):
            raise TimelineError(f"{where} runs {record.count} times per step in window "
                                f"{record.overlap!r}: every micro-batch ({m}) or once",
                                item=where)
        anchors.window[record.overlap].append(record)
    elif record.overlap:
        raise TimelineError(f"{where} has an unknown overlap {record.overlap!r}", item=where)
    else:
        _place_exposed(record, by_name, anchors, m, where)


def _place_exposed(record: ReshardRecord, by_name: dict[str, OpInfo], anchors: Anchors,
                   m: int, where: str) -> None:
    consumer, producer = by_name.get(record.consumer), by_name.get(record.producer)
    if consumer is not None and (consumer.per_micro_batch or producer is None
                                 or not _runs_ops(producer)):
        _check_runs(record, consumer, m, where)
        anchors.before[consumer.name].append(record)
    elif producer is not None and _runs_ops(producer):
        _check_runs(record, producer, m, where)
        anchors.after[producer.name].append(record)
    elif consumer is not None:
        _check_runs(record, consumer, m, where)
        anchors.before[consumer.name].append(record)
    else:
        anchors.tail.append(record)


def _runs_ops(op: OpInfo) -> bool:
    """Ops that do work (not parameters, inputs or optimizer state, which only hold values)."""
    return op.phase is not Phase.SOURCE


def _check_runs(record: ReshardRecord, anchor: OpInfo, m: int, where: str) -> None:
    runs = m if anchor.per_micro_batch else 1
    if record.count > runs:
        raise TimelineError(f"{where} runs {record.count} times per step but runs with "
                            f"{anchor.name}, which runs {runs}", item=where)


__all__ = ["Anchors", "OpInfo", "StepView"]
