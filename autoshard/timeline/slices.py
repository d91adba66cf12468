"""The values a timeline is made of: tracks, timed slices, and the laid-out step.

A :class:`Slice` is one interval of work on one :class:`Track` (seconds from the start of the
step, plus what a viewer should show about it); a :class:`Timeline` is the slices of a step in
the order they were laid out, with the tracks in display order. Scheduling (what runs when)
and writing (a file format) are separate modules that meet here, so a later schedule (pipeline
stages, one compute track each) can reuse the writer unchanged.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@enum.unique
class Category(enum.Enum):
    """What a slice is, as the trace's ``cat`` field says (viewers filter on it)."""

    STEP = "step"                  # a micro-batch, the optimizer step
    WINDOW = "window"              # a layer model window: its streams side by side
    COMPUTE = "compute"            # an op's local compute
    LOCAL = "local"                # a reshard's local step (a slice: a copy in HBM)
    EXPOSED = "comm.exposed"       # a collective the compute waits for
    OVERLAPPED = "comm.overlapped"  # a collective that runs beside compute
    INTRA_OP = "comm.intra_op"     # a collective inside an op (e.g. vocab-parallel loss)
    REPEAT = "repeat"              # micro-batches that repeat micro-batch 0, as one block
    P2P = "comm.p2p"               # a pipeline's point-to-point transfer between stages

    def __repr__(self) -> str:
        return f"Category.{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class Track:
    """One row of the timeline: ``thread`` (``compute``, a mesh axis name, ...) of
    ``process`` (the devices that run it: every device of an SPMD plan, or one pipeline
    stage)."""

    process: str
    thread: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Slice:
    """``name`` ran on ``track`` from ``start_s`` to ``end_s`` (seconds from the step's
    start); ``args`` are what a viewer shows when the slice is selected."""

    track: Track
    name: str
    start_s: float
    end_s: float
    category: Category
    args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline:
    """A laid-out step: ``slices`` in layout order, ``tracks`` in display order, ``end_s``
    when the step ends, ``metadata`` about the plan it came from."""

    slices: tuple[Slice, ...]
    tracks: tuple[Track, ...]
    end_s: float
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def on(self, track: Track) -> tuple[Slice, ...]:
        """The slices of one track, in layout order."""
        return tuple(s for s in self.slices if s.track == track)


__all__ = ["Category", "Slice", "Timeline", "Track"]
