"""The timeline of one pipelined training step, simulated task by task.

Each stage runs its tasks (:func:`.schedules.stage_orders`) one after another, each as soon as
the stage is free and its inputs have arrived: the forward of virtual stage ``k`` needs the
forward of ``k - 1`` plus the activation's point-to-point transfer, the backward of ``k``
needs the backward of ``k + 1`` plus the gradient's transfer (the last virtual stage's
backward needs only its own forward), a split W needs its B. Transfers run on the ``pp`` link
beside compute (frameworks post them as asynchronous send/recv), so they delay the receiver,
never occupy the sender. After its last task a stage runs its tail (the data-parallel gradient
sync of its layers, then its optimizer step); the step ends when the last tail does.

Unequal stage times, warm-up and cool-down fall out of the timeline; nothing uses a bubble
formula. The closed forms (bubble ``(p-1)/(m+p-1)`` for GPipe and 1F1B,
``(p-1)/(v·m+p-1)`` interleaved, a third of 1F1B's for ZB-H1) are what the tests check it
against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autoshard.planning.pipeline.schedules import Kind, Schedule, Task, stage_orders


@dataclass(frozen=True, slots=True)
class ChunkCost:
    """Seconds of one micro-batch through one model chunk (a virtual stage): forward, the
    backward's input-gradient part and its weight-gradient part (``backward_s + weight_s`` is
    the whole backward), and ``send_s``, the transfer of its output activation to the next
    virtual stage (the gradient coming back is the same size and takes as long)."""

    forward_s: float
    backward_s: float
    weight_s: float = 0.0
    send_s: float = 0.0


@dataclass(frozen=True, slots=True)
class Timeline:
    """A simulated step. Per physical stage: busy seconds, the end of its last task, its
    peak count of micro-batch chunks whose forward ran and whose backward has not (the
    activations it holds), and each task's (start, end)."""

    schedule: Schedule
    step_s: float
    busy_s: tuple[float, ...]
    finish_s: tuple[float, ...]
    peak_in_flight: tuple[int, ...]
    spans: tuple[tuple[tuple[Task, float, float], ...], ...]

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the stages' time up to the end of their compute (tails excluded)."""
        end = max(self.finish_s)
        if end <= 0:
            return 0.0
        return 1.0 - sum(self.busy_s) / (len(self.busy_s) * end)


def simulate(schedule: Schedule, chunks: Sequence[ChunkCost], micro_batches: int,
             stages: int, tail_s: Sequence[float] | None = None) -> Timeline:
    """Run ``schedule`` over ``len(chunks)`` virtual stages on ``stages`` devices (virtual
    stage ``k`` on stage ``k mod stages``), ``micro_batches`` per step.

    >>> equal = [ChunkCost(1.0, 2.0)] * 4
    >>> t = simulate(Schedule.ONE_F_ONE_B, equal, 8, 4)
    >>> t.step_s, round(t.bubble_fraction, 4), t.peak_in_flight
    (33.0, 0.2727, (4, 3, 2, 1))
    """
    virtual = len(chunks)
    if virtual % stages:
        raise ValueError(f"{virtual} chunks do not spread evenly over {stages} stages")
    orders = stage_orders(schedule, stages, micro_batches, virtual // stages)
    run = _Run(schedule, chunks, stages, orders)
    while not run.done():
        run.advance()
    tails = list(tail_s) if tail_s is not None else [0.0] * stages
    busy = tuple(sum(e - b for _, b, e in stage) for stage in run.spans)
    return Timeline(schedule=schedule,
                    step_s=max(f + t for f, t in zip(run.free, tails, strict=True)),
                    busy_s=busy, finish_s=tuple(run.free),
                    peak_in_flight=tuple(_peak_in_flight(o) for o in orders),
                    spans=tuple(tuple(stage) for stage in run.spans))


class _Run:
    """The simulation's state: per stage the next ordered task, when it is free, the Ws
    waiting (split backward only) and what ran when."""

    def __init__(self, schedule: Schedule, chunks: Sequence[ChunkCost], stages: int,
                 orders: tuple[tuple[Task, ...], ...]):
        self.schedule, self.chunks, self.stages, self.orders = schedule, chunks, stages, orders
        self.split = schedule.splits_backward
        self.end: dict[tuple[Kind, int, int], float] = {}
        self.spans: list[list[tuple[Task, float, float]]] = [[] for _ in range(stages)]
        self.free = [0.0] * stages
        self.cursor = [0] * stages
        self.waiting: list[list[Task]] = [[] for _ in range(stages)]

    def done(self) -> bool:
        return all(c == len(o) for c, o in zip(self.cursor, self.orders, strict=True)) \
            and not any(self.waiting)

    def advance(self) -> None:
        """Run one task on the stage that is free earliest among those that can decide: a
        waiting W when more than ``s`` Ws wait on stage ``s`` (ZB-H1 defers the last
        stage's W by ``p - 1`` micro-batches, the first stage's not at all: with the
        ``p - s`` forwards in flight no stage holds more than 1F1B's first), else its next
        ordered task if its inputs are there by then, else a waiting W (it cannot delay that
        task: no producer is free before this stage), else the ordered task once its inputs
        arrive."""
        for s in sorted(range(self.stages), key=lambda x: (self.free[x], x)):
            order = self.orders[s]
            if self.cursor[s] == len(order):
                if self.waiting[s]:
                    self._start(s, self.waiting[s].pop(0), self.free[s])
                    return
                continue
            task = order[self.cursor[s]]
            ready = self._ready(task, task.chunk * self.stages + s)
            idle = ready is None or ready > self.free[s]
            if self.waiting[s] and (idle or len(self.waiting[s]) > s):
                self._start(s, self.waiting[s].pop(0), self.free[s])
                return
            if ready is not None:
                self.cursor[s] += 1
                self._start(s, task, max(ready, self.free[s]))
                return
        raise AssertionError(f"the {self.schedule.value} orders deadlock at {self.cursor}")

    def _start(self, s: int, task: Task, start: float) -> None:
        k = task.chunk * self.stages + s
        cost = self.chunks[k]
        duration = {Kind.F: cost.forward_s, Kind.W: cost.weight_s,
                    Kind.B: cost.backward_s + (0.0 if self.split else cost.weight_s)}
        self.free[s] = start + duration[task.kind]
        self.end[(task.kind, k, task.micro)] = self.free[s]
        self.spans[s].append((task, start, self.free[s]))
        if self.split and task.kind is Kind.B:
            self.waiting[s].append(Task(Kind.W, task.micro, task.chunk))

    def _ready(self, task: Task, k: int) -> float | None:
        """When ``task``'s inputs are on its stage, or None while a producer has not run."""
        if task.kind is Kind.F:
            if k == 0:
                return 0.0
            key, hop = (Kind.F, k - 1, task.micro), self.chunks[k - 1].send_s
        elif k == len(self.chunks) - 1:
            key, hop = (Kind.F, k, task.micro), 0.0
        else:
            key, hop = (Kind.B, k + 1, task.micro), self.chunks[k].send_s
        if key not in self.end:
            return None
        return self.end[key] + (hop if self.stages > 1 else 0.0)


def held_bytes(spans: Sequence[tuple[Task, float, float]], activation_bytes: float,
               residual_bytes: float) -> float:
    """Peak bytes one stage holds for its micro-batches, walking its tasks as they ran: a
    forward saves ``activation_bytes``; a whole backward frees them; a split backward's B
    frees them but keeps ``residual_bytes`` (what its W reads: the weight-gradient GEMMs'
    saved inputs and output gradients, Qi et al. 2023 §2.1 and Table 1: ``M_W``) until its W
    runs. So a stage that defers Ws (ZB-H1: stage ``s`` up to ``s``) holds more than under
    1F1B.

    >>> from autoshard.planning.pipeline.schedules import Schedule
    >>> zb = simulate(Schedule.ZB_H1, [ChunkCost(1.0, 1.0, 1.0)] * 4, 8, 4)
    >>> [held_bytes(spans, 10.0, 4.0) for spans in zb.spans]  # (p - s)·10 + deferred·4
    [40.0, 34.0, 28.0, 22.0]
    """
    held = peak = 0.0
    for task, _, _ in spans:
        if task.kind is Kind.F:
            held += activation_bytes
        elif task.kind is Kind.B:
            residual = residual_bytes if _splits(spans) else 0.0
            held += residual - activation_bytes
        else:
            held -= residual_bytes
        peak = max(peak, held)
    return peak


def _splits(spans: Sequence[tuple[Task, float, float]]) -> bool:
    return any(task.kind is Kind.W for task, _, _ in spans)


def peak_deferred(spans: Sequence[tuple[Task, float, float]]) -> int:
    """Most micro-batch chunks whose B ran and whose W has not, on one stage."""
    waiting = peak = 0
    for task, _, _ in spans:
        waiting += 1 if task.kind is Kind.B and _splits(spans) else 0
        waiting -= 1 if task.kind is Kind.W else 0
        peak = max(peak, waiting)
    return peak


def _peak_in_flight(order: Sequence[Task]) -> int:
    """Most chunk-micro-batches held between their forward and backward (a split backward
    frees the activations at B; W keeps only the layer inputs, Qi et al. 2023 Table 1)."""
    held = peak = 0
    for task in order:
        if task.kind is Kind.F:
            held += 1
            peak = max(peak, held)
        elif task.kind is Kind.B:
            held -= 1
    return peak


def in_flight(schedule: Schedule, stages: int, micro_batches: int,
              chunks: int = 1) -> tuple[int, ...]:
    """Per stage, the most chunk-micro-batches the schedule's order keeps between forward and
    backward (timing-free: a stage's order alone fixes it).

    >>> in_flight(Schedule.ONE_F_ONE_B, 4, 8), in_flight(Schedule.GPIPE, 4, 8)
    ((4, 3, 2, 1), (8, 8, 8, 8))
    """
    return tuple(_peak_in_flight(o)
                 for o in stage_orders(schedule, stages, micro_batches, chunks))
