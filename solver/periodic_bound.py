"""A chain's proven bound from its periodic LP alone: the memory price's last look.

The memory price (:mod:`solver.memory_price`) ends, when its gap is still too wide, with one
more look at the bound at its crossing price. Only the bound is wanted there: the block mix's
plan is better than any plan with identical interior blocks at that price, so none of what a
periodic solve does for its plan is (the support LP, the MIPs, the polish, the LP with two
distinct end blocks); on llama3.1-405b that look was a whole periodic solve, 83-90 s, and the
bound did not move.

What did move it, measured on the captured priced LPs of llama3.1-405b on dp=8,fsdp=8,tp=8
(443,004 variables at 0.003027 s/GB; bound minus price × limit, in seconds; one loaded
2-core machine): PDLP *with* its adaptive restarts. Without restarts (the periodic search's
PDLP, fastest on the tight LPs) the duals oscillate on this half-integral LP: 1.54212 after
5,000 iterations, at best 1.5433 over 8,000 at 0.003212 s/GB; resumed from that point with
restarts, legs of 500 wander between 1.5383 and 1.5456. From zero with adaptive restarts, in
legs of 1,000: 0.109, 1.5391, 1.546428, 1.546438, 1.546453 (the support LP's value, an upper
bound of the LP optimum, is 1.54650). Warm starts were not kept: they were no better.

Validity: each leg's bound is ``dual_bound`` of its duals (weak duality over the variables'
box, valid for *any* multipliers), a lower bound of the periodic LP, which is a lower bound of
the chain (:mod:`solver.periodic`); the best leg's bound is kept. LPs below PDLP's size
(``PDLP_MIN_VARS``) go to ``solve_lp`` (the dual simplex), whose bound is ``dual_bound`` too.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from solver.backends.lp import PDLP_MIN_VARS, PDLP_SHARDS, pdlp_threads, solve_lp
from solver.backends.lp_answer import dual_bound, objective_factor
from solver.backends.pdlp_run import ADAPTIVE_RESTARTS, SMOOTHING, PdlpRunner
from solver.clock import Clock
from solver.periodic import Chain, aggregate, periodic_lp
from solver.problem import ChoiceProblem

logger = logging.getLogger(__name__)

LEG_ITERATIONS = 1_000  # between two looks at the bound (each leg restarts from its average)
MAX_ITERATIONS = 6_000
# a leg that lifts the best bound by less than this share of it ends the run: on 405b's LP at
# 0.003027 s/GB (priced bound) the third leg lifted it by 1.1e-2 of itself, the fourth by
# 3.9e-5, the fifth by 2.2e-6 (~8 s a leg there)
STALL = 1e-4


@dataclass(frozen=True, slots=True)
class ChainBound:
    """The best proven bound and the PDLP iterations it took (0 on the simplex road)."""

    bound: float
    iterations: int


def chain_bound(problem: ChoiceProblem, chain: Chain, clock: Clock, eps: float,
                target: float = math.inf, max_iterations: int = MAX_ITERATIONS
                ) -> ChainBound:
    """A proven lower bound of ``problem`` (a chain without memory rows) from its periodic LP
    with one distinct block at each end: PDLP with adaptive restarts (tolerance ``eps``) in
    legs until it converges, reaches ``target``, stalls, has run ``max_iterations`` or the
    clock runs out; the dual simplex for LPs below PDLP's size."""
    form = periodic_lp(aggregate(problem, chain, 1, 1)).form
    clock.lap("bound_lp")
    if form.num_vars < PDLP_MIN_VARS:
        answer = solve_lp(form, clock.remaining(), eps)
        clock.lap("bound_simplex")
        return ChainBound(answer.bound, 0)
    factor = objective_factor(form)
    runner = PdlpRunner(form, factor, eps, pdlp_threads(), PDLP_SHARDS, SMOOTHING,
                        ADAPTIVE_RESTARTS)
    point, best = None, -math.inf
    while best < target:
        done = 0 if point is None else point.iterations
        left = clock.remaining()
        if done >= max_iterations or (left is not None and left <= 0):
            break
        leg = runner.run(min(LEG_ITERATIONS, max_iterations - done), left, point)
        if leg is None:
            break
        point, last = leg, best
        best = max(best, dual_bound(form, point.duals, factor))
        logger.info("periodic LP bound: %d iterations, %.1f s, bound %.10g", point.iterations,
                    point.seconds, best)
        if point.converged or point.reason.endswith("TIME_LIMIT") \
                or best - last < STALL * abs(best):
            break
    clock.lap("bound_pdlp")
    return ChainBound(best, 0 if point is None else point.iterations)
