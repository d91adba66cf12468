"""Solving a step whose shared reshards are priced lazily (:mod:`.shared_reshards`).

Every share starts relaxed (each reader pays ``1/k`` of the reshard: a lower bound, pairwise,
as tight an LP as per-edge pricing); the shares an answer undercharges, with their copies in
every identical layer (so the layers stay identical for the periodic solver), become exact
(a two-reader tensor whole, as a pair node; three or more readers per layout, as flags of a
producer copy), and the step is solved again. When no share is undercharged the answer
costs under the truth what the solver said, and the solver's bound, a bound of a
relaxation, bounds the truth: the plan is as proven as the solve was. Before a round is
solved whole, a small solve of it (only the ops around the shares just made exact free)
may already meet the last round's bound with an answer that undercharges nothing: that
answer is optimal (:meth:`SharedPricing.repair`). After
``MAX_ROUNDS`` rounds, when a producer would need more than ``MAX_EXACT_PER_GROUP`` exact
layouts, when the next round's problem would hold more than ``MAX_ROUND_ENTRIES`` distinct
edge-matrix entries, or once the time limit has run out, the rounds stop: the answer is the
cheapest plan at its truth of every round's and of the per-consumer optimum's, with the best
bound of the rounds (a feasible plan with a stated gap, not a proof). Each round starts from
the best plan so far (``solver.solve(incumbent=)``), so one cut short by the time limit
returns at least that, without a late search for a first plan.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

import solver
from autoshard.planning.edge_costs import Edge
from autoshard.planning.shared_reshards import (
    Share,
    completed,
    exact_groups,
    group_template,
    is_pair,
    readers,
    reshard_price,
    shared_blocks,
    shared_objective,
    template,
    undercharged,
)
from autoshard.planning.step import StepProblem
from autoshard.strategies.derive import Strategy

logger = logging.getLogger(__name__)

# ``solve(problem, incumbent, lazy, provisional)``: ``lazy`` when ``problem`` is a round, its
# shares priced lazily (integral but degenerate LPs: ``solver.solve(early_look=False)``);
# ``provisional`` when the answer is wanted for its plan (``solver.solve(provisional=True)``)
Solve = Callable[[solver.ChoiceProblem, tuple[int, ...] | None, bool, bool], solver.Solution]

MAX_ROUNDS = 4
MAX_EXACT_PER_GROUP = 4  # a producer copy has 2**k options per producer option
# the repair's small solve is not periodic: it grows with the layers. Measured (loaded
# machine): 244 free nodes (gpt2 12 layers, proven) 0.7 s, 360 (llama3-8b) 1.2 s, 550
# (llama3-8b) 2.9 s, llama3-70b's 7,215 shares 221 s (the round's time limit spent on it)
MAX_REPAIR_NODES = 400
# the next round is not solved when its problem's distinct edge-matrix entries (counted once
# per array: identical layers share theirs) exceed this: its LP would not fit the machine.
# Measured (one run each, loaded 2-core machine): mixtral-8x7b dp=2,ep=4,tp=8's second round
# makes 5,322 shares exact (130 pair nodes, 128 producer copies) and grows from 2.5 M to
# 12.3 M entries (195 M counted per edge); its periodic LP had 3.9 M variables, took ~6 min and
# 9.3 GB to build, and no plan came within 600 s. The largest round solved in the scale jobs:
# llama3-70b dp=8,tp=8's second, 0.27 M (proven in 167 s all in); llama3-8b's 0.15 M
MAX_ROUND_ENTRIES = 5_000_000
# an exact answer within this (relative) of an earlier round's plan at its truth is no dearer:
# the two prices are sums of the same terms in different orders
TIE = 1e-12


@dataclass(slots=True, kw_only=True)
class SharedPricing:
    """What the step's problem is built from, and the shares made exact so far."""

    step: StepProblem
    edges: list[Edge]
    strategies: list[tuple[Strategy, ...]]
    op_costs: list[np.ndarray]  # one per op, pinned-out options at inf
    names: list[str]
    blocks: tuple[tuple[int, ...], ...] | None
    exact: tuple[int, ...] = ()
    rounds: list[int] = field(default_factory=list)  # shares made exact per extra round
    converged: bool = True  # the last answer is priced exactly (no share undercharged)
    gap: float = solver.OPTIMALITY_GAP  # the relative gap at which an answer is optimal
    # the last problem built and the exact shares it was built with: a round's repair and
    # its whole solve ask for the same one (llama3-8b dp=8,tp=8: 0.1-0.3 s a build)
    built: tuple[tuple[int, ...], solver.ChoiceProblem] | None = field(default=None,
                                                                       repr=False)

    @property
    def shares(self) -> tuple[Share, ...]:
        return self.step.shares

    def problem(self, exact: Sequence[int] | None = None) -> solver.ChoiceProblem:
        """The step with ``exact`` (default: the current set) exact, the other shares
        relaxed."""
        exact = tuple(self.exact if exact is None else exact)
        if self.built is not None and self.built[0] == exact:
            return self.built[1]
        n = len(self.op_costs)
        node_costs, edges = shared_objective(self.step.edges, self.edges, self.strategies,
                                             self.shares, exact, n)
        costs = [*self.op_costs, *node_costs]
        blocks, pads = shared_blocks(self.blocks, self.names, self.shares, exact,
                                     [c.size for c in node_costs], len(costs))
        costs.extend(np.zeros(size) for size in pads)
        problem = solver.ChoiceProblem(node_costs=costs, edges=edges, blocks=blocks,
                                       windows=self.step.windows)
        self.built = (exact, problem)
        return problem

    def more(self, choices: Sequence[int]) -> tuple[int, ...]:
        """Shares to make exact after an answer: the undercharged ones and their copies."""
        low = undercharged(choices, self.strategies, self.edges, self.step.edges,
                           self.shares, self.exact)
        if not low:
            return ()
        names = {template(self.shares[i]) for i in low}
        whole = {group_template(self.shares[i]) for i in low if is_pair(self.shares[i])}
        done = set(self.exact)
        return tuple(i for i, share in enumerate(self.shares)
                     if i not in done and (template(share) in names
                                           or (is_pair(share) and group_template(share) in whole)))

    def solve(self, problem_of: Callable[[solver.ChoiceProblem], solver.ChoiceProblem],
              solve: Solve, out_of_time: Callable[[], bool] = lambda: False, timed: bool = False,
              enough: Callable[[tuple[int, ...]], bool] | None = None
              ) -> tuple[solver.Solution, solver.ChoiceProblem]:
        """Solve ``problem_of(step problem)`` (e.g. with memory rows added) until no share
        is undercharged; the answer and the problem it answers. ``solve(problem, incumbent,
        lazy, provisional)`` is given, from the second round on, the best plan so far
        (completed for the round's problem): a round cut short by the time limit returns at
        least that; ``lazy`` is true for the rounds (not for the per-consumer problem or a
        step without shares). A round is solved ``provisional`` (its plan says what to make
        exact next); one whose plan undercharges nothing is the answer, and if that solve
        left a gap it is solved again in full, from its plan.

        Rounds stop early (see the module docstring, and once ``out_of_time``): the answer is
        then the cheapest plan of any round priced at its truth, with the best bound of any
        round (each round's problem prices every plan at most at its truth, so each bound
        bounds the truth). llama3-70b dp=8,tp=8: round 1's plan costs 1.089644 s at its
        truth, round 2's 1.250312 s; with a 10 s limit the rounds returned the latter, cut
        short, at 1.749 s.

        The per-consumer optimum (the plan without shared pricing) is a plan of every round:
        where the rounds stop early it is one of the candidates, so the answer is never
        dearer at its truth than the plan sharing off gives under the same time limit. Under
        a time limit (``timed``) it is solved first and starts round 1 (the time may run out
        in any round: mixtral-8x7b dp=2,ep=4,tp=8 under 10 s ended round 1 cut short at
        319.7 ms, against 261.3 ms per consumer); without one, only when the rounds stop
        early.

        Without shares (sharing off, or nothing to share) there are no rounds: one solve.
        ``enough``: the solve's own ``stop_when`` (the planner's pass without memory rows,
        which stops once its plan does not fit, wanting only the bound): an answer that makes
        it true ends the rounds as it is, not as a round cut short by the time limit. Before,
        that stop read as the time running out in round 1 and, without a time limit, solved
        the per-consumer problem again (llama3.1-405b on dp=8,fsdp=8,tp=8 with sharing off:
        its 7 s pass without memory rows ran twice)."""
        if not self.shares:
            problem = problem_of(self.problem())
            return solve(problem, None, False, False), problem
        best: tuple[solver.Solution, solver.ChoiceProblem] | None = None
        bound = -np.inf
        while True:
            problem = problem_of(self.problem())
            if timed and best is None and self.shares:  # this call's first round
                best = self.per_consumer(problem_of, solve, problem), problem
            start = None if best is None else self.complete(best[0].choices, problem)
            solution = self.settled(solve(problem, start, True, True), problem)
            bound = max(bound, solution.bound)
            if enough is not None and enough(solution.choices):
                return solution.with_bound(bound), problem
            extra = self.more(solution.choices)
            if not extra and solution.status is not solver.SolveStatus.TIME_LIMIT \
                    and solution.with_bound(bound).gap > self.gap:
                # the answer, unless a cheaper round's: no longer provisional
                solution = self.settled(solve(problem, solution.choices, True, False), problem)
                bound = max(bound, solution.bound)
                extra = self.more(solution.choices)
            truth = solution.objective + self.shortfall(solution.choices) if extra \
                else solution.objective
            # a round cut short by the time limit is not its problem's optimum: no more rounds
            cut = solution.status is solver.SolveStatus.TIME_LIMIT
            if not extra and not cut and (best is None or truth <= best[0].objective
                                          + TIE * abs(best[0].objective)):
                self.converged = True
                return solution.with_bound(bound), problem
            if best is None or truth < best[0].objective:
                best = dataclasses.replace(solution, objective=truth), problem
            late = cut or out_of_time()
            stop = self.stop_reason(extra, late)
            if stop is not None:
                self.converged = False
                logger.info("shared reshards: %s", stop)
                if not timed:  # no time limit: the per-consumer optimum now, as a candidate
                    plain = self.per_consumer(problem_of, solve, problem)
                    if plain.objective < best[0].objective:
                        best = plain, problem
                return self.stopped(best, bound, stop, late)
            self.rounds.append(len(extra))
            self.exact = (*self.exact, *extra)
            repaired = self.repair(problem_of, solve, solution, extra)
            if repaired is not None:
                self.converged = True
                return repaired

    def per_consumer(self, problem_of: Callable[[solver.ChoiceProblem], solver.ChoiceProblem],
                     solve: Solve, problem: solver.ChoiceProblem) -> solver.Solution:
        """The per-consumer optimum (every reader pays its whole reshard: the step without
        shared pricing), as a plan of ``problem`` (a round's) priced at its truth. Its bound
        bounds the per-consumer step, not the truth: it is dropped."""
        plain = problem_of(solver.ChoiceProblem(
            node_costs=self.op_costs, edges=self.step.edges, blocks=self.blocks,
            windows=self.step.windows))
        answer = solve(plain, None, False, False)
        choices = tuple(self.complete(answer.choices[:len(self.op_costs)], problem))
        truth = problem.evaluate(choices) + self.shortfall(choices)
        logger.info("shared reshards: the per-consumer plan costs %.10g at its truth (%.10g "
                    "per consumer)", truth, answer.objective)
        return dataclasses.replace(answer, choices=choices, objective=truth, bound=-np.inf,
                                   restricted=None)

    @staticmethod
    def stopped(best: tuple[solver.Solution, solver.ChoiceProblem], bound: float, stop: str,
                late: bool) -> tuple[solver.Solution, solver.ChoiceProblem]:
        """The best plan at its truth when the rounds stop early (``late``: stopped by the
        time limit, which its status says): the best bound, and a stated restriction unless
        that bound proves it (a later round's bound may prove an earlier round's plan)."""
        answer, problem = best
        status = solver.SolveStatus.TIME_LIMIT if late else solver.SolveStatus.FEASIBLE
        answer = dataclasses.replace(answer, bound=-np.inf, status=status).with_bound(
            max(bound, answer.bound))
        return (answer if answer.optimal else dataclasses.replace(answer, restricted=stop),
                problem)

    def stop_reason(self, extra: Sequence[int], late: bool) -> str | None:
        """Why the rounds stop before making ``extra`` exact (a stated restriction: the
        plan is priced at its truth and the bound is the best of the rounds'), or ``None``.
        ``late``: the time limit has run out (or cut the last round short)."""
        advice = "rerun without --share-reshards for a proven per-consumer plan"
        if late:
            return (f"the time limit ran out in shared-reshard round {len(self.rounds) + 1}; "
                    f"raise --time-limit, or {advice}")
        if not extra:  # an exact answer dearer than an earlier round's plan (rounding aside)
            return f"an earlier round's plan is cheaper than the last round's exact one; {advice}"
        widest = max((len(g) for g in exact_groups(self.shares, (*self.exact, *extra))),
                     default=0)
        if len(self.rounds) >= MAX_ROUNDS:
            why = f"after {MAX_ROUNDS} rounds"
        elif widest > MAX_EXACT_PER_GROUP:
            why = f"a producer would need {widest} exact layouts (at most {MAX_EXACT_PER_GROUP})"
        elif (entries := self.entries((*self.exact, *extra))) > MAX_ROUND_ENTRIES:
            why = (f"the next round's problem would hold {entries:,} edge-matrix entries "
                   f"(at most {MAX_ROUND_ENTRIES:,})")
        else:
            return None
        return f"{len(extra)} shared reshards priced relaxed, not made exact: {why}; {advice}"

    def entries(self, exact: Sequence[int]) -> int:
        """The distinct edge-matrix entries of the problem with ``exact`` exact (each array
        once). The problem is kept (:attr:`built`): the round that solves it reuses it."""
        edges = self.problem(exact).edges
        return sum(matrix.size for matrix in {id(m): m for _, _, m in edges}.values())

    def settled(self, solution: solver.Solution, problem: solver.ChoiceProblem
                ) -> solver.Solution:
        """``solution`` with its share nodes at the options its op choices need
        (:meth:`complete`), priced again: an answer cut short by the time limit may hold a
        producer copy's flag no reader needs, a reshard the decoded plan does not make
        (llama3-70b on dp=8,tp=8 stopped at its time limit priced 1.6606 s, decoded
        1.6539 s). Never dearer: the needed options are the cheapest ones."""
        choices = tuple(self.complete(solution.choices, problem))
        if choices == tuple(solution.choices):
            return solution
        return dataclasses.replace(solution, choices=choices,
                                   objective=problem.evaluate(choices))

    def repair(self, problem_of: Callable[[solver.ChoiceProblem], solver.ChoiceProblem],
               solve: Solve, last: solver.Solution, extra: Sequence[int]
               ) -> tuple[solver.Solution, solver.ChoiceProblem] | None:
        """The next round's answer without its whole solve, when a small one proves it.

        ``last.bound`` bounds the last problem, which prices every plan at most as the next
        one does (a share made exact prices its readers at their truth, the relaxation at
        most that): it bounds the next problem and the truth. The next problem with every
        op held at ``last``'s choice except the producers and readers of the shares just
        made exact (and every share node) is small; when its answer undercharges no share
        (it costs its truth) and meets ``last.bound`` within the gap, it is optimal, proven
        by ``last.bound``. Otherwise ``None``: the round is solved whole. Measured (loaded
        machine): gpt2 12 layers on dp=2,tp=4, the third round's plan costs the second
        round's bound and the small solve finds it in 0.7 s (the whole round: 5-8 s); on
        llama3-8b dp=8,tp=8 every round raises the bound and the two small solves (2.9 s
        and 1.2 s) are spent for nothing. Freeing the neighbours of those ops too made
        them 1.6x slower and proved nothing more. Above ``MAX_REPAIR_NODES`` free nodes
        it is not tried."""
        problem = problem_of(self.problem())
        held = self.complete(last.choices, problem)
        free = np.zeros(problem.num_nodes, dtype=bool)
        free[len(self.op_costs):] = True
        for index in extra:
            share = self.shares[index]
            free[share.producer] = True
            for e in share.members:
                free[self.edges[e][1]] = True
        if free.sum() > MAX_REPAIR_NODES:
            return None
        costs = [cost if free[n] else np.where(np.arange(cost.size) == held[n], cost, np.inf)
                 for n, cost in enumerate(problem.node_costs)]
        small = dataclasses.replace(problem, node_costs=tuple(costs), blocks=None)
        answer = solve(small, tuple(held), True, False)  # a plan of it already: never late
        slack = self.gap * max(abs(answer.objective), 1e-300)  # solver's relative gap
        if self.more(answer.choices) or answer.objective - last.bound > slack:
            return None
        stats = dataclasses.replace(  # the round's sizes, and the solve that proved it
            answer.stats, backend=f"{answer.stats.backend} (round {len(self.rounds) + 1} "
            f"re-solved around {len(extra)} shares)", nodes_before=problem.num_nodes,
            options_before=sum(problem.sizes), edges_before=len(problem.edges))
        return dataclasses.replace(answer, bound=last.bound, stats=stats,
                                   status=solver.SolveStatus.OPTIMAL, restricted=None), problem

    def shortfall(self, choices: Sequence[int]) -> float:
        """What the relaxation undercharges ``choices`` by: per undercharged share, the
        part of its reshard its readers did not pay (``1 - r/k`` of it)."""
        missing = 0.0
        for index in undercharged(choices, self.strategies, self.edges, self.step.edges,
                                  self.shares, self.exact):
            share = self.shares[index]
            price = reshard_price(share, choices, self.strategies, self.edges, self.step.edges)
            r = readers(share, choices, self.strategies, self.edges)
            missing += price * (1.0 - r / len(share.edges))
        return missing

    def complete(self, choices: Sequence[int], problem: solver.ChoiceProblem
                 ) -> tuple[int, ...]:
        """Op choices extended to ``problem``'s nodes (exact shares set as needed)."""
        return completed(choices, self.strategies, self.edges, self.step.edges, self.shares,
                         self.exact, problem.num_nodes)

