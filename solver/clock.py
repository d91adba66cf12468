"""The solve's wall clock: the deadline every phase respects and the time each phase took."""

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
