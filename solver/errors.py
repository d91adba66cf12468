"""The solver's exception tree: one root, subclasses named for what went wrong.

Every error carries structured fields (the node, the edge, the bytes) so that callers such as
the autoshard CLI can enrich the message once at their boundary.
"""

from __future__ import annotations


class SolverError(Exception):
    """Root of every error the solver package raises."""


class InvalidProblemError(SolverError, ValueError):
    """The problem's arrays are malformed (shape, NaN, out-of-range node index)."""

    def __init__(self, message: str, *, node: int | None = None, edge: int | None = None):
        super().__init__(message)
        self.node = node
        self.edge = edge


class NoFiniteOptionError(InvalidProblemError):
    """A node (or equal-choice group) has no option of finite cost, so no plan exists."""


class Infeasible(SolverError):
    """No assignment fits under the memory limit.

    ``min_peak`` is the smallest achievable memory (the sum of per-node minima, or the smallest
    achievable peak over liveness steps); ``exact`` says whether it is the exact minimum or a
    proven lower bound of it. ``found_peak`` is the peak of a plan the search found (an upper
    bound of the least peak: a plan exists at that peak; ``None`` when none was found), equal
    to ``min_peak`` when that is exact.
    """

    def __init__(self, *, min_peak: float, limit: float, exact: bool = True,
                 found_peak: float | None = None):
        self.min_peak = float(min_peak)
        self.limit = float(limit)
        self.exact = exact
        self.found_peak = self.min_peak if exact else found_peak
        if exact:
            what = f"needs {self.min_peak:.6g} bytes"
        else:
            what = f"needs at least {self.min_peak:.6g} bytes (a proven lower bound"
            what += ")" if found_peak is None else (
                f"; the leanest plan found needs {found_peak:.6g} bytes, an upper bound)")
        msg = (f"no assignment fits the memory limit: the leanest plan {what} but the limit "
               f"is {self.limit:.6g} bytes; raise the memory limit or offer options that use "
               f"less memory")
        super().__init__(msg)


class ProblemTooLargeError(SolverError):
    """A backend that only handles small problems (exhaustive, DP) was given a big one."""

    def __init__(self, message: str, *, size: float, limit: float):
        super().__init__(message)
        self.size = size
        self.limit = limit


class UnknownBackendError(SolverError, ValueError):
    """``backend=`` named something that is not a backend."""

    def __init__(self, backend: str, known: tuple[str, ...]):
        self.backend = backend
        msg = f"unknown solver backend {backend!r}; choose one of {', '.join(known)}"
        super().__init__(msg)


class NoSolutionError(SolverError):
    """The time limit ran out before any memory-feasible plan was found."""

    def __init__(self, message: str, *, time_limit: float | None):
        super().__init__(message)
        self.time_limit = time_limit
