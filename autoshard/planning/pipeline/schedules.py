"""Pipeline schedules as the order in which each stage runs its per-micro-batch tasks.

A schedule is, per stage, a fixed sequence of tasks: ``F`` (forward of one micro-batch through
one model chunk), ``B`` (its backward; for the zero-bubble schedule only the input-gradient
half) and ``W`` (the weight-gradient half, zero-bubble only). The timeline follows from these
orders and the data dependencies (:mod:`.simulate`); nothing here knows any durations.

The orders are the ones frameworks run:

* GPipe (Huang et al. 2019, arXiv:1811.06965): every forward, then every backward; all ``m``
  micro-batches' activations are live at the turn. torch ``ScheduleGPipe``.
* 1F1B (PipeDream-Flush, Narayanan et al. 2021, arXiv:2104.04473 §2.2): stage ``s`` of ``p``
  runs ``p - s - 1`` warm-up forwards, then alternates one forward and one backward, then
  drains the backwards; at most ``p - s`` micro-batches are in flight on stage ``s``.
  Megatron-LM ``forward_backward_pipelining_without_interleaving`` and torch
  ``Schedule1F1B`` (megatron/core/pipeline_parallel/schedules.py at NVIDIA/Megatron-LM
  4dabc62385799f8256fb05ccf3dfd4a7218781bd; torch/distributed/pipelining/schedules.py at
  pytorch/pytorch 1fd7abc2f521e4429a29c3088e39ebaca20f4698).
* Interleaved 1F1B (Narayanan et al. 2021 §2.2.2): each stage holds ``v`` model chunks,
  chunk ``c`` of stage ``s`` being virtual stage ``c·p + s``; warm-up is
  ``2(p - s - 1) + (v - 1)·p`` chunk-forwards, micro-batches go round in groups of ``p``
  (Megatron's ``get_model_chunk_id``: chunk ``(k mod p·v) div p``, reversed for backward).
  Megatron requires ``m`` to be a multiple of ``p``.
* ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241 §2.1): 1F1B's
  order of F and B with the backward split into B (input gradients, on the critical path) and
  W (weight gradients, needed only by the optimizer). The orders here hold F and B only; the
  simulator places each W where the stage would otherwise wait, and at the latest when more
  than ``s`` Ws wait on stage ``s`` (the paper's Figure 3: the last stage defers its Ws by
  ``p - 1`` micro-batches, the first not at all): B passes reach the earlier
  stages sooner, deferred Ws fill warm-up and cool-down, the in-flight count stays 1F1B's.
  With equal F, B, W times its bubble is a third of 1F1B's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from autoshard.errors import PipelineError


@enum.unique
class Schedule(enum.Enum):
    """The pipeline schedules the planner prices; values are the ``--schedule`` names."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZB_H1 = "zb-h1"

    def __repr__(self) -> str:
        return f"Schedule.{self.name}"

    @property
    def splits_backward(self) -> bool:
        """Whether the backward runs as separate B (inputs) and W (weights) tasks."""
        return self is Schedule.ZB_H1

    @property
    def torch_class(self) -> str:
        """The ``torch.distributed.pipelining`` schedule class that runs this order."""
        return {Schedule.GPIPE: "ScheduleGPipe", Schedule.ONE_F_ONE_B: "Schedule1F1B",
                Schedule.INTERLEAVED: "ScheduleInterleaved1F1B",
                Schedule.ZB_H1: "ScheduleInterleavedZeroBubble"}[self]


@enum.unique
class Kind(enum.Enum):
    """F: forward; B: backward (input gradients, and weight gradients unless split); W:
    weight gradients of a split backward."""

    F = "F"
    B = "B"
    W = "W"


@dataclass(frozen=True, slots=True)
class Task:
    """One unit of work of one stage: ``kind`` of micro-batch ``micro`` through ``chunk``."""

    kind: Kind
    micro: int
    chunk: int = 0

    def __str__(self) -> str:
        suffix = f".{self.chunk}" if self.chunk else ""
        return f"{self.kind.value}{self.micro}{suffix}"


def parse_schedule(name: str | Schedule) -> Schedule:
    """``--schedule`` text to a :class:`Schedule` (``auto`` is the caller's business)."""
    if isinstance(name, Schedule):
        return name
    try:
        return Schedule(name)
    except ValueError:
        choices = ", ".join(s.value for s in Schedule)
        raise PipelineError(f"unknown schedule {name!r}; choose one of {choices} or auto",
                            schedule=name) from None


def check_micro_batches(schedule: Schedule, stages: int, micro_batches: int) -> None:
    """The schedule's requirement on the micro-batch count, as one clear error.

    1F1B-family schedules need ``m ≥ p`` to reach their steady state (torch's
    ``Schedule1F1B`` refuses fewer); the interleaved schedule also needs ``m`` a multiple of
    ``p`` (Megatron's assertion)."""
    if schedule is Schedule.GPIPE or stages == 1:
        return
    if micro_batches < stages:
        raise PipelineError(
            f"the {schedule.value} schedule needs at least as many micro-batches as pipeline "
            f"stages ({stages}), got {micro_batches}; raise --global-batch or lower "
            f"--micro-batch, or use --schedule gpipe", stages=stages,
            micro_batches=micro_batches, schedule=schedule.value)
    if schedule is Schedule.INTERLEAVED and micro_batches % stages:
        raise PipelineError(
            f"the interleaved schedule needs the micro-batches ({micro_batches}) to be a "
            f"multiple of the pipeline stages ({stages})", stages=stages,
            micro_batches=micro_batches, schedule=schedule.value)


def stage_orders(schedule: Schedule, stages: int, micro_batches: int,
                 chunks: int = 1) -> tuple[tuple[Task, ...], ...]:
    """Per stage, the tasks in the order that stage runs them.

    >>> [" ".join(map(str, order)) for order in stage_orders(Schedule.ONE_F_ONE_B, 2, 3)]
    ['F0 F1 B0 F2 B1 B2', 'F0 B0 F1 B1 F2 B2']
    """
    check_micro_batches(schedule, stages, micro_batches)
    if schedule is not Schedule.INTERLEAVED and chunks != 1:
        raise PipelineError(f"only the interleaved schedule runs several chunks per stage, "
                            f"got {chunks} with {schedule.value}", schedule=schedule.value)
    build = {Schedule.GPIPE: _gpipe, Schedule.ONE_F_ONE_B: _one_f_one_b,
             Schedule.ZB_H1: _one_f_one_b}.get(schedule)
    if build is None:
        return tuple(_interleaved(s, stages, micro_batches, chunks) for s in range(stages))
    return tuple(build(s, stages, micro_batches) for s in range(stages))


def _gpipe(stage: int, stages: int, m: int) -> tuple[Task, ...]:
    return (*(Task(Kind.F, i) for i in range(m)), *(Task(Kind.B, i) for i in range(m)))


def _one_f_one_b(stage: int, stages: int, m: int) -> tuple[Task, ...]:
    warm = min(stages - stage - 1, m)
    order = [Task(Kind.F, i) for i in range(warm)]
    for i in range(m - warm):
        order += [Task(Kind.F, warm + i), Task(Kind.B, i)]
    order += [Task(Kind.B, i) for i in range(m - warm, m)]
    return tuple(order)


def _interleaved(stage: int, stages: int, m: int, chunks: int) -> tuple[Task, ...]:
    total = m * chunks
    group = stages * chunks
    warm = min(2 * (stages - stage - 1) + (chunks - 1) * stages, total)

    def task(kind: Kind, k: int) -> Task:
        chunk = (k % group) // stages
        if kind is Kind.B:
            chunk = chunks - 1 - chunk
        return Task(kind, (k // group) * stages + k % stages, chunk)

    order = [task(Kind.F, k) for k in range(warm)]
    for j in range(total - warm):
        order += [task(Kind.F, warm + j), task(Kind.B, j)]
    order += [task(Kind.B, k) for k in range(total - warm, total)]
    return tuple(order)
