"""HiGHS through MathOpt on the aggregated marginal formulation (edge variables continuous).

The model is written straight into a MathOpt ``ModelProto`` from NumPy arrays, skipping the
term-by-term Python builder (2 s at 1,000 nodes in ilp-backends.md). HiGHS takes the DP plan
as a solution hint and returns its incumbent when the time limit stops it.

LP first: the local-polytope relaxation is integral on the planner's problems in practice
(GPT-2 training: 0 fractional x out of 19,943). The LP (dual simplex, presolve off: 5.2 s
against 16.8 s for the MIP on that instance) is solved first; the assignment read off its x
(largest per node) is scored on the problem, and when it meets the LP bound it is a proven
optimum and the MIP is skipped (always so when x is 0/1; often also when a crossover-free
barrier stops in the middle of a face of tied optima). Otherwise the MIP runs under the
remaining time and keeps the LP bound as a floor.
Only problems without memory rows go LP first: the planner adds rows only when the budget
binds, and a binding knapsack row is what makes the LP fractional (ilp-backends.md: rounding
the LP was memory-infeasible at 100 and 1,000 nodes), so there the LP would be time lost.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from solver.backends.formulation import Formulation, build, decode
from solver.backends.result import BackendResult
from solver.compact import Indexed

logger = logging.getLogger(__name__)

LP_FIRST = True  # the benchmark switches it off to measure the MIP-only baseline
BARRIER_MIN_VARS = 200_000  # from here the barrier beats dual simplex


def _objective_factor(form: Formulation) -> float:
    """A power of two lifting the largest objective coefficient to at least 1: plan costs are
    seconds (1e-6 .. 1e-2), where HiGHS' absolute tolerances (~1e-6) stopped it at a 3e-4
    relative gap on a GPT-2 plan. Objectives already >= 1 are left alone: scaling them *down*
    made HiGHS' time-limited bound much worse on the 5,000-node benchmark (gap 0.56 vs 6e-6).
    A power of two scales exactly."""
    top = float(np.abs(form.obj).max()) if form.obj.size else 0.0
    if top <= 0.0 or not math.isfinite(top) or top >= 1.0:
        return 1.0
    return 2.0 ** -math.floor(math.log2(top))


def _model_proto(form: Formulation, factor: float = 1.0, integral: bool = True):
    from ortools.math_opt import model_pb2

    proto = model_pb2.ModelProto()
    nvar = form.num_vars
    proto.variables.ids.extend(range(nvar))
    proto.variables.lower_bounds.extend([0.0] * nvar)
    proto.variables.upper_bounds.extend([1.0] * nvar)
    proto.variables.integers.extend([integral] * form.num_x + [False] * (nvar - form.num_x))
    nz = np.flatnonzero(form.obj)
    proto.objective.linear_coefficients.ids.extend(nz.tolist())
    proto.objective.linear_coefficients.values.extend((form.obj[nz] * factor).tolist())
    proto.objective.offset = form.constant * factor
    nrow = form.row_lo.size
    # memory rows stay in bytes: scaling them to units of the limit made HiGHS' incumbent
    # search much worse at 5,000 nodes (291,634 vs 127,397 after 45 s); ``solve`` re-checks
    # every returned plan against the exact float limit anyway
    proto.linear_constraints.ids.extend(range(nrow))
    proto.linear_constraints.lower_bounds.extend(form.row_lo.tolist())
    proto.linear_constraints.upper_bounds.extend(form.row_hi.tolist())
    order = np.lexsort((form.cols, form.rows))
    matrix = proto.linear_constraint_matrix
    matrix.row_ids.extend(form.rows[order].tolist())
    matrix.column_ids.extend(form.cols[order].tolist())
    matrix.coefficients.extend(form.coefs[order].tolist())
    return proto


def _parameters(time_limit: float | None, gap: float, hint: np.ndarray | None,
                form: Formulation):
    from ortools.math_opt import model_parameters_pb2, parameters_pb2

    params = parameters_pb2.SolveParametersProto()
    params.relative_gap_tolerance = gap
    params.absolute_gap_tolerance = 0.0
    params.random_seed = 0
    if time_limit is not None:
        params.time_limit.FromNanoseconds(int(max(time_limit, 0.01) * 1e9))
    model_params = model_parameters_pb2.ModelSolveParametersProto()
    if hint is not None:
        values = form.hint(hint)
        solution_hint = model_params.solution_hints.add()
        solution_hint.variable_values.ids.extend(range(form.num_vars))
        solution_hint.variable_values.values.extend(values.tolist())
    return params, model_params


def _run(proto, solver_type: str, params, model_params):
    from ortools.math_opt import parameters_pb2
    from ortools.math_opt.core.python import solver as core
    from ortools.math_opt.python import callback, init_arguments

    return core.solve(proto, getattr(parameters_pb2, f"SOLVER_TYPE_{solver_type}"),
                      init_arguments.StreamableSolverInitArguments().to_proto(), params,
                      model_params, None, callback.CallbackRegistration().to_proto(), None, None)


def _values(form: Formulation, primal) -> np.ndarray:
    values = np.zeros(form.num_vars)
    values[np.array(primal.variable_values.ids, dtype=np.int64)] = \
        np.array(primal.variable_values.values)
    return values


def dual_bound(form: Formulation, duals: np.ndarray, factor: float) -> float:
    """A lower bound of the LP (so of the MIP) from *any* row multipliers ``duals``.

    Weak duality with the variables' box [0, 1]: for every y,
    ``min c·v ≥ Σ_rows (lo·y if y > 0 else hi·y) + Σ_j min(0, (c − Aᵀy)_j)``. It holds for
    inexact duals too, which is why the barrier may skip its crossover: the bound is computed
    here, not taken on trust."""
    cost = form.obj * factor
    reduced = cost - np.bincount(form.cols, weights=form.coefs * duals[form.rows],
                                 minlength=cost.size)
    with np.errstate(invalid="ignore"):
        rows = np.where(duals > 0, form.row_lo * duals,
                        np.where(duals < 0, form.row_hi * duals, 0.0))
    total = float(rows.sum() + np.minimum(reduced, 0.0).sum() + form.constant * factor)
    return total / factor if math.isfinite(total) else -math.inf


def solve_lp(ix: Indexed, form: Formulation, time_limit: float | None,
             solver_type: str = "HIGHS") -> tuple[np.ndarray | None, float]:
    """The LP relaxation: ``(x, bound)``, ``x`` the assignment read off the LP optimum (its
    own plan when integral; the caller scores it against ``bound`` either way).

    ``bound`` is a proven lower bound (``-inf`` when the LP did not finish, ``inf`` when it
    is infeasible, in which case the MIP is infeasible too). Large LPs run the barrier without
    crossover (llama3.1-405b on 8×8×8: the crossover and simplex clean-up were 12 s of 48 s);
    the bound then comes from ``dual_bound``, valid for inexact duals."""
    from ortools.math_opt import parameters_pb2, result_pb2, solution_pb2

    del ix
    factor = _objective_factor(form)
    params, model_params = _parameters(time_limit, 0.0, None, form)
    barrier = form.num_vars >= BARRIER_MIN_VARS
    if barrier:
        # llama3-8b-shaped periodic LP on 4×4×4 (389 k variables): barrier 48.7 s, dual
        # simplex 117.8 s; on 2-axis meshes (49 k) dual simplex wins, 0.84 s vs 1.57 s
        params.lp_algorithm = parameters_pb2.LP_ALGORITHM_BARRIER
        params.highs.string_options["run_crossover"] = "off"
    else:
        params.lp_algorithm = parameters_pb2.LP_ALGORITHM_DUAL_SIMPLEX
        params.presolve = parameters_pb2.EMPHASIS_OFF  # 5.2 s vs 11.4 s on GPT-2 training
    result = _run(_model_proto(form, factor, integral=False), solver_type, params,
                  model_params)
    reason = result.termination.reason
    if reason == result_pb2.TERMINATION_REASON_INFEASIBLE:
        return None, math.inf
    if reason != result_pb2.TERMINATION_REASON_OPTIMAL:
        return None, -math.inf
    # without crossover HiGHS' own bound is not trusted; only ``dual_bound`` replaces it
    bound = -math.inf if barrier else result.termination.objective_bounds.dual_bound / factor
    for solution in result.solutions:
        if barrier:
            duals = np.zeros(form.row_lo.size)
            values = solution.dual_solution.dual_values
            duals[np.array(values.ids, dtype=np.int64)] = np.array(values.values)
            bound = dual_bound(form, duals, factor)
        primal = solution.primal_solution
        if primal.feasibility_status == solution_pb2.SOLUTION_STATUS_FEASIBLE:
            return decode(form, _values(form, primal)), bound
    return None, bound


def solve_highs(ix: Indexed, hint: np.ndarray | None, time_limit: float | None,
                gap: float, solver_type: str = "HIGHS") -> BackendResult:
    from ortools.math_opt import result_pb2, solution_pb2

    floor = -math.inf
    if LP_FIRST and (ix.limit is None or not any(ix.rows)):
        start = time.perf_counter()
        # the LP takes no hint, so its edges may be flow networks (solver.backends.flow_arcs)
        x, floor = solve_lp(ix, build(ix, flow=True), time_limit, solver_type)
        if floor == math.inf:
            return BackendResult(x=None, bound=math.inf, timed_out=False, infeasible=True)
        if x is not None and ix.fits(x) and \
                ix.evaluate(x) - floor <= gap * max(abs(floor), 1e-300):
            return BackendResult(x=x, bound=floor, timed_out=False)
        if time_limit is not None:
            time_limit = max(time_limit - (time.perf_counter() - start), 0.01)
    form = build(ix)
    params, model_params = _parameters(time_limit, gap, hint, form)
    factor = _objective_factor(form)
    result = _run(_model_proto(form, factor), solver_type, params, model_params)
    reason = result.termination.reason
    bound = result.termination.objective_bounds.dual_bound / factor
    if reason == result_pb2.TERMINATION_REASON_INFEASIBLE:
        return BackendResult(x=None, bound=math.inf, timed_out=False, infeasible=True)
    optimal = reason == result_pb2.TERMINATION_REASON_OPTIMAL
    bound = max(bound if math.isfinite(bound) else -math.inf, floor)
    for solution in result.solutions:
        primal = solution.primal_solution
        if primal.feasibility_status == solution_pb2.SOLUTION_STATUS_FEASIBLE:
            return BackendResult(x=decode(form, _values(form, primal)), bound=bound,
                                 timed_out=not optimal)
    return BackendResult(x=None, bound=bound, timed_out=True)
