"""The solve's wall clock: the deadline every phase respects and the time each phase took.

A time limit holds for the whole solve only if no phase *starts* once the deadline has
passed: each phase is cut by its own solver's time limit, but a phase begun with no time left
still pays its fixed costs (building a model of a whole 126-layer problem, aggregating a
chain, a MIP's presolve), and a search that goes on to its next phase regardless pays them
again and again. So every optional phase (a further LP, a polish, a MIP, the tied search)
asks :meth:`Clock.expired` first and is skipped when it says so; only a phase that the
answer cannot do without (the first plan of all) runs late.
"""

from __future__ import annotations

import time


class Clock:
    """Started at construction; ``lap`` records a phase, ``remaining`` what the deadline leaves."""

    def __init__(self, time_limit: float | None):
        self.start = time.perf_counter()
        self.deadline = None if time_limit is None else self.start + time_limit
        self.phases: list[tuple[str, float]] = []
        self.mark = self.start

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases.append((name, now - self.mark))
        self.mark = now

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(self.deadline - time.perf_counter(), 0.0)

    def expired(self) -> bool:
        """Whether the deadline has passed: no optional phase may start (module docstring)."""
        return self.deadline is not None and time.perf_counter() >= self.deadline
