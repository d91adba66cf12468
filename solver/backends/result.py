"""What a backend hands back to ``solve``: a plan (or none) and a proven bound."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class BackendResult:
    x: np.ndarray | None
    bound: float
    timed_out: bool
    infeasible: bool = False
