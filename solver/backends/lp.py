"""The LP relaxation of the marginal/flow formulation, with a bound computed from its duals.

Small LPs go to a dual simplex (through MathOpt): OR-Tools' Glop, or HiGHS' where the LP has
memory rows (kept in bytes, see ``mathopt.model_proto``) or Glop ends without an optimum.
Glop's pivoting needs fewer iterations on the periodic LPs of measured-curve prices, whose
many distinct reshard prices make them harder than alpha-beta ones (CPU seconds, medians of 3
on one loaded 2-core machine, the LPs as ``periodic_lp`` writes them: gpt2 training dp=2,tp=4
1.13 s against HiGHS' 1.60 s, llama3-8b dp=8,tp=8 1.06 s against 1.10 s; with alpha-beta
link prices 0.06 s both, and 0.15 s against 0.13 s). Glop reports its primal value as the
bound, so its bound is ``dual_bound`` of its duals (within 2.3e-8 of the optimum on those
LPs). Large ones (3-axis meshes: ~400 k variables, most of them flow arcs) go to PDLP,
OR-Tools' first-order primal-dual method, which needs only matrix-vector products.

Mid-size LPs without memory rows (``PDLP_TRY_VARS`` variables and up) try PDLP first, for at
most ``PDLP_TRY_ITERATIONS``, and go to the dual simplex only if it did not converge
(:mod:`solver.backends.pdlp_proto` says why, with the measurements).

PDLP runs **without restarts**, up to 5,000 iterations (a count, not a time, so the answer
stays the same bytes on every machine). On these LPs that is usually 2–4× faster than its
default adaptive restarts: the periodic LP of llama3.1-405b on 8×8×8 (406 k variables) takes
2,112 iterations instead of 7,040 (6.4 s instead of 24 s), llama3-8b-shaped 4×4×4 1,472
instead of 4,224. 8 of the 10 3-axis LPs of the 64-device llama3-8b sweep converge within
the cap, in 1,472–4,992 iterations.

A caller that can prove its plan from approximate duals (the periodic search, by reduced-cost
fixing) may ask for interim answers: PDLP then runs in legs (``PDLP_CHECKS``,
:mod:`solver.backends.pdlp_run`) and the caller stops it once its plan is proven (mixtral-8x7b
dp=2,ep=4,tp=8: at 1,450 of the 2,240 iterations it needs to converge).

Some LPs never settle without restarts (dp=16,fsdp=2,tp=2: not converged after 20,000
iterations). Past the cap, PDLP's duals still prove a bound and the simplex on the columns
its x uses gives a vertex (``lp_answers``); only if the plan from that vertex misses the gap
and that support LP (with its column generation) did not already prove the LP optimum does
HiGHS' barrier solve the LP, with crossover, and the better of the bounds is kept. The
barrier, measured on the three such LPs met so far (2 threads), against the alternatives:

| LP (variables) | barrier, crossover | barrier alone | adaptive restarts |
|---|---|---|---|
| dp=16,fsdp=2,tp=2 (383 k) | 36 s, 1 node fractional | 30 s, 96 | 8,512 iterations, 37 s |
| dp=2,fsdp=2,tp=16 (342 k) | 48 s, 129 fractional | 32 s, 190 | ~30 k, 106 s |
| dp=4,fsdp=2,tp=2 on 16 (560 k) | 80 s, 8 fractional | 62 s, 69 | > 10 k |

The crossover's vertex decodes to a plan that needs little or no polish (without it,
dp=16,fsdp=2,tp=2 ended 0.22 % above its bound; with it, proven optimal). Warm-starting any
PDLP run from an earlier one's point was slower every time it was tried.

A first-order method's answer is approximate, so the bound never comes from the method
itself: ``dual_bound`` turns *any* row multipliers into a lower bound by weak duality over
the variables' [0, 1] box. PDLP's duals at the tolerance below close 405b to below 1e-9 of its
plan; a run cut short by its cap or the time limit still gives a valid, weaker bound. The
barrier's bound goes through ``dual_bound`` too: after crossover HiGHS' duals are exact only
to its tolerances (dp=16,fsdp=2,tp=2: 6.7e-7 below PDLP's bound of the same LP).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from solver.backends.formulation import Formulation, decode_weighted
from solver.backends.pdlp_run import SMOOTHING, PdlpPoint, PdlpRunner
from solver.solution import OPTIMALITY_GAP

logger = logging.getLogger(__name__)

PDLP_MIN_VARS = 200_000  # from here PDLP beats both HiGHS LP methods (module docstring)
# PDLP's relative KKT tolerance: without restarts 1e-6 costs 2,112 iterations on 405b against
# 1,984 at 1e-4 (both close it below 1e-9); 1e-8 did not converge in 8,000 on one sweep LP
PDLP_EPS = 1e-6
# the sharding of PDLP's vectors fixes its summation order: with it fixed the answer is the
# same bytes for any number of threads (checked on 1 and 2 threads)
PDLP_SHARDS = 8
PDLP_MAX_ITERATIONS = 5_000  # the slowest LP that converges without restarts needs 4,992
# where a caller that asks for interim answers sees PDLP's point before it converges (``lp_
# answers``): mixtral-8x7b dp=2,ep=4,tp=8's periodic LP converges in 2,240 iterations, but
# at 1,450 its duals already fix all but 28,068 of 754,880 variables against the plan its x
# rounds to, and the MIP over those proves that plan (0.35 s). Legs shorter than ~130
# iterations never converge (PDLP checks termination every 64 and resumes from the average
# iterate): keep them 150 apart. (A first look at 1,025 proves Mixtral's plan after one leg,
# but lands on a plan 6.6e-8 above the one found at 1,150 while the periodic MIP reports a
# bound above both: docs/solver-backends.md, not adopted until that bound is exact.)
PDLP_CHECKS = (1_000, 1_150, 1_300, 1_450, 1_600, 1_750, 1_900)
# the legs' primal-weight smoothing (``pdlp_run.SMOOTHING``, as for mid-size LPs): on
# Mixtral's LP at 0.8 the duals' bound is 3.6e-5 below the plan after 1,150 iterations (0.5:
# 1.5e-3) and x rounds to the plan 1.3e-7 above the optimum, so fixing keeps 24,777 variables
# and the plan is proven at 1,150 instead of 1,450; llama3-8b-shaped dp=4,fsdp=4,tp=4 (4
# layers, not converged at 5,000 either way) ends with its bound 9e-4 lower than at 0.5
PDLP_LEG_SMOOTHING = SMOOTHING
# mid-size LPs try PDLP first, for at most this many iterations (module docstring): the
# tight LPs measured converge in 704 and 832 (``pdlp_run.SMOOTHING``, tolerance 1e-7)
PDLP_TRY_VARS = 40_000
PDLP_TRY_ITERATIONS = 1_024
# one thread for the mid-size try: on these LPs a second thread costs more in PDLP's
# per-iteration synchronisation than it saves (CPU seconds of the 1,024-capped try, the
# periodic LPs of gpt2 12 layers dp=2,tp=4 / llama3-8b / llama3-70b dp=8,tp=8 training under
# measured-curve prices, one loaded 2-core machine: 0.29 / 0.28 / 0.30 s on one thread
# against 0.43-0.46 / 0.43-0.51 / 0.41-0.47 s on two, and faster in wall time too, 0.26-0.30 s
# against 0.37-0.43 s); the same iterations and bytes either way (``PDLP_SHARDS``)
PDLP_TRY_THREADS = 1
SIMPLEX = "GLOP"  # the dual simplex of LPs without memory rows ("HIGHS": HiGHS' everywhere)


def _usable_cores() -> int:
    if hasattr(os, "sched_getaffinity"):  # the cores this process may run on (Linux)
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


_threads = min(_usable_cores(), PDLP_SHARDS)


def share_cores(processes: int) -> None:
    """Give each large LP of this process its share of the cores when ``processes`` solver
    processes run side by side: two sweep workers on 2 cores each running 2 PDLP threads
    spent most of their time waiting at PDLP's per-iteration barriers (a 3-axis point took
    256 s instead of 154 s). The answer does not depend on it."""
    global _threads
    _threads = max(1, min(_usable_cores() // max(int(processes), 1), PDLP_SHARDS))


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


def pdlp_tolerance(gap: float) -> float:
    """PDLP's relative tolerance for a search that may stop at ``gap``: a tenth of it, never
    tighter than ``PDLP_EPS``. Looser is what lets a sweep's LPs finish without the barrier:
    llama3-8b dp=16,fsdp=2,tp=2 converges in 2,752 iterations at 1e-4 (its bound 1.8e-4 below
    the plan) and not in 8,000 at 1e-5."""
    return max(PDLP_EPS, gap / 10)


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


def lp_answers(form: Formulation, time_limit: float | None, gap: float = OPTIMALITY_GAP,
               interim: bool = False) -> Iterator[LPAnswer]:
    """The LP relaxation of ``form``, cheapest answer first: ask for the next one only when
    the last did not give a plan within ``gap`` of its bound. ``gap`` also sets how exactly
    PDLP solves (``pdlp_tolerance``); the simplex is exact anyway.

    The simplex gives one answer. PDLP's x is an interior point of the optimal face: where
    that face holds more than one vertex it splits nodes between them and rounds badly. So
    after PDLP comes a vertex from the simplex on the columns PDLP's x uses
    (``_solve_on_support``) with PDLP's bound:

    * when PDLP converged, as the second answer. gpt2 dp=2,fsdp=2,tp=2 on 8 devices: PDLP's x
      rounds to a plan 11 % above its bound (still 11 % after the full polish); the vertex,
      on a few thousand of 596 k columns in 0.1 s, gives a plan 0.14 % above it, which the
      polish closes (47 s in all), where the search before took two more LPs and a MIP
      (169 s);
    * past PDLP's cap, as the first: its x is not even optimal (llama3-8b dp=2,fsdp=2,tp=16: a
      plan 20 % above the bound). The vertex, on 1,351 of 341 k columns in 0.1 s, has the same
      LP value and the same 129 fractional nodes as the barrier with crossover, which took
      48 s. The barrier's answer, with the LP optimum as its bound, comes last.

    With ``interim``, PDLP runs in legs (``PDLP_CHECKS``) and each leg that has not converged
    yields an ``interim`` answer first: its x and a proven bound from its duals, for a caller
    that can prove its plan with them (reduced-cost fixing) before PDLP finishes."""
    if form.num_vars < PDLP_MIN_VARS or form.memory_rows:
        if form.num_vars >= PDLP_TRY_VARS and not form.memory_rows:
            yield from _pdlp_then_simplex(form, time_limit, gap)
        else:
            yield _solve_highs_lp(form, time_limit, barrier=False)
        return
    start = time.perf_counter()
    if interim:
        for item in _pdlp_legs(form, time_limit, pdlp_tolerance(gap)):
            if isinstance(item, LPAnswer):
                yield item
            else:
                first, primal, converged = item
    else:
        first, primal, converged = _solve_pdlp(form, time_limit, pdlp_tolerance(gap))
    if converged:
        yield dataclasses.replace(first, next_is_cheap=True)
    support, value = _solve_on_support(form, primal, first.x, _left(time_limit, start))
    bound = max(first.bound, support.bound)
    logger.info("support LP: value %.10g, bound %.10g", value, bound)
    last = first if support.x is None else LPAnswer(
        support.x, bound, support.weight,
        duals=support.duals if support.bound >= first.bound else first.duals,
        values=support.values)
    yield last
    if converged or _support_closed(value, bound, gap):
        return
    time_limit = _left(time_limit, start)
    if time_limit is not None and time_limit <= 0:
        return
    barrier = _solve_highs_lp(form, time_limit, barrier=True)
    kept = barrier if barrier.x is not None else last
    yield LPAnswer(kept.x, max(bound, barrier.bound), kept.weight,
                   duals=barrier.duals if barrier.bound >= bound else last.duals,
                   values=kept.values)


def _support_closed(value: float, bound: float, gap: float) -> bool:
    """Whether the support LP's value (an upper bound of the LP optimum) meets ``bound`` (a
    lower bound of it, over every column) within ``gap``: the LP is then solved as closely as
    the search asks, and the barrier could raise the bound by less than ``gap`` at most.
    llama3-8b-shaped dp=4,fsdp=4,tp=4, 4 layers, whole problem (710 k variables): PDLP stops
    at its cap, the support LP's value is 1.6e-7 above its bound, and the barrier that
    followed ran past 150 s (past the search's time limit) for nothing."""
    return math.isfinite(value) and value - bound <= gap * max(abs(value), 1e-300)


def _pdlp_then_simplex(form: Formulation, time_limit: float | None, gap: float
                       ) -> Iterator[LPAnswer]:
    """A mid-size LP: PDLP for at most ``PDLP_TRY_ITERATIONS``, and when it converged its
    answer and the vertex on its support, as for large LPs; when it did not (the LP's optimum
    is fractional or degenerate, where PDLP crawls), the dual simplex, as for small LPs
    (module docstring)."""
    from solver.backends.pdlp_proto import run_pdlp

    start = time.perf_counter()
    factor = objective_factor(form)
    # a tenth of the large LPs' tolerance: at 1e-6 llama3-8b dp=8,tp=8's x (704 iterations)
    # rounded to a plan 5.5e-7 above the optimum, inside the gap; at 1e-7 (832) to the optimum
    run = run_pdlp(form, factor, time_limit, eps=pdlp_tolerance(gap) / 10,
                   max_iterations=PDLP_TRY_ITERATIONS, threads=PDLP_TRY_THREADS,
                   shards=PDLP_SHARDS)
    logger.info("PDLP: %d variables, %d iterations%s", form.num_vars, run.iterations,
                "" if run.converged else ", not converged: the dual simplex instead")
    first = LPAnswer(None, -math.inf)
    if run.duals is not None:
        first = LPAnswer(None, dual_bound(form, run.duals, factor), duals=run.duals)
    if run.converged and run.x is not None and run.duals is not None:
        choice, weight = decode_weighted(form, run.x)
        first = dataclasses.replace(first, x=choice, weight=weight, values=run.x[:form.num_x])
        yield dataclasses.replace(first, next_is_cheap=True)
        support, value = _solve_on_support(form, run.x, choice, _left(time_limit, start))
        logger.info("support LP: value %.10g, bound %.10g", value,
                    max(first.bound, support.bound))
        if support.x is not None:
            yield LPAnswer(support.x, max(first.bound, support.bound), support.weight,
                           duals=support.duals if support.bound >= first.bound
                           else first.duals, values=support.values)
        return
    left = _left(time_limit, start)
    if left is not None and left <= 0:
        yield first  # out of time: PDLP's duals still bound the LP
        return
    yield _solve_highs_lp(form, left, barrier=False)


def _left(time_limit: float | None, start: float) -> float | None:
    return None if time_limit is None else time_limit - (time.perf_counter() - start)


def solve_lp(form: Formulation, time_limit: float | None, gap: float = OPTIMALITY_GAP
             ) -> LPAnswer:
    """The last of ``lp_answers``: the LP solved as far as this module can."""
    answers = list(lp_answers(form, time_limit, gap))
    return answers[-1]


SUPPORT = 1e-3  # x above this, and each node's largest, span the support LP
PRICING_ROUNDS = 4  # column-generation rounds after the first support LP
PRICED_COLUMNS = 20_000  # columns added per round at most, most negative reduced cost first


def _solve_on_support(form: Formulation, primal: np.ndarray | None, largest: np.ndarray | None,
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
        answer, answer_value, reduced = _restricted_lp(form, keep, factor,
                                                       _left(time_limit, start))
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
    return dataclasses.replace(last, bound=bound, duals=duals), value


def _restricted_lp(form: Formulation, keep: np.ndarray, factor: float,
                   time_limit: float | None) -> tuple[LPAnswer, float, np.ndarray]:
    """``(answer, value, reduced costs in scaled units)`` of the LP on the ``keep`` columns by
    the dual simplex; the answer's bound is ``dual_bound`` of its duals over every column."""
    columns = np.flatnonzero(keep)
    renumber = np.full(form.num_vars, -1, dtype=np.int64)
    renumber[columns] = np.arange(columns.size)
    used = keep[form.cols]
    sub = dataclasses.replace(form, obj=form.obj[columns], rows=form.rows[used],
                              cols=renumber[form.cols[used]], coefs=form.coefs[used], num_x=0,
                              offsets=np.zeros(1, dtype=np.int64), edge_maps=(), flow_maps=(),
                              window_maps=())
    # HiGHS' vertex: the one the measurements in ``lp_answers`` were made with (Glop's, on the
    # same support, can round to a plan that needs the polish)
    run = _run_highs(sub, factor, time_limit, barrier=False, glop=False)
    if run.x is None or run.duals is None:
        return LPAnswer(None, -math.inf), math.inf, np.zeros(0)
    values = np.zeros(form.num_vars)
    values[columns] = run.x
    choice, weight = decode_weighted(form, values)
    value = float(form.obj @ values + form.constant)
    _, reduced = reduced_costs(form, run.duals)
    return (LPAnswer(choice, dual_bound(form, run.duals, factor), weight, duals=run.duals,
                     values=values[:form.num_x]), value, reduced * factor)


def _solve_highs_lp(form: Formulation, time_limit: float | None, barrier: bool) -> LPAnswer:
    """The dual simplex (HiGHS' own bound is exact; Glop's comes from ``dual_bound``), or
    HiGHS' barrier with crossover (module docstring), whose bound comes from ``dual_bound``."""
    factor = objective_factor(form)
    run = _run_highs(form, factor, time_limit, barrier)
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
class _HighsRun:
    """One simplex or barrier LP solve: ``x`` and ``duals`` are ``None`` unless it reached the
    optimum (``x`` also when no primal came back); ``bound`` is HiGHS' own dual bound, or
    ``dual_bound`` of Glop's duals (Glop reports its primal value as the bound)."""

    infeasible: bool = False
    x: np.ndarray | None = None
    duals: np.ndarray | None = None
    bound: float = -math.inf
    stopped: bool = False  # out of time: no other solver is tried


def _run_highs(form: Formulation, factor: float, time_limit: float | None,
               barrier: bool, glop: bool = True) -> _HighsRun:
    """The barrier (HiGHS), or the dual simplex: Glop's on LPs without memory rows (module
    docstring) unless ``glop`` is false, HiGHS' on the others and wherever Glop ends without
    an optimum."""
    if glop and not barrier and not form.memory_rows and SIMPLEX == "GLOP":
        run = _run_mathopt(form, factor, time_limit, barrier, "GLOP")
        if run.duals is not None or run.infeasible or run.stopped:
            return run
        logger.info("Glop ended the LP without an optimum; HiGHS' dual simplex instead")
    return _run_mathopt(form, factor, time_limit, barrier, "HIGHS")


def _run_mathopt(form: Formulation, factor: float, time_limit: float | None, barrier: bool,
                 solver: str) -> _HighsRun:
    from ortools.math_opt import parameters_pb2, result_pb2, solution_pb2

    from solver.backends import mathopt

    started = time.perf_counter()
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
            return _HighsRun(stopped=True)
    else:
        result = mathopt.run(proto, solver, params, model_params)
    reason = result.termination.reason
    if reason == result_pb2.TERMINATION_REASON_INFEASIBLE:
        return _HighsRun(infeasible=True, bound=math.inf)
    if reason != result_pb2.TERMINATION_REASON_OPTIMAL:
        limit = result.termination.limit == result_pb2.LIMIT_TIME
        return _HighsRun(stopped=limit)
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
    return _HighsRun(x=x, duals=duals, bound=bound)


def _solve_pdlp(form: Formulation, time_limit: float | None, eps: float
                ) -> tuple[LPAnswer, np.ndarray | None, bool]:
    """``(answer, x, converged)`` by PDLP in one leg of at most ``PDLP_MAX_ITERATIONS``
    (:mod:`solver.backends.pdlp_run`). Only for LPs without memory rows, which are always
    feasible (every node has a finite option and every edge a route), so no infeasibility
    verdict is needed from an approximate method."""
    runner = PdlpRunner(form, objective_factor(form), eps, _threads, PDLP_SHARDS)
    point = runner.run(PDLP_MAX_ITERATIONS, time_limit, None)
    if point is None:
        return LPAnswer(None, -math.inf), None, False  # the solver refused the input
    _log_pdlp(form, point)
    return _pdlp_answer(form, point), point.primal, point.converged


def _pdlp_answer(form: Formulation, point: PdlpPoint, interim: bool = False) -> LPAnswer:
    choice, weight = decode_weighted(form, point.primal)
    return LPAnswer(choice, dual_bound(form, point.duals, objective_factor(form)), weight,
                    duals=point.duals, values=point.primal[:form.num_x], interim=interim)


def _log_pdlp(form: Formulation, point: PdlpPoint, reason: str = "") -> None:
    logger.info("PDLP: %d variables, %d iterations, %.1f s, %s", form.num_vars,
                point.iterations, point.seconds, reason or point.reason)


def _pdlp_legs(form: Formulation, time_limit: float | None, eps: float
               ) -> Iterator[LPAnswer | tuple[LPAnswer, np.ndarray | None, bool]]:
    """PDLP in legs ending at ``PDLP_CHECKS`` iterations, an interim answer after each leg
    that has not converged, then the rest up to ``PDLP_MAX_ITERATIONS`` in one leg; the last
    item is ``_solve_pdlp``'s triple. A caller that stops asking stops PDLP."""
    start = time.perf_counter()
    runner = PdlpRunner(form, objective_factor(form), eps, _threads, PDLP_SHARDS,
                        PDLP_LEG_SMOOTHING)
    point: PdlpPoint | None = None
    for end in (*(c for c in PDLP_CHECKS if c < PDLP_MAX_ITERATIONS), PDLP_MAX_ITERATIONS):
        done = 0 if point is None else point.iterations
        left = _left(time_limit, start)
        if left is not None and left <= 0 and point is not None:
            break
        leg = runner.run(end - done, left, point)
        if leg is None:
            break
        point = leg
        if point.converged or end == PDLP_MAX_ITERATIONS or point.reason.endswith("TIME_LIMIT"):
            break
        _log_pdlp(form, point, "interim")
        yield _pdlp_answer(form, point, interim=True)
    if point is None:
        yield LPAnswer(None, -math.inf), None, False
        return
    _log_pdlp(form, point)
    yield _pdlp_answer(form, point), point.primal, point.converged
