"""Generic "pick one option per node" optimizer: numbers in, choices out.

``solver`` knows nothing about tensors or meshes. A :class:`ChoiceProblem` holds per-node cost
vectors, per-edge cost matrices and memory (a sum row or per-step liveness terms); :func:`solve`
returns a :class:`Solution` that is a certificate (status, objective, proven bound, gap).
Backends: the tree-decomposition DP with Lagrangian memory, HiGHS and CP-SAT (OR-Tools) on the
aggregated local-polytope MIP, and exhaustive search for tiny problems. A chain of identical
blocks (``ChoiceProblem.blocks``) is solved at the size of a few blocks by a periodic LP whose
bound holds for the whole problem (:mod:`solver.periodic`). A :class:`Window` prices work on
concurrent streams by its longest stream (overlap of communication with compute), exactly.
"""

from solver.api import BACKENDS, fitting_plan, plan_error, solve
from solver.backends.lp import share_cores
from solver.errors import (
    Infeasible,
    InvalidProblemError,
    NoFiniteOptionError,
    NoSolutionError,
    ProblemTooLargeError,
    SolverError,
    UnknownBackendError,
)
from solver.problem import ChoiceProblem, Stream, Window
from solver.solution import OPTIMALITY_GAP, Solution, SolveStats, SolveStatus
from solver.span_rows import Span, SpanRows

__all__ = [
    "BACKENDS",
    "OPTIMALITY_GAP",
    "ChoiceProblem",
    "Infeasible",
    "InvalidProblemError",
    "NoFiniteOptionError",
    "NoSolutionError",
    "ProblemTooLargeError",
    "Solution",
    "SolveStats",
    "SolveStatus",
    "SolverError",
    "Span",
    "SpanRows",
    "Stream",
    "UnknownBackendError",
    "Window",
    "fitting_plan",
    "plan_error",
    "share_cores",
    "solve",
]
