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
(:mod:`solver.backends.pdlp_proto` says why, with the measurements). Where a core is idle the
simplex starts beside the try on a thread of its own and is interrupted if PDLP converges
(:mod:`solver.backends.lp_race`): the same answers, a miss no longer paid in wall time.

PDLP runs **without restarts**, up to 5,000 iterations (a count, not a time, so the answer
stays the same bytes on every machine). On these LPs that is usually 2–4× faster than its
default adaptive restarts: the periodic LP of llama3.1-405b on 8×8×8 (406 k variables) takes
2,112 iterations instead of 7,040 (6.4 s instead of 24 s), llama3-8b-shaped 4×4×4 1,472
instead of 4,224. 8 of the 10 3-axis LPs of the 64-device llama3-8b sweep converge within
the cap, in 1,472–4,992 iterations.

A caller that can prove its plan from approximate duals (the periodic search, by reduced-cost
fixing) may ask for interim answers: PDLP then runs in legs (``PDLP_CHECKS``,
:mod:`solver.backends.pdlp_run`) and the caller stops it once its plan is proven (mixtral-8x7b
dp=2,ep=4,tp=8: at 641 of the 2,240 iterations it needs to converge, with the first leg's
shorter major period, ``EARLY_LOOK``).

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

import numpy as np

from solver.backends import lp_race, mathopt, simplex
from solver.backends.formulation import Formulation, decode_weighted
from solver.backends.lp_answer import LPAnswer, dual_bound, objective_factor
from solver.backends.pdlp_run import MAJOR_ITERATIONS, SMOOTHING, PdlpPoint, PdlpRunner
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
# iterate): keep them 150 apart. The first look is at 1,025: there fixing against the plan x
# rounds to keeps 36,766 variables and the partial MIP (its bound made a true one by
# ``mip_bound``) finds and proves the optimum, 0.2613050699 s, after one leg instead of legs
# of 1,000 and 150 (docs/solver-backends.md)
PDLP_CHECKS = (1_025, 1_175, 1_325, 1_475, 1_625, 1_775, 1_925)
# A caller that wants a plan more than a bound caps PDLP one leg after the last look, where
# the support LP's vertex is the plan (``max_iterations``): a memory price's exploring
# probes (``solver.memory_price``) and a provisional solve (``solver.solve(provisional=)``:
# llama3-70b dp=8,tp=8's second shared-reshard round, 256,967 variables: 6.6 s to this cap
# instead of 11.7 s to ``PDLP_MAX_ITERATIONS``, and the support's plan 1.0324996 s instead
# of 1.0325428 s, the same rounds after it)
PDLP_PLAN_ITERATIONS = PDLP_CHECKS[-1] + 150
# A caller may ask for an earlier first look (``lp_answers(early=True)``): a first leg of
# ``EARLY_LOOK`` iterations with a major iteration every ``EARLY_MAJOR`` (``pdlp_run.
# MAJOR_ITERATIONS``: the primal weight re-estimated four times as often), then the legs at
# ``PDLP_CHECKS`` at PDLP's default period. On Mixtral's LP the duals at 641 iterations are
# then 8.2e-5 below the optimum (5.2e-2 with every 64; 5.8e-5 at 1,025), fixing keeps 51,945
# variables and the partial MIP proves the plan (one slow 2-core machine, two runs each:
# periodic LP 8.72 / 7.56 -> 6.84 / 5.91 s, the same objective and bound). On the plain
# periodic LPs of llama3.1-405b (484,528 variables) and of llama3-8b-shaped dp=4,fsdp=4,tp=4
# (not converged in 5,000 either way) the bounds after each leg stay within 1 % of the legs
# without it. Not for LPs that carry a memory price: on 405b's priced probes PDLP then did not
# converge in 5,000 (4,997 without) and the job took 234 s instead of 189 (one run each).
EARLY_LOOK = 641
EARLY_MAJOR = 16
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
# the try keeps PDLP's default major period (``pdlp_run.MAJOR_ITERATIONS``). Every 32 cut the
# iterations of every periodic LP that converges (training, measured-curve prices: gpt2 12
# layers dp=2,tp=4 704 -> 576, llama3-8b dp=8,tp=8 832 -> 608: a few hundredths of a second
# of CPU), but the look at a try that misses got worse where it matters most:
# llama3-8b dp=8,tp=8 with --share-reshards, second round, fixing kept 13,018 variables
# instead of 3,606, past ``LOOK_MIP_VARS``, and the dual simplex ran (plan CPU 12.1 -> 17.2 s;
# docs/solver-backends.md, "Session 10")
# one thread for the mid-size try: on these LPs a second thread costs more in PDLP's
# per-iteration synchronisation than it saves (CPU seconds of the 1,024-capped try, the
# periodic LPs of gpt2 12 layers dp=2,tp=4 / llama3-8b / llama3-70b dp=8,tp=8 training under
# measured-curve prices, one loaded 2-core machine: 0.29 / 0.28 / 0.30 s on one thread
# against 0.43-0.46 / 0.43-0.51 / 0.41-0.47 s on two, and faster in wall time too, 0.26-0.30 s
# against 0.37-0.43 s); the same iterations and bytes either way (``PDLP_SHARDS``)
PDLP_TRY_THREADS = 1
# the dual simplex starts beside the PDLP try on a second core (``lp_race``): the same answer,
# the miss's time saved; "always": even where other processes keep every core busy
RACE_SIMPLEX: bool | str = os.environ.get("SOLVER_RACE_SIMPLEX", "1") != "0"
if os.environ.get("SOLVER_RACE_SIMPLEX") == "always":
    RACE_SIMPLEX = "always"


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


def pdlp_threads() -> int:
    """The threads each large LP's PDLP runs on in this process (``share_cores``)."""
    return _threads


def pdlp_tolerance(gap: float) -> float:
    """PDLP's relative tolerance for a search that may stop at ``gap``: a tenth of it, never
    tighter than ``PDLP_EPS``. Looser is what lets a sweep's LPs finish without the barrier:
    llama3-8b dp=16,fsdp=2,tp=2 converges in 2,752 iterations at 1e-4 (its bound 1.8e-4 below
    the plan) and not in 8,000 at 1e-5."""
    return max(PDLP_EPS, gap / 10)


def lp_answers(form: Formulation, time_limit: float | None, gap: float = OPTIMALITY_GAP,
               interim: bool = False, look: bool = False, early: bool = False,
               max_iterations: int | None = None, barrier: bool = True) -> Iterator[LPAnswer]:
    """The LP relaxation of ``form``, cheapest answer first: ask for the next one only when
    the last did not give a plan within ``gap`` of its bound. ``gap`` also sets how exactly
    PDLP solves (``pdlp_tolerance``); the simplex is exact anyway.

    The simplex gives one answer. PDLP's x is an interior point of the optimal face: where
    that face holds more than one vertex it splits nodes between them and rounds badly. So
    after PDLP comes a vertex from the simplex on the columns PDLP's x uses
    (``simplex.solve_on_support``) with PDLP's bound:

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
    that can prove its plan with them (reduced-cost fixing) before PDLP finishes. With
    ``look``, a mid-size LP whose PDLP try did not converge does the same before its dual
    simplex (``_pdlp_then_simplex``). With ``early`` as well, the first interim answer comes
    after ``EARLY_LOOK`` iterations run with a shorter major period (for LPs without a
    memory price in their objective: see ``EARLY_LOOK``). ``max_iterations`` caps PDLP on
    that road (never above ``PDLP_MAX_ITERATIONS``, the default; a caller that wants a plan
    more than a bound may ask for fewer). Without ``barrier`` the answers end with the
    support LP's: a caller whose answer is provisional (a shared-reshard round, wanted for
    its plan) does not pay the barrier for a tighter bound (llama3-70b's first round: 27 s,
    and the polish of its vertex 16 s more, for a plan 0.004 % cheaper)."""
    if form.num_vars < PDLP_MIN_VARS or form.memory_rows:
        if form.num_vars >= PDLP_TRY_VARS and not form.memory_rows:
            yield from _pdlp_then_simplex(form, time_limit, gap, look)
        else:
            yield simplex.solve_highs_lp(form, time_limit, barrier=False)
        return
    start = time.perf_counter()
    if interim:
        for item in _pdlp_legs(form, time_limit, pdlp_tolerance(gap), early, max_iterations):
            if isinstance(item, LPAnswer):
                yield item
            else:
                first, primal, converged = item
    else:
        first, primal, converged = _solve_pdlp(form, time_limit, pdlp_tolerance(gap),
                                               max_iterations)
    if converged:
        yield dataclasses.replace(first, next_is_cheap=True)
    support, value = simplex.solve_on_support(form, primal, first.x,
                                              mathopt.left(time_limit, start))
    bound = max(first.bound, support.bound)
    logger.info("support LP: value %.10g, bound %.10g", value, bound)
    last = first if support.x is None else LPAnswer(
        support.x, bound, support.weight,
        duals=support.duals if support.bound >= first.bound else first.duals,
        values=support.values)
    yield last
    if converged or not barrier or _support_closed(value, bound, gap):
        return
    time_limit = mathopt.left(time_limit, start)
    if time_limit is not None and time_limit <= 0:
        return
    barrier = simplex.solve_highs_lp(form, time_limit, barrier=True)
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


def _pdlp_then_simplex(form: Formulation, time_limit: float | None, gap: float,
                       look: bool = False) -> Iterator[LPAnswer]:
    """A mid-size LP: PDLP for at most ``PDLP_TRY_ITERATIONS``, and when it converged its
    answer and the vertex on its support, as for large LPs; when it did not (the LP's optimum
    is fractional or degenerate, where PDLP crawls), the dual simplex, as for small LPs
    (module docstring). With ``look``, the unconverged point comes first as an ``interim``
    answer (its x and the bound its duals prove): a caller that proves its plan with it
    (reduced-cost fixing) never asks for the simplex. The periodic LPs of shared reshards
    are integral but degenerate, and PDLP's bound closes before its residuals do (llama3-8b
    dp=8,tp=8 with --share-reshards, third round: at 1,024 iterations the duals prove a
    bound 4e-7 below the optimum, whose dual simplex takes 2.3 s, loaded machine)."""
    from solver.backends.pdlp_proto import run_pdlp

    start = time.perf_counter()
    factor = objective_factor(form)
    proto = mathopt.model_proto(form, factor, integral=False)  # PDLP's and the simplex's
    race = _start_simplex_race(form, proto, time_limit, start)
    try:
        # a tenth of the large LPs' tolerance: at 1e-6 llama3-8b dp=8,tp=8's x (704
        # iterations) rounded to a plan 5.5e-7 above the optimum; at 1e-7 (832) to it
        run = run_pdlp(form, factor, time_limit, eps=pdlp_tolerance(gap) / 10,
                       max_iterations=PDLP_TRY_ITERATIONS, threads=PDLP_TRY_THREADS,
                       shards=PDLP_SHARDS, proto=proto,
                       calling=None if race is None else race.release)
        logger.info("PDLP: %d variables, %d iterations%s", form.num_vars, run.iterations,
                    "" if run.converged else ", not converged: the dual simplex instead")
        if run.converged and run.x is not None and run.duals is not None and race is not None:
            race.interrupt()  # before the support LP, which wants the core
        yield from _after_pdlp(form, run, factor, time_limit, start, look, race, proto)
    finally:
        if race is not None:
            race.cancel()


def _start_simplex_race(form: Formulation, proto, time_limit: float | None,
                        start: float) -> lp_race.SimplexRace | None:
    """The dual simplex on a thread of its own beside PDLP's one-thread try
    (:mod:`solver.backends.lp_race`), where this process may use a second core
    (``share_cores``) that no other runnable thread of the machine needs right now
    (``lp_race.runnable_elsewhere``) and ``RACE_SIMPLEX`` is on; ``None`` otherwise."""
    if not RACE_SIMPLEX or _threads < PDLP_TRY_THREADS + 1:
        return None
    if RACE_SIMPLEX != "always":
        busy = lp_race.runnable_elsewhere()
        if busy is not None and busy + PDLP_TRY_THREADS + 1 > _usable_cores():
            return None
    limit = mathopt.left(time_limit, start)
    return lp_race.SimplexRace(lambda interrupter: simplex.solve_highs_lp(
        form, limit, barrier=False, proto=proto, interrupter=interrupter))


def _after_pdlp(form: Formulation, run, factor: float, time_limit: float | None,
                start: float, look: bool, race: lp_race.SimplexRace | None,
                proto) -> Iterator[LPAnswer]:
    """``_pdlp_then_simplex``'s answers once PDLP's try ended: the converged point and the
    vertex on its support, or (with ``look``) the missed point as an interim answer and then
    the dual simplex's answer (``race``'s when it runs, the same answer)."""
    first = LPAnswer(None, -math.inf)
    if run.duals is not None:
        first = LPAnswer(None, dual_bound(form, run.duals, factor), duals=run.duals)
    if run.converged and run.x is not None and run.duals is not None:
        choice, weight = decode_weighted(form, run.x)
        first = dataclasses.replace(first, x=choice, weight=weight, values=run.x[:form.num_x])
        yield dataclasses.replace(first, next_is_cheap=True)
        support, value = simplex.solve_on_support(form, run.x, choice,
                                                  mathopt.left(time_limit, start))
        logger.info("support LP: value %.10g, bound %.10g", value,
                    max(first.bound, support.bound))
        if support.x is not None:
            yield LPAnswer(support.x, max(first.bound, support.bound), support.weight,
                           duals=support.duals if support.bound >= first.bound
                           else first.duals, values=support.values)
        return
    if look and run.x is not None and run.duals is not None:
        choice, weight = decode_weighted(form, run.x)
        yield dataclasses.replace(first, x=choice, weight=weight, values=run.x[:form.num_x],
                                  interim=True)
    left = mathopt.left(time_limit, start)
    if left is not None and left <= 0:
        yield first  # out of time: PDLP's duals still bound the LP
        return
    if race is not None:
        yield race.result()
        return
    yield simplex.solve_highs_lp(form, left, barrier=False, proto=proto)


def solve_lp(form: Formulation, time_limit: float | None, gap: float = OPTIMALITY_GAP
             ) -> LPAnswer:
    """The last of ``lp_answers``: the LP solved as far as this module can."""
    answers = list(lp_answers(form, time_limit, gap))
    return answers[-1]


def _solve_pdlp(form: Formulation, time_limit: float | None, eps: float,
                max_iterations: int | None = None
                ) -> tuple[LPAnswer, np.ndarray | None, bool]:
    """``(answer, x, converged)`` by PDLP in one leg of at most ``max_iterations`` (at most,
    and by default, ``PDLP_MAX_ITERATIONS``; :mod:`solver.backends.pdlp_run`). Only for LPs
    without memory rows, which are always feasible (every node has a finite option and every
    edge a route), so no infeasibility verdict is needed from an approximate method."""
    start = time.perf_counter()
    runner = PdlpRunner(form, objective_factor(form), eps, _threads, PDLP_SHARDS)
    # PDLP's clock starts after the set-up (a 35 M-column LP: ~20 s of matrix copies)
    point = runner.run(min(max_iterations or PDLP_MAX_ITERATIONS, PDLP_MAX_ITERATIONS),
                       mathopt.left(time_limit, start), None)
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


def _pdlp_legs(form: Formulation, time_limit: float | None, eps: float, early: bool = False,
               max_iterations: int | None = None
               ) -> Iterator[LPAnswer | tuple[LPAnswer, np.ndarray | None, bool]]:
    """PDLP in legs ending at ``PDLP_CHECKS`` iterations (``early``: a first one at
    ``EARLY_LOOK`` with a major iteration every ``EARLY_MAJOR``), an interim answer after each
    leg that has not converged, then the rest up to ``max_iterations`` (at most, and by
    default, ``PDLP_MAX_ITERATIONS``) in one leg; the last item is ``_solve_pdlp``'s triple.
    A caller that stops asking stops PDLP."""
    start = time.perf_counter()
    runner = PdlpRunner(form, objective_factor(form), eps, _threads, PDLP_SHARDS,
                        PDLP_LEG_SMOOTHING)
    point: PdlpPoint | None = None
    max_iterations = min(max_iterations or PDLP_MAX_ITERATIONS, PDLP_MAX_ITERATIONS)
    checks = (EARLY_LOOK, *(c for c in PDLP_CHECKS if c > EARLY_LOOK)) if early \
        else PDLP_CHECKS
    for end in (*(c for c in checks if c < max_iterations), max_iterations):
        done = 0 if point is None else point.iterations
        left = mathopt.left(time_limit, start)
        if left is not None and left <= 0 and point is not None:
            break
        major = EARLY_MAJOR if early and point is None else MAJOR_ITERATIONS
        leg = runner.run(end - done, left, point, major)
        if leg is None:
            break
        point = leg
        if point.converged or end == max_iterations or point.reason.endswith("TIME_LIMIT"):
            break
        _log_pdlp(form, point, "interim")
        yield _pdlp_answer(form, point, interim=True)
    if point is None:
        yield LPAnswer(None, -math.inf), None, False
        return
    _log_pdlp(form, point)
    yield _pdlp_answer(form, point), point.primal, point.converged
