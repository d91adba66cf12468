"""A solver answer is a certificate: status, objective, proven lower bound and derived gap.

"Optimal" is a status backed by a bound, never an assumption (the MathOpt ``result.py``
habit): ``gap`` is computed from ``objective`` and ``bound``, and ``optimal`` from ``gap``.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field

OPTIMALITY_GAP = 1e-6


@enum.unique
class SolveStatus(enum.Enum):
    """How the solve ended.

    OPTIMAL: the plan is proven optimal (relative gap ≤ 1e-6).
    FEASIBLE: a plan that fits, with a gap above 1e-6, found without hitting the time limit
        (e.g. the DP stopped on a backend that cannot prove more).
    TIME_LIMIT: the time limit stopped the search; the plan is the best found, with its gap.
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    TIME_LIMIT = "time_limit"

    def __repr__(self) -> str:
        return f"SolveStatus.{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SolveStats:
    """Where the time went and how much the reductions removed."""

    backend: str
    nodes_before: int
    nodes_after: int
    options_before: int
    options_after: int
    edges_before: int
    edges_after: int
    seconds: tuple[tuple[str, float], ...] = field(default=())

    def phase(self, name: str) -> float:
        """Seconds spent in phase ``name`` (0.0 if it did not run)."""
        return sum(s for n, s in self.seconds if n == name)


@dataclass(frozen=True, slots=True, kw_only=True)
class Solution:
    """The chosen option per node plus the certificate that prices it."""

    choices: tuple[int, ...]
    objective: float
    bound: float
    status: SolveStatus
    stats: SolveStats
    peak_memory: float | None = None
    # set when the plan was searched among a subset of the plans (e.g. identical layers) and
    # is not proven optimal for the whole problem: what was restricted; ``bound`` and ``gap``
    # are still those of the whole problem
    restricted: str | None = None

    @property
    def gap(self) -> float:
        """Relative gap between objective and proven bound (0 when they meet)."""
        diff = max(self.objective - self.bound, 0.0)
        if diff == 0.0:
            return 0.0
        return diff / max(abs(self.objective), 1e-300)

    @property
    def optimal(self) -> bool:
        return self.gap <= OPTIMALITY_GAP

    def with_bound(self, bound: float) -> Solution:
        """This plan under ``bound`` where that is higher (never above the plan's cost), the
        status ``OPTIMAL`` when it then meets the plan, and otherwise this status and
        restriction. A bound proven elsewhere (another round, a floor, a plan swapped in by
        the caller) keeps its meaning whatever plan it is set against.

        Example:
            >>> stats = SolveStats(backend="x", nodes_before=1, nodes_after=1,
            ...                    options_before=2, options_after=2, edges_before=0,
            ...                    edges_after=0)
            >>> cut = Solution(choices=(0,), objective=4.0, bound=1.0,
            ...                status=SolveStatus.TIME_LIMIT, stats=stats)
            >>> cut.with_bound(3.0).bound, cut.with_bound(3.0).status.name
            (3.0, 'TIME_LIMIT')
            >>> cut.with_bound(9.0).bound, cut.with_bound(9.0).status.name
            (4.0, 'OPTIMAL')
            >>> cut.with_bound(0.5) is cut
            True
        """
        raised = min(max(bound, self.bound), self.objective)
        if raised == self.bound:
            return self
        proven = dataclasses.replace(self, bound=raised, status=SolveStatus.OPTIMAL,
                                     restricted=None)
        return proven if proven.optimal else dataclasses.replace(self, bound=raised)
