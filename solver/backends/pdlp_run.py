"""PDLP over one LP, built once and run in legs: each leg continues from where the last stopped.

OR-Tools' PDLP (Applegate et al., "Practical Large-Scale Linear Programming using Primal-Dual
Hybrid Gradient", NeurIPS 2021) takes the LP as a SciPy matrix (no proto of a million terms)
and an optional starting point. A leg that starts from the last leg's point *and* its primal
weight carries on at the same pace; started without the weight it loses most of what the
first leg did (mixtral-8x7b dp=2,ep=4,tp=8, the periodic LP of 754,880 variables: 1,000
iterations leave the duals' bound 6.3e-3 below the LP optimum; 500 more from that point
reach 2.4e-5 with the weight, as 1,500 in one leg do (2.5e-5), and 1.1e-1 without it). So a
caller may look at PDLP's point between legs (``solver.backends.lp.lp_answers``) and stop
as soon as what it has proves its plan. The legs are counted in iterations, never seconds,
so the answer is the same bytes on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.backends.formulation import Formulation

NO_RESTARTS = 1  # PrimalDualHybridGradientParams.RestartStrategy.NO_RESTARTS
# PDLP's default, ADAPTIVE_HEURISTIC: slower to converge on the tight LPs, but its duals keep
# improving on half-integral ones where those without restarts oscillate (the memory price's
# bound-only LP, ``solver.periodic_bound``)
ADAPTIVE_RESTARTS = 3
# How far each major iteration moves PDLP's primal weight towards its new estimate (PDLP's
# default 0.5). 0.8 measured best on both roads: the mid-size periodic LPs of gpt2 dp=2,tp=4
# and llama3-8b dp=8,tp=8 (measured-curve prices) converge in 640 and 704 iterations (896 and
# 1,152 at 0.5; 0.7 and 0.9 in between), and the legs on Mixtral's 754,880-variable LP prove
# its plan at 1,150 iterations instead of 1,450 (``solver.backends.lp``).
SMOOTHING = 0.8
# Iterations between PDLP's major iterations (its default, 64). Without restarts a major
# iteration is where PDLP re-estimates the primal weight (from how far the primal and dual
# iterates moved since the last one, smoothed by ``SMOOTHING``), resets its running average
# and checks termination (``Solver::MajorIterationAndTerminationCheck`` and
# ``ChooseRestartToApply`` in OR-Tools' ortools/pdlp/primal_dual_hybrid_gradient.cc, v9.15:
# ``NO_RESTARTS`` answers every major iteration with ``RESTART_CHOICE_WEIGHTED_AVERAGE_RESET``).
# A shorter period adapts the weight sooner; whether that pays depends on the LP (measured
# where it is used: ``solver.backends.lp``).
MAJOR_ITERATIONS = 64


def configure(params, *, eps: float, iterations: int, threads: int, shards: int,
              smoothing: float, restarts: int = NO_RESTARTS,
              major: int = MAJOR_ITERATIONS) -> None:
    """Fill a ``PrimalDualHybridGradientParams`` the same way on both PDLP roads (its own
    binding here, MathOpt's proto in ``solver.backends.pdlp_proto``): no restarts (unless
    ``restarts`` says otherwise), a fixed summation order (``shards``), tolerance ``eps``, at
    most ``iterations``, a major iteration every ``major`` (termination checked there)."""
    params.num_threads = threads
    params.num_shards = shards
    params.restart_strategy = restarts
    params.primal_weight_update_smoothing = smoothing
    params.major_iteration_frequency = major
    params.termination_check_frequency = major
    criteria = params.termination_criteria
    criteria.simple_optimality_criteria.eps_optimal_relative = eps
    criteria.simple_optimality_criteria.eps_optimal_absolute = eps
    criteria.iteration_limit = max(int(iterations), 1)


@dataclass(frozen=True, slots=True, eq=False)
class PdlpPoint:
    """Where a leg stopped: PDLP's primal and dual vectors (scaled objective), the primal
    weight to resume with, iterations so far (all legs), and whether it converged."""

    primal: np.ndarray
    duals: np.ndarray
    primal_weight: float
    iterations: int
    converged: bool
    seconds: float  # PDLP's own solve time, all legs
    reason: str  # the last leg's termination reason


class PdlpRunner:
    """One LP set up for PDLP: ``run`` makes a leg of at most ``iterations`` more."""

    def __init__(self, form: Formulation, factor: float, eps: float, threads: int,
                 shards: int, smoothing: float = 0.5, restarts: int = NO_RESTARTS):
        import scipy.sparse as sparse
        from ortools.pdlp.python import pdlp

        program = pdlp.QuadraticProgram()
        program.objective_vector = form.obj * factor
        program.objective_offset = form.constant * factor
        program.constraint_matrix = sparse.csc_matrix(
            (form.coefs, (form.rows, form.cols)), shape=(form.row_lo.size, form.num_vars))
        program.constraint_lower_bounds = form.row_lo
        program.constraint_upper_bounds = form.row_hi
        program.variable_lower_bounds = np.zeros(form.num_vars)
        program.variable_upper_bounds = np.ones(form.num_vars)
        self.program, self.eps, self.threads, self.shards = program, eps, threads, shards
        self.smoothing = smoothing  # PDLP's primal_weight_update_smoothing (its default 0.5)
        self.rows, self.cols = form.row_lo.size, form.num_vars
        self.restarts = restarts  # PDLP's restart strategy (``NO_RESTARTS`` but for bounds)

    def run(self, iterations: int, time_limit: float | None, start: PdlpPoint | None,
            major: int = MAJOR_ITERATIONS) -> PdlpPoint | None:
        """A leg of at most ``iterations`` iterations from ``start`` (``None``: from zero),
        with a major iteration every ``major``; ``None`` when PDLP refused the input."""
        from ortools.pdlp import solve_log_pb2, solvers_pb2
        from ortools.pdlp.python import pdlp

        params = solvers_pb2.PrimalDualHybridGradientParams()
        configure(params, eps=self.eps, iterations=iterations, threads=self.threads,
                  shards=self.shards, smoothing=self.smoothing, restarts=self.restarts,
                  major=major)
        if time_limit is not None:
            params.termination_criteria.time_sec_limit = max(time_limit, 0.01)
        initial = None
        if start is not None:
            if 1e-50 < start.primal_weight < 1e50:  # PDLP's accepted range (else its own)
                params.initial_primal_weight = start.primal_weight
            initial = pdlp.PrimalAndDualSolution()
            initial.primal_solution = start.primal
            initial.dual_solution = start.duals
        result = pdlp.primal_dual_hybrid_gradient(self.program, params, initial)
        duals = np.asarray(result.dual_solution, dtype=np.float64)
        primal = np.asarray(result.primal_solution, dtype=np.float64)
        if duals.size != self.rows or primal.size != self.cols:
            return None
        log = result.solve_log
        before = (0, 0.0) if start is None else (start.iterations, start.seconds)
        return PdlpPoint(
            primal=primal, duals=duals, primal_weight=float(log.solution_stats.primal_weight),
            iterations=before[0] + int(log.iteration_count),
            converged=log.termination_reason == solve_log_pb2.TERMINATION_REASON_OPTIMAL,
            seconds=before[1] + float(log.solve_time_sec),
            reason=solve_log_pb2.TerminationReason.Name(log.termination_reason))
