"""HiGHS' MIP as a lower bound: its objective scaled so that its absolute tolerances are a
small, stated part of the gap, and its dual bound lowered by what those tolerances allow.

HiGHS meets its feasibility and optimality conditions to *absolute* tolerances
(https://ergo-code.github.io/HiGHS/stable/guide/kkt): a node LP is optimal once no reduced
cost is below ``-δ``, ``δ`` the dual feasibility tolerance (default 1e-7,
https://ergo-code.github.io/HiGHS/stable/options/definitions/; MathOpt leaves it there). With
every variable in ``[0, 1]`` the weak-duality sum of ``lp_answer.dual_bound`` puts the LP's
optimum at most ``n·δ`` below the value of such a point (``n`` columns, ``δ`` in HiGHS' units,
i.e. after the objective is multiplied by ``factor``). So ``dual bound − n·δ/factor`` is what
an answer proves, up to HiGHS' cuts and propagation, which work to tolerances of the same
order (a proof in exact arithmetic would take an exact solver).

Measured on mixtral-8x7b dp=2,ep=4,tp=8, the periodic LP's partial MIP after reduced-cost
fixing at 1,150 PDLP iterations (24,777 columns, costs 1e-9 .. 0.5 s, ``objective_factor``
2): HiGHS called 0.2613053432 optimal, while the plan of 0.2613050699 s is a point of the
same MIP (its image checked row by row, on no fixed variable), 2.7e-7 below that "bound";
with the objective scaled 16 times more HiGHS' optimum was 2.4e-9 above that point, 256 and
more times exactly it. The factor is the power of two (at least ``objective_factor``) that
makes the tolerance term at most ``SLACK_SHARE`` of the gap (``MIN_SLACK`` of the incumbent
when the gap asked for is 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from solver.backends import mathopt
from solver.backends.formulation import Formulation
from solver.backends.lp_answer import objective_factor

HIGHS_DUAL_TOLERANCE = 1e-7  # HiGHS' default dual_feasibility_tolerance (module docstring)
SLACK_SHARE = 1 / 16  # of the relative gap: the most the tolerance term may take of it
MIN_SLACK = 1e-10  # relative to |incumbent|: the term's target when the gap asked for is 0
MAX_LIFT = 2.0 ** 30  # the most the objective is scaled above ``objective_factor``


@dataclass(frozen=True, slots=True, eq=False)
class MipAnswer:
    """``bound``: a lower bound of the MIP (``-inf`` when HiGHS gave none); ``values``: its
    best point, when it found one; ``infeasible``: HiGHS proved there is none."""

    bound: float
    values: np.ndarray | None
    infeasible: bool = False


def mip_scale(form: Formulation, incumbent: float, gap: float) -> tuple[float, float]:
    """``(factor, slack)``: the power of two the objective is multiplied by for HiGHS, and
    the tolerance term ``n·δ/factor`` (objective units) its dual bound is lowered by.

    Example:
        >>> form = Formulation(obj=np.full(1000, 1e-3), constant=0.0, num_x=0,
        ...                    offsets=np.zeros(1, dtype=np.int64), rows=np.zeros(0, int),
        ...                    cols=np.zeros(0, int), coefs=np.zeros(0), row_lo=np.zeros(0),
        ...                    row_hi=np.zeros(0), memory_rows=(), edge_maps=())
        >>> factor, slack = mip_scale(form, 0.25, 1e-6)
        >>> factor, slack <= 0.25 * 1e-6 / 16, math.isclose(slack * factor, 1000 * 1e-7)
        (8192.0, True, True)
    """
    base = objective_factor(form)
    scale = abs(incumbent) if math.isfinite(incumbent) and incumbent != 0.0 else 1.0
    target = max(gap * SLACK_SHARE, MIN_SLACK) * scale
    need = form.num_vars * HIGHS_DUAL_TOLERANCE / target
    factor = base
    if need > base:
        factor = min(2.0 ** math.ceil(math.log2(need)), base * MAX_LIFT)
    return factor, form.num_vars * HIGHS_DUAL_TOLERANCE / factor


def partial_mip(form: Formulation, integers: np.ndarray, incumbent: float, gap: float,
                time_limit: float | None) -> MipAnswer:
    """HiGHS on ``form`` with the variables ``integers`` marks integral, scaled by
    :func:`mip_scale` against ``incumbent`` (a plan's cost, or a threshold near it); the
    bound it proves is its dual bound less the tolerance term."""
    from ortools.math_opt import result_pb2, solution_pb2

    factor, slack = mip_scale(form, incumbent, gap)
    proto = mathopt.model_proto(form, factor, integers=integers)
    params, model_params = mathopt.parameters(time_limit, gap, None, form)
    result = mathopt.run(proto, "HIGHS", params, model_params)
    if result.termination.reason == result_pb2.TERMINATION_REASON_INFEASIBLE:
        return MipAnswer(bound=math.inf, values=None, infeasible=True)
    bound = result.termination.objective_bounds.dual_bound / factor - slack
    bound = bound if math.isfinite(bound) else -math.inf
    for solution in result.solutions:
        primal = solution.primal_solution
        if primal.feasibility_status == solution_pb2.SOLUTION_STATUS_FEASIBLE:
            return MipAnswer(bound=bound, values=mathopt.values(form, primal))
    return MipAnswer(bound=bound, values=None)
