"""HiGHS through MathOpt on the marginal formulation (edge variables continuous; an edge is
a sparse flow network where that is smaller, ``solver.backends.flow_arcs``).

The model is written straight into a MathOpt ``ModelProto`` from NumPy arrays, skipping the
term-by-term Python builder (2 s at 1,000 nodes in docs/solver-backends.md). HiGHS takes the DP plan
as a solution hint and returns its incumbent when the time limit stops it.

LP first: the local-polytope relaxation is integral on the planner's problems in practice
(GPT-2 training: 0 fractional x out of 19,943). The LP (``solver.backends.lp``: dual simplex,
presolve off, 5.2 s against 16.8 s for the MIP on that instance; PDLP when large) is solved
first; the assignment read off its x (largest per node) is scored on the problem, and when it
meets the LP bound it is a proven optimum and the MIP is skipped (always so when x is 0/1;
often also when a first-order method stops in the middle of a face of tied optima). Otherwise
a plan on the LP's support and one from its reduced-cost neighbourhood give an incumbent, and
the MIP runs after reduced-cost fixing against it (:mod:`solver.backends.fixing`: a 3-axis
llama3-8b-shaped graph in ~2 s after its LP instead of 292 s), keeping the LP bound as a
floor.
Only problems without memory rows go LP first: the planner adds rows only when the budget
binds, and a binding knapsack row is what makes the LP fractional (docs/solver-backends.md: rounding
the LP was memory-infeasible at 100 and 1,000 nodes), so there the LP would be time lost.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from solver.backends import mathopt
from solver.backends.fixing import fix_and_solve, neighbourhood_plan, support_plan
from solver.backends.formulation import Formulation, build, decode
from solver.backends.lp import lp_answers
from solver.backends.lp_answer import LPAnswer, objective_factor
from solver.backends.result import BackendResult
from solver.compact import Indexed

logger = logging.getLogger(__name__)

LP_FIRST = True  # the benchmark switches it off to measure the MIP-only baseline
# The LP (or MIP) is not started when less time is left than this many times the model's
# build took: before PDLP's first iteration it copies the model and rescales it, which costs
# about twice the build (a 4-axis gpt2's 35.5 M columns: build 30.7 s, PDLP's set-up 22.4 s
# and its first call 37.6 s, loaded 2-core machine), so it would end past the limit with
# no answer.
SETUP_PER_BUILD = 2.0
# Columns the formulation writes per second at best (the same LP: 35.5 M columns in 15.7 s
# on a quiet core, 30.7-36.4 s loaded): a model whose build alone would not fit the time
# left, counting every edge dense (an upper bound), is not started (the 4-axis gpt2 under a
# 30 s limit: its build ended at 60 s); one that does is built and then judged by its build.
BUILD_COLUMNS_PER_S = 2.3e6


def least_build_seconds(ix: Indexed) -> float:
    """The fewest seconds the model of ``ix`` can take to build (``BUILD_COLUMNS_PER_S``)."""
    return _columns_at_most(ix) / BUILD_COLUMNS_PER_S


def _columns_at_most(ix: Indexed) -> int:
    """The model's columns at most: every option, and every edge as a dense matrix (a flow
    network replaces one only where it has fewer arcs)."""
    return sum(c.size for c in ix.costs) + sum(m.size for _, _, m in ix.edges)


def solve_highs(ix: Indexed, hint: np.ndarray | None, time_limit: float | None,
                gap: float, solver_type: str = "HIGHS", *, lp_first: bool = True
                ) -> BackendResult:
    from ortools.math_opt import result_pb2, solution_pb2

    floor, began, limit = -math.inf, time.perf_counter(), time_limit
    if limit is not None and limit < least_build_seconds(ix):
        logger.info("no LP or MIP: %.1f s left for a model of up to %d columns", limit,
                    _columns_at_most(ix))
        return BackendResult(x=None, bound=-math.inf, timed_out=True)
    # edges as flow networks where smaller (solver.backends.flow_arcs), for the LP and the
    # MIP alike: the hint routes each network's unit along a cheapest path
    form = build(ix, flow=True)
    if limit is not None and mathopt.left(limit, began) < SETUP_PER_BUILD * (
            time.perf_counter() - began):
        # too late for any answer of this model: the caller descends from what it has
        logger.info("no LP or MIP: %.1f s left after a %.1f s build", mathopt.left(
            limit, began), time.perf_counter() - began)
        return BackendResult(x=None, bound=-math.inf, timed_out=True)
    if lp_first and LP_FIRST and (ix.limit is None or not any(ix.rows)):
        start = time.perf_counter()
        # the build counts: 12 s of a 4-axis gpt2's 36 s went there, unseen by the LP
        time_limit = mathopt.left(limit, began)
        answers = list(lp_answers(form, time_limit))
        relaxed = answers[-1]
        x, floor = relaxed.x, relaxed.bound
        if floor == math.inf:
            return BackendResult(x=None, bound=math.inf, timed_out=False, infeasible=True)
        if x is not None and ix.fits(x) and \
                ix.evaluate(x) - floor <= gap * max(abs(floor), 1e-300):
            return BackendResult(x=x, bound=floor, timed_out=False)
        time_limit = mathopt.left(time_limit, start)
        if time_limit == 0.0 and x is not None and ix.fits(x):
            return BackendResult(x=x, bound=floor, timed_out=True)  # solver.clock
        if relaxed.duals is not None and relaxed.values is not None:
            # every answer's support: PDLP's point lies inside the optimal face, its
            # vertex on one corner of it
            support = np.max([a.values for a in answers if a.values is not None], axis=0)
            return _fix(ix, form, relaxed, support, hint, time_limit, gap)
    factor = objective_factor(form)
    proto = mathopt.model_proto(form, factor)
    # the time the model took to build is the MIP's no more (a 405b polish: ~20 s of it)
    params, model_params = mathopt.parameters(mathopt.left(limit, began), gap, hint, form)
    result = mathopt.run(proto, solver_type, params, model_params)
    reason = result.termination.reason
    bound = result.termination.objective_bounds.dual_bound / factor
    if reason == result_pb2.TERMINATION_REASON_INFEASIBLE:
        return BackendResult(x=None, bound=math.inf, timed_out=False, infeasible=True)
    optimal = reason == result_pb2.TERMINATION_REASON_OPTIMAL
    bound = max(bound if math.isfinite(bound) else -math.inf, floor)
    for solution in result.solutions:
        primal = solution.primal_solution
        if primal.feasibility_status == solution_pb2.SOLUTION_STATUS_FEASIBLE:
            return BackendResult(x=decode(form, mathopt.values(form, primal)), bound=bound,
                                 timed_out=not optimal)
    return BackendResult(x=None, bound=bound, timed_out=True)


def closed(value: float, bound: float, gap: float) -> bool:
    return value - bound <= gap * max(abs(value), 1e-300)


def _fix(ix: Indexed, form: Formulation, relaxed: LPAnswer, support: np.ndarray,
         hint: np.ndarray | None, time_limit: float | None, gap: float) -> BackendResult:
    """A fractional LP: the best plan on its support, then the MIP after reduced-cost fixing
    against it (:mod:`solver.backends.fixing`) instead of the whole MIP."""
    start = time.perf_counter()
    assert relaxed.values is not None and relaxed.duals is not None
    found = support_plan(ix, form, support, [relaxed.x, hint], time_limit, gap)
    plans = [p for p in (found, relaxed.x, hint)
             if p is not None and ix.fits(p) and math.isfinite(ix.evaluate(p))]
    if not plans:
        return BackendResult(x=None, bound=relaxed.bound, timed_out=True)
    incumbent = min(plans, key=ix.evaluate)
    logger.info("support plan %.10g, LP bound %.10g", ix.evaluate(incumbent), relaxed.bound)
    late = BackendResult(x=incumbent, bound=relaxed.bound, timed_out=True)
    if mathopt.left(time_limit, start) == 0.0:
        return late  # no phase starts after the deadline (solver.clock)
    if not closed(ix.evaluate(incumbent), relaxed.bound, gap):
        incumbent = neighbourhood_plan(ix, form, relaxed.duals, incumbent,
                                       mathopt.left(time_limit, start), gap)
        logger.info("neighbourhood plan %.10g", ix.evaluate(incumbent))
        late = BackendResult(x=incumbent, bound=relaxed.bound, timed_out=True)
        if mathopt.left(time_limit, start) == 0.0:
            return late
    time_limit = mathopt.left(time_limit, start)
    fixed = fix_and_solve(ix, form, relaxed.duals, incumbent, time_limit, gap)
    bound = max(relaxed.bound, fixed.bound)
    return BackendResult(x=fixed.x, bound=bound, timed_out=not fixed.optimal)
