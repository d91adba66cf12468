"""A chain of identical blocks (a model's layers): the periodic LP first, then tied blocks.

The chain's periodic LP (:mod:`solver.periodic`) is the size of a few blocks and its bound is a
bound of the whole problem; it is tried with one and then two distinct blocks at each end, and
an integral LP optimum whose plan meets the bound is the answer. When it does not (the plan
pays at the junctions between the distinct and the tied blocks, where the LP's linking is
relaxed, or PDLP's x split nodes between optimal vertices), the tied blocks are fixed to the
LP's choices and the rest re-optimised exactly only where the LP hesitated (:func:`_polish`,
over the free nodes alone: :func:`solver.polish.free_part`);
then the next LP answer (a vertex on PDLP's support, a tenth of a second) gets the same; only
then is all of the rest re-optimised (:mod:`solver.polish`), before any answer that solves the
whole LP again. While PDLP runs, its point is looked at between legs: the plan its x rounds to,
proven by reduced-cost fixing and the partial MIP as soon as fixing leaves a small MIP
(:meth:`_Search.interim`). An LP small enough for the simplex that split a node of the rest or of a
distinct block is first closed by its partial MIP (:mod:`solver.periodic_close`: those nodes
integral, the tied representative free, after reduced-cost fixing), which proves llama3-70b on
dp=8,tp=8 optimal with one distinct block at each end; its first look
(:meth:`_Search.first_look`: the best periodic plan on what fixing against a threshold just
above the LP bound keeps) comes before the LP's plan is polished, and often makes the polish
unnecessary. After PDLP the plans of the MIPs on the LP's support and near its reduced costs
(:func:`solver.periodic_close.neighbourhood_plan`) come before the LP's own plan is polished;
where fixing against the best plan leaves too many variables for the partial MIP, partial MIPs
over the variables of least reduced cost prove part of the gap
(:func:`solver.periodic_close.threshold_keeping`). If a gap is left, the plan says what
it was restricted to, and only a gap above ``GOOD_ENOUGH_GAP`` goes on to the search with all
interior blocks tied but free (:func:`solve_restricted`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import numpy as np

from solver.backends.lp import PDLP_MIN_VARS, PDLP_PLAN_ITERATIONS, lp_answers
from solver.backends.lp_answer import LPAnswer
from solver.clock import Clock
from solver.errors import Infeasible, NoSolutionError
from solver.graph_search import Sizes, closed, finish, sizes_of, solve_graph
from solver.periodic import (
    Aggregated,
    Chain,
    PeriodicLP,
    aggregate,
    expand,
    interior_groups,
    periodic_lp,
)
from solver.periodic_close import (
    FRACTIONAL,
    MAX_VARS,
    close_gap,
    first_look_plan,
    first_look_target,
    kept_after_fixing,
    neighbourhood_plan,
    support_plan,
    threshold_keeping,
    worth_closing,
)
from solver.polish import decided_elsewhere, fix, free_part, tied_run
from solver.problem import ChoiceProblem
from solver.solution import OPTIMALITY_GAP, Solution, SolveStatus
from solver.untied import solve_untied

logger = logging.getLogger(__name__)

PERIODIC_ENDS = (1, 2)  # distinct blocks kept at each end, tried in turn until the gap closes
# A restricted plan within this of the proven bound is kept without the tied search (which
# costs the whole problem again: minutes on 3-axis meshes); the bar for restricted plans.
GOOD_ENOUGH_GAP = 5e-3
# The next LP (two more distinct blocks) is tried when the gap is wider than GOOD_ENOUGH_GAP,
# or when the last LP was small enough for the dual simplex (2-axis meshes: ~1 s, and
# llama3-8b-shaped closes only with two). A size, not a time: with a time the plan depended on
# the machine's speed (dp=4,fsdp=8,tp=2 came out proven optimal in one sweep run and 7e-6
# short in another, its first LP taking 9.8 s and 19 s).
RESTRICTION = "identical interior layers take identical strategies"
GIVEN = "given"  # ``_Search.how`` of the caller's incumbent (``solve_periodic``)
# PDLP's interim points (``lp_answers(interim=True)``) are closed by the partial MIP only when
# fixing leaves at most this many variables: on mixtral-8x7b dp=2,ep=4,tp=8 28 k took 0.35 s
# and 88 k 3.5 s, while 150 more PDLP iterations take ~1 s and shrink what fixing keeps; at
# its early look (``lp.EARLY_LOOK``, 641 iterations) fixing keeps 51,945 and the MIP proves
# the plan in ~0.8 s on a slow machine, where the next look (1,025) costs ~2.5 s of PDLP
INTERIM_MIP_VARS = 60_000
# the same look at a mid-size LP's unconverged PDLP try (``lp_answers(look=True)``), before
# its dual simplex: llama3-8b dp=8,tp=8 with --share-reshards, fixing kept 3,606 and 7,364 of
# 77-87 k variables and the MIPs proved the plans in 0.03 and 0.08 s; where the LP optimum is
# fractional it kept 35,524 of 45,836 and the MIP spent 1.4 s proving nothing
LOOK_MIP_VARS = 10_000
# where fixing against the best plan keeps more than ``MAX_VARS``, the partial MIP over this
# many proves part of the gap (``periodic_close.threshold_keeping``); on the whole 4-layer
# dp=4,fsdp=4,tp=4 LP a MIP of 67 k variables took 9 s, of 150 k 46 s
REACH_VARS = 60_000
# a MIP over more variables runs only if its threshold closes at least this share of the gap
# left: llama3.1-405b's priced LPs have flat duals (60 k and 120 k variables prove 1.49606
# and 1.49613 against a plan at 1.6046), the 4-layer shape's do not (25 %, then 15 %)
REACH_MIN_SHARE = 1 / 8


@dataclasses.dataclass
class _Search:
    """The periodic search's state: the proven bound and the best plan so far (mutable, local
    to one solve)."""

    problem: ChoiceProblem
    chain: Chain
    clock: Clock
    gap: float
    bound: float = -math.inf
    best: tuple[int, ...] | None = None
    best_value: float = math.inf
    how: str = ""  # how the best plan was polished: "", "near" or "all"
    best_ends: int = 0  # distinct end blocks of the LP the best plan came from
    duals: np.ndarray | None = None  # row multipliers of the last LP's best bound
    weight: np.ndarray | None = None  # that answer's x of each LP node's chosen option
    probe: bool = False  # a caller's probe: no polish of all the rest after PDLP (solve_periodic)
    pdlp_iterations: int | None = None  # PDLP's cap on the large-LP road (None: lp's own)
    early_look: bool = True  # PDLP's early first look (``solve(early_look=)``)
    # ``solve(provisional=)``: a plan is wanted more than a bound, so no barrier after PDLP's
    # cap and no polish of all the rest around a plan (PDLP's cap is ``pdlp_iterations``)
    provisional: bool = False

    def done(self, gap: float) -> bool:
        return self.best is not None and closed(self.best_value, self.bound, gap)

    def offer(self, choices: tuple[int, ...], value: float, how: str, ends: int) -> None:
        if value < self.best_value:
            self.best, self.best_value, self.how, self.best_ends = choices, value, how, ends
            self.clock.consider(choices)

    def solution(self, before: Sizes, after: Sizes) -> Solution:
        assert self.best is not None
        answer = finish(self.problem, self.best, self.bound, self.clock.expired(), self.clock,
                        "periodic", before, after)
        return _restricted_unless_optimal(answer, _periodic_restriction(self.best_ends,
                                                                        self.how))

    def run_lp(self, ends: int) -> tuple[PeriodicLP, float]:
        """Every answer of the periodic LP with ``ends`` distinct blocks at each end, each made
        a plan, until the gap closes; returns the LP and its best bound."""
        agg = aggregate(self.problem, self.chain, ends, ends)
        lp = periodic_lp(agg)
        self.clock.lap("aggregate")
        self.duals = None
        # two thirds of the time at most: if the LP cannot finish, the restricted search needs
        # the rest. (A half starved llama3-8b-shaped dp=4,fsdp=2,tp=2 in a -j 2 sweep under a
        # 300 s limit: 10,000 PDLP iterations plus the barrier on 560 k variables took ~140 s
        # on one core, the LP gave up, and the tied search ran out of time at a 3.6 % gap.)
        remaining = self.clock.remaining()
        lp_bound, tried, polished = -math.inf, set(), None
        closable = lp.form.num_vars <= MAX_VARS
        # the early look is not for LPs that carry a memory price (``lp.EARLY_LOOK``): the
        # memory price's probes are the only ones (``solver.memory_price``); nor for a
        # caller's degenerate LPs (``solve(early_look=False)``)
        for relaxed in lp_answers(lp.form, None if remaining is None else remaining * 2 / 3,
                                  self.gap, interim=not closable, look=True,
                                  early=self.early_look and not self.probe,
                                  max_iterations=self.pdlp_iterations,
                                  barrier=not self.provisional):
            self.clock.lap("periodic_lp")
            if relaxed.duals is not None and relaxed.bound >= lp_bound:
                self.duals, self.weight = relaxed.duals, relaxed.weight
            lp_bound = max(lp_bound, relaxed.bound)
            self.bound = max(self.bound, lp_bound)
            if relaxed.interim:
                if self.interim(agg, lp, ends, relaxed) or (self.best is not None
                                                            and self.clock.expired()):
                    break  # proven, or out of time with the plan at hand (solver.clock)
                continue
            if relaxed.x is not None and relaxed.x.tobytes() not in tried:
                tried.add(relaxed.x.tobytes())
                self.offer(*self.lp_plan(agg, lp, ends, relaxed, closable), ends)
            if self.best is not None and self.clock.expired():
                break  # the plan at hand is the answer (solver.clock)
            if not closable and not self.done(self.gap):
                self.close(agg, lp, ends, exact=False)
            if self.best != polished and not self.done(self.gap) and not relaxed.next_is_cheap \
                    and not closable and not self.probe and not self.provisional \
                    and not self.clock.expired():
                polished = self._polish_rest(ends)
            if self.done(self.gap):
                break
        if closable and not self.done(self.gap) and lp_bound > -math.inf \
                and not self.clock.expired():
            # the partial MIP first: its bound may prove the plan at hand, and its plan
            # may be better than what the polish of all the rest would find
            self.close(agg, lp, ends)
            if not self.done(self.gap) and not self.provisional and not self.clock.expired():
                self._polish_rest(ends)
        return lp, lp_bound

    def lp_plan(self, agg: Aggregated, lp: PeriodicLP, ends: int, relaxed: LPAnswer,
                closable: bool) -> tuple[tuple[int, ...], float, str]:
        """The plan an LP answer gives (:func:`_periodic_plan`). After PDLP (not
        ``closable``) the plans of the MIPs on its support and near its reduced costs come
        first (under a second each on a 3-axis LP); the LP's own plan is polished only if
        it is still the best: on llama3-8b-shaped dp=4,fsdp=4,tp=4 (4 layers) that polish
        took 27-66 s for a plan 7 % above the one near the reduced costs."""
        polish = True
        if closable:
            self.first_look(agg, lp, ends, relaxed)
            polish = not self.done(self.gap)  # the first look may have proven the optimum
        if not closable and not self.done(self.gap):
            self.on_support(agg, lp, ends, relaxed)
            self.neighbourhood(agg, lp, ends, relaxed)
            assert relaxed.x is not None
            own = expand(self.chain, agg, lp.lift(relaxed.x), self.problem.num_nodes)
            polish = self.problem.evaluate(own) < self.best_value
        return _periodic_plan(self.problem, self.chain, agg, ends, lp, relaxed, self.clock,
                              self.gap, self.bound, polish)

    def first_look(self, agg: Aggregated, lp: PeriodicLP, ends: int, relaxed: LPAnswer
                   ) -> None:
        """An LP answer that split a node the partial MIP makes integral, and whose own plan
        misses the gap, before that plan is polished: the best periodic plan among the
        variables fixing against a threshold a little above the LP bound keeps
        (:func:`solver.periodic_close.first_look_target`, :func:`~solver.periodic_close.
        first_look_plan`), then the partial MIP against that plan for the proof. llama3-70b
        dp=8,tp=8 under measured-curve prices: ~0.1 s for both, where the polish of the LP's
        plan took 0.4 s before the MIP against its cost proved it (the same optimum);
        llama3-8b dp=8,tp=8 with every axis at alpha-beta NVLink prices: the optimum with one
        distinct block at each end, where the polishes found a plan 0.6 % above it and the
        search needed a second LP (solve 2.54 -> 0.60 CPU s, medians of 5)."""
        if relaxed.duals is None or relaxed.weight is None or relaxed.x is None \
                or self.done(self.gap) or self.clock.expired() \
                or not worth_closing(lp, agg, relaxed.weight):
            return
        own = expand(self.chain, agg, lp.lift(relaxed.x), self.problem.num_nodes)
        self.offer(own, self.problem.evaluate(own), "", ends)
        if self.done(self.gap):
            return  # the LP's own plan is proven (PDLP's x splits nodes by a hair)
        target = first_look_target(lp, agg, relaxed.duals)
        if target is None:
            return
        x = first_look_plan(lp, agg, relaxed.duals, target, self.clock.remaining(), self.gap)
        self.clock.lap("periodic_first_look")
        if x is None:
            return  # no periodic plan below the threshold: the search goes on as before
        choices = expand(self.chain, agg, lp.lift(x), self.problem.num_nodes)
        value = self.problem.evaluate(choices)
        logger.info("first look below %.10g (LP bound %.10g): plan %.10g", target, self.bound,
                    value)
        self.offer(choices, value, "", ends)
        if not self.done(self.gap):
            self.duals, self.weight = relaxed.duals, relaxed.weight
            self.partial_mip(agg, lp, ends, self.best_value)  # the proof, against that plan

    def interim(self, agg: Aggregated, lp: PeriodicLP, ends: int, relaxed: LPAnswer) -> bool:
        """A look at PDLP's point before it converges (``lp_answers(interim=True)``, or a
        mid-size LP's unconverged try, ``look``): its x as a plan, unpolished, then the
        partial MIP when reduced-cost fixing against the best plan leaves at most
        ``INTERIM_MIP_VARS`` variables (``LOOK_MIP_VARS`` on a mid-size LP, whose dual
        simplex comes next). True when the gap is closed."""
        if relaxed.x is None:
            return False
        choices = expand(self.chain, agg, lp.lift(relaxed.x), self.problem.num_nodes)
        self.offer(choices, self.problem.evaluate(choices), "", ends)
        if not self.done(self.gap):
            limit = LOOK_MIP_VARS if lp.form.num_vars < PDLP_MIN_VARS else INTERIM_MIP_VARS
            self.close(agg, lp, ends, exact=False, limit=limit)
        return self.done(self.gap)

    def _polish_rest(self, ends: int) -> tuple[int, ...] | None:
        """The next answer, if any, solves the whole LP again: first polish all of the rest
        around the tied run."""
        if self.best is None:
            return None
        answer = _polish(self.problem, tied_run(self.chain, ends, self.problem.num_nodes),
                         self.best, self.clock, self.gap)
        if answer is not None and answer.objective <= self.best_value:
            self.best, self.best_value, self.best_ends = answer.choices, answer.objective, ends
            # around the caller's plan its tied layers stay the caller's (``GIVEN``)
            self.how = "all" if answer.optimal and self.how != GIVEN else self.how
            self.clock.consider(answer.choices)
        return self.best

    def on_support(self, agg: Aggregated, lp: PeriodicLP, ends: int, relaxed: LPAnswer
                   ) -> None:
        """The best periodic plan on a fractional LP answer's support
        (:func:`solver.periodic_close.support_plan`), offered as a plan."""
        if relaxed.values is None or relaxed.weight is None \
                or not (relaxed.weight < 1.0 - FRACTIONAL).any() or self.clock.expired():
            return
        values = np.zeros(lp.form.num_vars)
        values[:relaxed.values.size] = relaxed.values
        x = support_plan(lp, agg, values, self.clock.remaining(), self.gap)
        self.clock.lap("periodic_support_mip")
        if x is None:
            return
        choices = expand(self.chain, agg, lp.lift(x), self.problem.num_nodes)
        value = self.problem.evaluate(choices)
        logger.info("periodic MIP on the LP's support: plan %.10g (best so far %.10g)", value,
                    self.best_value)
        self.offer(choices, value, "", ends)

    def neighbourhood(self, agg: Aggregated, lp: PeriodicLP, ends: int, relaxed: LPAnswer
                      ) -> None:
        """The best periodic plan near the LP's reduced costs
        (:func:`solver.periodic_close.neighbourhood_plan`), offered as a plan."""
        if relaxed.duals is None or self.best is None or self.done(self.gap) \
                or self.clock.expired():
            return
        x = neighbourhood_plan(lp, agg, relaxed.duals, self.best_value, self.clock.remaining(),
                               self.gap)
        self.clock.lap("periodic_neighbourhood_mip")
        if x is None:
            return
        choices = expand(self.chain, agg, lp.lift(x), self.problem.num_nodes)
        value = self.problem.evaluate(choices)
        logger.info("periodic MIP near the LP's reduced costs: plan %.10g (best so far %.10g)",
                    value, self.best_value)
        self.offer(choices, value, "", ends)

    def close(self, agg: Aggregated, lp: PeriodicLP, ends: int, exact: bool = True,
              limit: int | None = None) -> None:
        """The partial MIP of the LP (:mod:`solver.periodic_close`): a tighter bound, and a
        plan when its point is a better one. After the simplex (``exact``) only where the
        LP split a node the MIP makes integral; after PDLP, whose duals are approximate,
        whenever reduced-cost fixing leaves a MIP of at most ``MAX_VARS`` variables (its
        optimum is at least the LP's, which the duals only approach)."""
        if self.duals is None or self.best is None or self.clock.expired():
            return
        if exact and (self.weight is None or not worth_closing(lp, agg, self.weight)):
            return
        if not exact:
            kept = kept_after_fixing(lp, agg, self.duals, self.best_value)
            logger.info("reduced-cost fixing keeps %d of %d LP variables", kept,
                        lp.form.num_vars)
            if kept > (MAX_VARS if limit is None else limit):
                if limit is None:
                    self.reach(agg, lp, ends)
                return
        self.partial_mip(agg, lp, ends, self.best_value)

    def reach(self, agg: Aggregated, lp: PeriodicLP, ends: int) -> None:
        """Too many variables left for the partial MIP against the plan: MIPs over the
        ``REACH_VARS``, then twice, four times … as many variables of least reduced cost,
        each proving the threshold that keeps them (``periodic_close.threshold_keeping``),
        until the gap closes or the time runs out."""
        assert self.duals is not None
        budget = REACH_VARS
        while not self.done(self.gap) and not self.clock.expired():
            target = threshold_keeping(lp, agg, self.duals, self.best_value, budget)
            if target is None or target - self.bound < REACH_MIN_SHARE * (self.best_value
                                                                          - self.bound):
                return  # the duals are too flat there for a MIP to pay
            logger.info("partial MIP over %d variables proves up to %.10g (plan %.10g)",
                        budget, target, self.best_value)
            proved = self.partial_mip(agg, lp, ends, target)
            if target >= self.best_value or proved < target:
                return  # a MIP over more variables cannot prove more than this one's optimum
            budget *= 2

    def partial_mip(self, agg: Aggregated, lp: PeriodicLP, ends: int, target: float) -> float:
        """``close_gap`` against ``target`` (the best plan's cost, or a threshold below it);
        returns the bound it proved."""
        assert self.duals is not None
        remaining = self.clock.remaining()
        closed = close_gap(lp, agg, self.duals, target, remaining, self.gap)
        self.clock.lap("periodic_mip")
        logger.info("periodic MIP with %d distinct end blocks: bound %.10g, plan %.10g", ends,
                    closed.bound, self.best_value)
        self.bound = max(self.bound, closed.bound)
        if closed.x is not None:
            choices = expand(self.chain, agg, lp.lift(closed.x), self.problem.num_nodes)
            self.offer(choices, self.problem.evaluate(choices), "", ends)
        return closed.bound


def solve_periodic(problem: ChoiceProblem, chain: Chain, clock: Clock, gap: float,
                   before: Sizes, probe: bool = False,
                   pdlp_iterations: int | None = None,
                   incumbent: tuple[int, ...] | None = None,
                   rescue: tuple[int, ...] | None = None, early_look: bool = True,
                   provisional: bool = False) -> Solution:
    """The chain's periodic LP with one, then two distinct blocks at each end; the tied search
    only when neither gives a plan within ``GOOD_ENOUGH_GAP`` (see the module docstring).

    ``probe``: for a caller that improves the plan its own way (the memory price mixes its
    probes' plans block by block), an LP on the PDLP road ends the search with its own
    plans: no polish of all the rest and no LP with two distinct end blocks. On
    llama3.1-405b's probe at the lowest price that polish took 17-29 s in four runs and left
    the plan as it was (1.60459 priced, as logged), and without it the LP with two distinct
    end blocks (786,968 variables) took the rest of the probe's time for a bound of 0.95.
    ``pdlp_iterations`` caps PDLP on that road (a probe that only explores asks for fewer).
    ``incumbent``: the caller's plan, the best one until a cheaper is found; with it in hand
    nothing starts once the time is up (not offered to the clock's ``stop_when``: it is not
    a plan this search found). ``rescue``: a plan used only if the time runs out before the
    search has one, instead of the tied search finding a first plan late (a memory price's
    probe of a shared-reshard round: its CP-SAT first plan took 34 s of a 20 s limit); an
    unhurried search never sees it. ``early_look`` and ``provisional``: as ``solver.solve``'s.
    """
    if provisional and pdlp_iterations is None:
        pdlp_iterations = PDLP_PLAN_ITERATIONS  # a plan more than a bound
    search, after = _Search(problem, chain, clock, gap, probe=probe,
                            pdlp_iterations=pdlp_iterations, early_look=early_look,
                            provisional=provisional), before
    if incumbent is not None:
        search.best, search.best_value = incumbent, problem.evaluate(incumbent)
        search.how = GIVEN
    on_pdlp = False  # the last LP was PDLP's
    for ends in PERIODIC_ENDS:
        if len(chain.blocks) - 2 * ends < 2 or (search.best is not None and clock.expired()):
            break
        lp, lp_bound = search.run_lp(ends)
        on_pdlp = lp.form.num_vars >= PDLP_MIN_VARS
        after = (lp.indexed.n, int(sum(c.size for c in lp.indexed.costs)), len(lp.indexed.edges))
        if search.done(gap):
            return search.solution(before, after)
        if lp_bound == -math.inf:
            break  # out of time
        logger.info("periodic LP with %d distinct end blocks: bound %.6g, plan %.6g", ends,
                    lp_bound, search.best_value)
        if (probe or search.done(GOOD_ENOUGH_GAP)) and on_pdlp:
            break
    if search.best is None and rescue is not None and clock.expired():
        search.best, search.best_value = rescue, problem.evaluate(rescue)
        search.how = GIVEN
    # the plan at hand is the answer: the time is up, or a probe's LP was PDLP's
    late = search.best is not None and (clock.expired() or (probe and on_pdlp))
    answer = None if search.done(GOOD_ENOUGH_GAP) or late else solve_restricted(
        problem, chain, clock, gap, before, search.bound)
    if search.best is not None and (answer is None or search.best_value < answer.objective):
        return search.solution(before, after)
    assert answer is not None
    return answer


def _periodic_plan(problem: ChoiceProblem, chain: Chain, agg: Aggregated, ends: int,
                   lp: PeriodicLP, relaxed: LPAnswer, clock: Clock, gap: float,
                   bound: float, polish: bool = True) -> tuple[tuple[int, ...], float, str]:
    """``(choices, value, how polished)`` of the plan an LP answer gives: its x expanded to
    every block, then, if that misses ``gap``, polished around the LP's undecided nodes and
    their neighbours (``solver.polish``). The polish of all the rest, which costs a MIP of a
    few blocks, is the caller's: it waits until no cheaper LP answer is left to try."""
    if relaxed.x is None:
        raise AssertionError("an LP answer without x cannot be expanded into a plan")
    choices = expand(chain, agg, lp.lift(relaxed.x), problem.num_nodes)
    value, how = problem.evaluate(choices), ""
    if closed(value, bound, gap) or not polish:
        return choices, value, how
    near = decided_elsewhere(problem, chain, agg, ends, lp.indexed.ids, relaxed.weight)
    if np.array_equal(near, tied_run(chain, ends, problem.num_nodes)):
        return choices, value, how  # the LP decided nothing outside the tied run
    answer = _polish(problem, near, choices, clock, gap)
    if answer is not None and answer.objective <= value:
        choices, value = answer.choices, answer.objective
        how = "near" if answer.optimal else how
    return choices, value, how


def _restricted_unless_optimal(solution: Solution, restriction: str) -> Solution:
    """A periodic plan short of proven optimal (within a looser ``gap``, or the search for
    better stopped) says which restriction it came from."""
    return solution if solution.optimal else dataclasses.replace(
        solution, restricted=restriction)


def _periodic_restriction(ends: int, polished: str) -> str:
    if polished == GIVEN:
        return ("the caller's starting plan (or its interior layers, the rest solved around "
                "them): the search found no cheaper plan")
    tied = (f"layers between the first {ends} and the last {ends} take the periodic LP's "
            "strategies")
    return tied + {
        "": "",
        "near": "; so do the other ops the LP decided, and the ops it left undecided and "
                "their neighbours are optimal around them",
        "all": "; the end layers and the rest are optimal around them"}[polished]


def _polish(problem: ChoiceProblem, fixed: np.ndarray, choices: tuple[int, ...],
            clock: Clock, gap: float) -> Solution | None:
    """The periodic plan with its ``fixed`` nodes held and everything else solved exactly:
    the size of a few blocks at most, not of the model (``solver.polish``). ``None`` when no
    plan came back, or when the deadline has passed (``solver.clock``)."""
    if clock.expired():
        return None
    part = free_part(problem, fixed, choices)
    narrowed, sub_gap = fix(problem, fixed, choices), gap
    if part is not None:
        # the same absolute gap as on the whole plan: the free part's cost is only a share
        narrowed = part[0]
        share = narrowed.evaluate([choices[node] for node in part[1].tolist()])
        whole = problem.evaluate(choices)
        if 0.0 < share < whole < math.inf:
            sub_gap = gap * whole / share
    try:
        # no LP first: the narrowed LP is as fractional as the periodic one was where the
        # plan missed the bound (a 3-axis polish: 10 s of LP, then the MIP anyway)
        answer = solve_graph(narrowed, Clock(clock.remaining()), "auto", True, sub_gap, None,
                             sizes_of(narrowed), lp_first=False, peak_search=False)
    except (Infeasible, NoSolutionError):
        return None
    clock.lap("polish")
    logger.info("polish: %s", ", ".join(f"{name} {s:.1f} s" for name, s in answer.stats.seconds))
    if part is None:
        return answer
    # the free nodes' plan lifted onto the fixed ones; the fixed part is a constant, so the
    # sub-problem's bound plus that constant bounds every plan with those nodes fixed
    lifted = list(choices)
    for node, option in zip(part[1].tolist(), answer.choices, strict=True):
        lifted[node] = option
    value = problem.evaluate(lifted)
    return dataclasses.replace(answer, choices=tuple(lifted), objective=value,
                               bound=answer.bound + (value - answer.objective))


def solve_restricted(problem: ChoiceProblem, chain: Chain, clock: Clock, gap: float,
                     before: Sizes, known_bound: float | None) -> Solution:
    """A plan with every interior block taking the same choices; its bound is only what is
    proven for the *whole* problem (``known_bound``), so the gap says what the restriction
    may cost."""
    tied = ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                         groups=interior_groups(chain), liveness=problem.liveness,
                         node_memory=problem.node_memory, memory_limit=problem.memory_limit,
                         windows=problem.windows)
    try:
        answer = solve_graph(tied, Clock(clock.remaining()), "auto", True, gap, None,
                             sizes_of(tied))
    except Infeasible as tied_verdict:
        # tying layers may cost memory (a plan could mix layer strategies to fit): only the
        # whole problem can say that nothing fits
        return solve_untied(dataclasses.replace(problem, blocks=None), tied_verdict, clock,
                            gap, before, known_bound)
    for name, seconds in answer.stats.seconds:
        clock.phases.append((f"restricted_{name}", seconds))
    clock.mark = time.perf_counter()
    bound = -math.inf if known_bound is None else known_bound
    if answer.optimal and bound >= answer.objective * (1 - OPTIMALITY_GAP):
        bound = answer.objective  # not ``gap``: a looser gap must not be called optimal
    timed_out = answer.status is SolveStatus.TIME_LIMIT
    after = (answer.stats.nodes_after, answer.stats.options_after, answer.stats.edges_after)
    solution = finish(problem, answer.choices, bound, timed_out, clock, "restricted", before,
                      after)
    if solution.optimal:
        return solution
    return dataclasses.replace(solution, restricted=RESTRICTION)
