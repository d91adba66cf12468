"""What an LP solve hands its caller, and the lower bound any row multipliers prove.

Every LP road of :mod:`solver.backends.lp` (dual simplex, barrier, PDLP, the simplex on PDLP's
support) returns an :class:`LPAnswer`; none of them is trusted for its bound, which always
comes from ``dual_bound``: weak duality over the variables' [0, 1] box turns *any* row
multipliers, exact or a first-order method's approximate ones, into a valid lower bound.
Reduced-cost fixing (:mod:`solver.backends.fixing`, :mod:`solver.periodic_close`) rests on
the same sum with one term kept (``reduced_costs``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from solver.backends.formulation import Formulation


def objective_factor(form: Formulation) -> float:
    """A power of two lifting the largest objective coefficient to at least 1: plan costs are
    seconds (1e-6 .. 1e-2), where HiGHS' absolute tolerances (~1e-6) stopped it at a 3e-4
    relative gap on a GPT-2 plan. Objectives already >= 1 are left alone: scaling them *down*
    made HiGHS' time-limited bound much worse on the 5,000-node benchmark (gap 0.56 vs 6e-6).
    A power of two scales exactly."""
    top = float(np.abs(form.obj).max()) if form.obj.size else 0.0
    if top <= 0.0 or not math.isfinite(top) or top >= 1.0:
        return 1.0
    return 2.0 ** -math.floor(math.log2(top))


def dual_bound(form: Formulation, duals: np.ndarray, factor: float) -> float:
    """A lower bound of the LP (so of the MIP) from *any* row multipliers ``duals``.

    Weak duality with the variables' box [0, 1]: for every y,
    ``min c·v ≥ Σ_rows (lo·y if y > 0 else hi·y) + Σ_j min(0, (c − Aᵀy)_j)``. It holds for
    inexact duals too, which is why a first-order method may solve the LP: the bound is
    computed here, not taken on trust."""
    # a multiplier of the wrong sign on a one-sided row only makes the bound -inf: clip it
    # to zero (still "any multipliers"); first-order duals stray there by their tolerance
    duals = np.where(np.isposinf(form.row_hi), np.maximum(duals, 0.0), duals)
    duals = np.where(np.isneginf(form.row_lo), np.minimum(duals, 0.0), duals)
    cost = form.obj * factor
    reduced = cost - np.bincount(form.cols, weights=form.coefs * duals[form.rows],
                                 minlength=cost.size)
    with np.errstate(invalid="ignore"):
        rows = np.where(duals > 0, form.row_lo * duals,
                        np.where(duals < 0, form.row_hi * duals, 0.0))
    total = float(rows.sum() + np.minimum(reduced, 0.0).sum() + form.constant * factor)
    return total / factor if math.isfinite(total) else -math.inf


def reduced_costs(form: Formulation, duals: np.ndarray) -> tuple[float, np.ndarray]:
    """``(bound, reduced)``: ``dual_bound`` of ``duals`` and every variable's reduced cost
    ``c − Aᵀy`` in objective units. For any feasible v, ``obj·v ≥ bound + reduced[j]·v[j]``
    for each j with ``reduced[j] > 0`` (the weak-duality sum of ``dual_bound`` with that one
    term kept), which is what reduced-cost fixing rests on."""
    factor = objective_factor(form)
    duals = np.where(np.isposinf(form.row_hi), np.maximum(duals, 0.0), duals)
    duals = np.where(np.isneginf(form.row_lo), np.minimum(duals, 0.0), duals)
    reduced = form.obj * factor - np.bincount(form.cols, weights=form.coefs * duals[form.rows],
                                              minlength=form.num_vars)
    return dual_bound(form, duals, factor), reduced / factor


@dataclass(frozen=True, slots=True, eq=False)
class LPAnswer:
    """What an LP solve gives a caller that must turn it into a plan and a certificate.

    ``x``: the assignment read off the LP's x (its own plan when the LP optimum is integral;
    the caller scores it against ``bound`` either way), ``None`` when the LP gave none.
    ``bound``: a proven lower bound (``-inf`` when the LP gave none in time, ``inf`` when it
    is infeasible, in which case the MIP is infeasible too). ``weight``: per node, the LP's
    x of the chosen option, which says where a rounded plan may be wrong (``solver.polish``).
    ``next_is_cheap``: the next answer, if asked for, is a simplex on a few thousand columns;
    otherwise it solves the whole LP again, or there is none (so a caller polishes its best
    plan fully before asking). ``duals``: the row multipliers ``bound`` came from, when the
    answer has them (``solver.periodic_close`` fixes options by their reduced costs).
    """

    x: np.ndarray | None
    bound: float
    weight: np.ndarray | None = None
    next_is_cheap: bool = False
    duals: np.ndarray | None = None
    values: np.ndarray | None = None  # the LP's x (options only), when it has a primal
    # PDLP's point before it converged (``lp_answers(interim=True)``): x and bound hold, but
    # the next answer carries on with the same LP (worth only a cheap look: its plan, fixing)
    interim: bool = False
