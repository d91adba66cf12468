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

import math
import time
from collections.abc import Callable


class Clock:
    """Started at construction; ``lap`` records a phase, ``remaining`` what the deadline leaves."""

    def __init__(self, time_limit: float | None,
                 stop_when: Callable[[tuple[int, ...]], bool] | None = None):
        self.start = time.perf_counter()
        self.deadline = None if time_limit is None else self.start + time_limit
        self.phases: list[tuple[str, float]] = []
        self.mark = self.start
        self.stop_when = stop_when

    def consider(self, choices: tuple[int, ...]) -> None:
        """A search's new best plan: when the caller's ``stop_when`` holds for it, the
        deadline is now (the caller wants no better plan of this problem, only its bound so
        far: the planner's solve without memory rows, once its plan does not fit)."""
        if self.stop_when is not None and self.stop_when(choices):
            self.deadline = min(self.deadline or math.inf, time.perf_counter())

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases.append((name, now - self.mark))
        self.mark = now

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(self.deadline - time.perf_counter(), 0.0)

    def expired(self) -> bool:
        """Whether the deadline has passed: no optional phase may start (module docstring)."""
        return self.deadline is not None and time.perf_counter() >= self.deadline
