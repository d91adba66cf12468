"""What an emulation reports: the verdict, the per-output errors, the first divergence.

Kept apart from the emulator so that verification, the CLI and the tests read results without
importing the machinery that produces them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from autoshard.errors import AutoshardError


class EmulationError(AutoshardError):
    """The plan does not fit the graph it is emulated on (an op or label it lacks)."""

    def __init__(self, message: str, *, op: str | None = None) -> None:
        super().__init__(message)
        self.op = op


@dataclass(frozen=True, slots=True, kw_only=True)
class Divergence:
    """The first step whose sharded value is not the unsharded one.

    ``step`` is "op" or "reshard"; ``name`` the op, or ``tensor producer->consumer``;
    ``tensor`` the value compared; ``abs_err``/``rel_err`` inf when the layout itself is wrong.
    """

    step: str
    name: str
    tensor: str
    message: str
    abs_err: float = float("inf")
    rel_err: float = float("inf")

    def __str__(self) -> str:
        return f"{self.step} {self.name}: {self.message}"


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputError:
    tensor: str
    abs_err: float
    rel_err: float


@dataclass(frozen=True, slots=True, kw_only=True)
class EmulationResult:
    """The verdict of one emulation.

    ``outputs``: the error of every graph output as the plan leaves it (after its
    ``<output>`` reduction) and of every updated value once moved back to its stored layout
    (named ``"<tensor> (<next step>)"``); ``max_abs_err``/``max_rel_err`` are over those.
    ``divergence``: the first op or reshard, in schedule order, whose value differs from the
    unsharded one (None when ``passed``). Counts are of what ran before it.
    """

    passed: bool
    outputs: tuple[OutputError, ...]
    max_abs_err: float
    max_rel_err: float
    divergence: Divergence | None
    ops_run: int
    reshards_run: int
    collectives_run: int
    devices: int
    seconds: float
    counts: Mapping[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: the verdict and the errors, or the culprit."""
        if self.divergence is not None:
            return f"FAILED at {self.divergence}"
        return (f"passed: {self.ops_run} ops and {self.reshards_run} reshards "
                f"({self.collectives_run} collectives) on {self.devices} devices; max abs err "
                f"{self.max_abs_err:.3g}, max rel err {self.max_rel_err:.3g}")
