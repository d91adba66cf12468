"""The dual simplex and the barrier (HiGHS or Glop, through MathOpt), and the simplex on the
support of PDLP's point with column generation: the exact LP roads of :mod:`solver.backends.lp`
(its docstring says which LP goes where, with the measurements).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace

import numpy as np

from solver.backends import mathopt
from solver.backends.formulation import Formulation, decode_weighted
from solver.backends.lp_answer import LPAnswer, dual_bound, objective_factor, reduced_costs

logger = logging.getLogger(__name__)

SIMPLEX = "GLOP"  # the dual simplex of LPs without memory rows ("HIGHS": HiGHS' everywhere)
SUPPORT = 1e-3  # x above this, and each node's largest, span the support LP
PRICING_ROUNDS = 4  # column-generation rounds after the first support LP
PRICED_COLUMNS = 20_000  # columns added per round at most, most negative reduced cost first


def solve_on_support(form: Formulation, primal: np.ndarray | None, largest: np.ndarray | None,
                     time_limit: float | None) -> tuple[LPAnswer, float]:
    """``(answer, LP value)`` of the LP restricted to the columns where PDLP's x exceeds
    ``SUPPORT`` (and each node's ``largest``, its decoded choice, so every one-hot row keeps a
    column), by the dual simplex: a vertex of the face PDLP was converging to. Its value is an
    upper bound of the LP optimum; ``answer.bound`` holds for the whole LP (``dual_bound``
    over every column). With degenerate duals that bound is weak, so the columns the duals
    price below zero are added and the restricted LP solved again (column generation, Dantzig
    & Wolfe 1960; Lübbecke & Desrosiers, "Selected Topics in Column Generation", Operations
    Research 53(6), 2005): when no column prices below zero the restricted optimum is the LP
    optimum and its bound meets it. ``(no answer, inf)`` when the restricted LP is infeasible
    or unsolved."""
    if primal is None or largest is None:
        return LPAnswer(None, -math.inf), math.inf
    start = time.perf_counter()
    keep = primal > SUPPORT
    keep[form.offsets[:-1] + largest] = True
    factor = objective_factor(form)
    last, value, bound, duals = LPAnswer(None, -math.inf), math.inf, -math.inf, None
    for _ in range(1 + PRICING_ROUNDS):
        answer, answer_value, reduced = restricted_lp(form, keep, factor,
                                                       mathopt.left(time_limit, start))
        if answer.x is None:
            break
        last, value = answer, min(value, answer_value)
        if answer.bound > bound:
            bound, duals = answer.bound, answer.duals
        priced = np.flatnonzero(~keep & (reduced < -1e-9))
        if priced.size == 0:
            break
        keep[priced[np.argsort(reduced[priced], kind="stable")][:PRICED_COLUMNS]] = True
    if last.x is None:
        return last, math.inf
    return replace(last, bound=bound, duals=duals), value


def restricted_lp(form: Formulation, keep: np.ndarray, factor: float,
                  time_limit: float | None) -> tuple[LPAnswer, float, np.ndarray]:
    """``(answer, value, reduced costs in scaled units)`` of the LP on the ``keep`` columns by
    the dual simplex; the answer's bound is ``dual_bound`` of its duals over every column."""
    columns = np.flatnonzero(keep)
    renumber = np.full(form.num_vars, -1, dtype=np.int64)
    renumber[columns] = np.arange(columns.size)
    used = keep[form.cols]
    sub = replace(form, obj=form.obj[columns], rows=form.rows[used],
                              cols=renumber[form.cols[used]], coefs=form.coefs[used], num_x=0,
                              offsets=np.zeros(1, dtype=np.int64), edge_maps=(), flow_maps=(),
                              window_maps=())
    # HiGHS' vertex: the one the measurements in ``lp_answers`` were made with (Glop's, on the
    # same support, can round to a plan that needs the polish)
    run = run_highs(sub, factor, time_limit, barrier=False, glop=False)
    if run.x is None or run.duals is None:
        return LPAnswer(None, -math.inf), math.inf, np.zeros(0)
    values = np.zeros(form.num_vars)
    values[columns] = run.x
    choice, weight = decode_weighted(form, values)
    value = float(form.obj @ values + form.constant)
    _, reduced = reduced_costs(form, run.duals)
    return (LPAnswer(choice, dual_bound(form, run.duals, factor), weight, duals=run.duals,
                     values=values[:form.num_x]), value, reduced * factor)


def solve_highs_lp(form: Formulation, time_limit: float | None, barrier: bool, *,
                   proto=None, interrupter=None) -> LPAnswer:
    """The dual simplex (HiGHS' own bound is exact; Glop's comes from ``dual_bound``), or
    HiGHS' barrier with crossover (module docstring), whose bound comes from ``dual_bound``.
    ``proto``: the LP's model proto if already built (``mathopt.model_proto(form,
    objective_factor(form), integral=False)``); ``interrupter`` stops a simplex run on
    another thread (``solver.backends.lp_race``): its answer is then not to be used."""
    factor = objective_factor(form)
    run = run_highs(form, factor, time_limit, barrier, proto=proto, interrupter=interrupter)
    if run.infeasible:
        return LPAnswer(None, math.inf)
    if run.duals is None:
        return LPAnswer(None, -math.inf)
    bound = dual_bound(form, run.duals, factor) if barrier else run.bound
    if run.x is None:
        return LPAnswer(None, bound, duals=run.duals)
    choice, weight = decode_weighted(form, run.x)
    return LPAnswer(choice, bound, weight, duals=run.duals, values=run.x[:form.num_x])


@dataclass(frozen=True, slots=True, eq=False)
class HighsRun:
    """One simplex or barrier LP solve: ``x`` and ``duals`` are ``None`` unless it reached the
    optimum (``x`` also when no primal came back); ``bound`` is HiGHS' own dual bound, or
    ``dual_bound`` of Glop's duals (Glop reports its primal value as the bound)."""

    infeasible: bool = False
    x: np.ndarray | None = None
    duals: np.ndarray | None = None
    bound: float = -math.inf
    stopped: bool = False  # out of time: no other solver is tried


def run_highs(form: Formulation, factor: float, time_limit: float | None,
              barrier: bool, glop: bool = True, *, proto=None, interrupter=None) -> HighsRun:
    """The barrier (HiGHS), or the dual simplex: Glop's on LPs without memory rows (module
    docstring) unless ``glop`` is false, HiGHS' on the others and wherever Glop ends without
    an optimum."""
    if glop and not barrier and not form.memory_rows and SIMPLEX == "GLOP":
        run = run_mathopt(form, factor, time_limit, barrier, "GLOP", proto=proto,
                          interrupter=interrupter)
        if run.duals is not None or run.infeasible or run.stopped:
            return run
        if interrupter is not None and interrupter.interrupted:
            return HighsRun(stopped=True)
        logger.info("Glop ended the LP without an optimum; HiGHS' dual simplex instead")
    return run_mathopt(form, factor, time_limit, barrier, "HIGHS", proto=proto,
                       interrupter=interrupter)


def run_mathopt(form: Formulation, factor: float, time_limit: float | None, barrier: bool,
                solver: str, *, proto=None, interrupter=None) -> HighsRun:
    from ortools.math_opt import parameters_pb2, result_pb2, solution_pb2

    started = time.perf_counter()
    if proto is None:
        proto = mathopt.model_proto(form, factor, integral=False)
    time_limit = mathopt.left(time_limit, started)  # the model's build counts (seconds)
    params, model_params = mathopt.parameters(time_limit, 0.0, None, form)
    if barrier:
        params.lp_algorithm = parameters_pb2.LP_ALGORITHM_BARRIER
        params.highs.string_options["run_crossover"] = "on"
    else:
        params.lp_algorithm = parameters_pb2.LP_ALGORITHM_DUAL_SIMPLEX
        params.presolve = parameters_pb2.EMPHASIS_OFF  # 5.2 s vs 11.4 s on GPT-2 training
    if barrier:  # HiGHS' barrier does not stop at its limit: run where it can be stopped
        result = mathopt.run_stoppable(proto, solver, params, model_params, time_limit)
        if result is None:
            logger.info("barrier stopped at its time limit (%.1f s)", time_limit or 0.0)
            return HighsRun(stopped=True)
    else:
        result = mathopt.run(proto, solver, params, model_params, interrupter)
    reason = result.termination.reason
    if reason == result_pb2.TERMINATION_REASON_INFEASIBLE:
        return HighsRun(infeasible=True, bound=math.inf)
    if reason != result_pb2.TERMINATION_REASON_OPTIMAL:
        limit = result.termination.limit == result_pb2.LIMIT_TIME
        return HighsRun(stopped=limit)
    duals = np.zeros(form.row_lo.size)
    x = None
    for solution in result.solutions:
        if solution.HasField("dual_solution"):
            values = solution.dual_solution.dual_values
            duals[np.array(values.ids, dtype=np.int64)] = np.array(values.values)
        primal = solution.primal_solution
        if primal.feasibility_status == solution_pb2.SOLUTION_STATUS_FEASIBLE:
            x = mathopt.values(form, primal)
            break
    bound = (result.termination.objective_bounds.dual_bound / factor if solver == "HIGHS"
             else dual_bound(form, duals, factor))
    return HighsRun(x=x, duals=duals, bound=bound)
