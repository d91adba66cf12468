"""One problem without a chain of identical blocks: reductions, the DP, then an ILP if needed.

The pipeline follows the measured recommendation in docs/solver-backends.md: exact reductions,
then DP + Lagrange (plan and certified bound in about linear time); stop if the gap is closed;
otherwise HiGHS (or CP-SAT) on the aggregated marginal MIP, hinted with the DP plan, under the
remaining time. :func:`finish` re-scores every answer on the user's float costs.
"""

from __future__ import annotations

import math
import time

import numpy as np

from solver.backends.cpsat import solve_cpsat
from solver.backends.highs import solve_highs
from solver.backends.result import BackendResult
from solver.clock import Clock
from solver.compact import Indexed, Work, build_work, index_work
from solver.descent import descend
from solver.dp import DPResult, lagrange_dp
from solver.errors import Infeasible, NoSolutionError, ProblemTooLargeError
from solver.neighbourhood import improve
from solver.peak import least_peak
from solver.problem import ChoiceProblem
from solver.reduce import MemoryExhausted, reduce_work
from solver.solution import Solution, SolveStats, SolveStatus

# ``auto`` hands a DP answer to the ILP only when the ILP can plausibly close the gap in
# reasonable time: up to AUTO_ILP_MAX_NODES nodes always, above that only when the DP gap is
# larger than AUTO_LARGE_GAP (docs/solver-backends.md: HiGHS needs ~49 s at 5,000 nodes just to
# reach the DP's 1e-6-level gap, and cannot solve the root LP at 20,000 nodes in 60 s).
AUTO_ILP_MAX_NODES = 2000
AUTO_LARGE_GAP = 1e-3

# the descent of a plan the deadline cut short runs past it by at most this (solver.descent:
# milliseconds on hundreds of nodes)
DESCENT_SECONDS = 1.0

Sizes = tuple[int, int, int]
"""(nodes, options, edges) of a problem, before or after reductions, for the stats."""


def sizes_of(problem: ChoiceProblem) -> Sizes:
    return problem.num_nodes, sum(problem.sizes), len(problem.edges)


def solve_graph(problem: ChoiceProblem, clock: Clock, backend: str, reductions: bool,
                 gap: float, known_bound: float | None, before: Sizes, *,
                 lp_first: bool = True, peak_search: bool = True) -> Solution:
    """Reductions, then the backends on what is left (no chain). ``peak_search`` False: a
    caller that drops an Infeasible verdict's numbers gets it without a search for them."""
    _check_rows(problem, clock, peak_search)
    work = build_work(problem)
    _check_memory(problem, work, clock, peak_search)
    clock.lap("compact")
    try:
        if reductions:
            reduce_work(work, deadline=clock.deadline)
            clock.lap("reduce")
        ix = index_work(work)
        x, bound, timed_out, used = _search(ix, backend, gap, clock, lp_first)
    except MemoryExhausted:
        raise infeasible(problem, clock, search=peak_search) from None
    choices = work.lift({node: int(x[i]) for i, node in enumerate(ix.ids)}, problem.num_nodes)
    bound = max(bound, -math.inf if known_bound is None else known_bound)
    return finish(problem, choices, bound, timed_out, clock, used, before, work.size())


def infeasible(problem: ChoiceProblem, clock: Clock, known_lower: float = -math.inf, *,
               search: bool = True) -> Infeasible:
    """The verdict on a problem no plan of which fits, with the least peak's bounds found
    before the clock's deadline (:func:`solver.peak.least_peak`)."""
    assert problem.memory_limit is not None
    peak = least_peak(problem, clock, known_lower, search=search)
    return Infeasible(min_peak=peak.lower, limit=problem.memory_limit, exact=peak.exact,
                      found_peak=peak.upper if math.isfinite(peak.upper) else None)


def _check_rows(problem: ChoiceProblem, clock: Clock, search: bool) -> None:
    """The verdict before the working form is built, when a row cannot fit even with every
    node at its leanest option (one numpy pass over the compiled rows): building the working
    form of llama3-70b training with its layers tied (5,133 rows, 8.7 M option entries in
    them) took 78 s of a 30 s limit on a loaded machine."""
    if problem.memory_limit is None or not problem.memory_rows():
        return
    if float(problem.compiled_rows().least_sums().max()) > problem.memory_limit:
        raise infeasible(problem, clock, search=search)


def _check_memory(problem: ChoiceProblem, work: Work, clock: Clock, search: bool) -> None:
    """The same after groups are merged: a group's leanest option can weigh more than its
    members' each at their own."""
    if work.limit is None:
        return
    for row in work.rows:
        leanest = sum(float(vec.min()) for vec in row.values())
        if leanest > work.limit:
            raise infeasible(problem, clock, leanest, search=search)


def _search(ix: Indexed, backend: str, gap: float, clock: Clock, lp_first: bool = True
            ) -> tuple[np.ndarray, float, bool, str]:
    best, bound, used = None, -math.inf, backend
    if backend in ("auto", "dp"):
        result = lagrange_dp(ix, clock.deadline)
        clock.lap("dp")
        best, bound = _take_dp(result, backend, ix)
        if best is not None and closed(ix.evaluate(best), bound, gap):
            return best, bound, False, "dp"
        used = "highs" if backend == "auto" and _worth_ilp(ix, best, bound) else "dp"
        if best is not None and clock.expired():
            return best, bound, True, "dp"  # no ILP after the deadline (solver.clock)
    timed_out = False
    if used in ("highs", "cpsat") and clock.expired():
        timed_out = True  # no model built after the deadline: the fallback, descended
    elif used in ("highs", "cpsat"):
        answer: BackendResult
        if used == "highs":
            answer = solve_highs(ix, best, clock.remaining(), gap, lp_first=lp_first)
        else:
            answer = solve_cpsat(ix, best, clock.remaining(), gap)
        clock.lap(used)
        if answer.infeasible:
            raise MemoryExhausted(-1)
        bound = max(bound, answer.bound)
        timed_out = answer.timed_out
        best = _better(ix, best, answer.x)
    elif backend == "dp" or best is None:
        timed_out = clock.deadline is not None and clock.remaining() == 0.0
    if best is None:
        best = _fallback(ix, clock)
    if timed_out:
        # a cut-short LP's plan, or the fallback's, ignores most edges (solver.descent)
        best = _better(ix, best, descend(ix, best, time.perf_counter() + DESCENT_SECONDS))
        clock.lap("descent")
        assert best is not None
        if used in ("highs", "cpsat"):  # time left after a skipped model (solver.neighbourhood)
            best = _better(ix, best, improve(ix, best, clock, gap))
            clock.lap("neighbourhood")
            assert best is not None
    return best, bound, timed_out, used


def _worth_ilp(ix: Indexed, best: np.ndarray | None, bound: float) -> bool:
    if best is None or ix.n <= AUTO_ILP_MAX_NODES:
        return True
    return not closed(ix.evaluate(best), bound, AUTO_LARGE_GAP)


def _take_dp(result: DPResult | None, backend: str, ix: Indexed
             ) -> tuple[np.ndarray | None, float]:
    if result is None:
        if backend == "dp":
            msg = ("the tree-decomposition DP would need tables above its size limit (the "
                   "graph's treewidth is too large); use backend='auto' or 'highs'")
            raise ProblemTooLargeError(msg, size=math.inf, limit=float(ix.n))
        return None, -math.inf
    return result.x, result.bound


def closed(objective: float, bound: float, gap: float) -> bool:
    """Whether ``objective`` is within the relative ``gap`` of the proven ``bound``."""
    return objective - bound <= gap * max(abs(objective), 1e-300)


def _better(ix: Indexed, a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    usable = [x for x in (a, b) if x is not None and ix.fits(x) and
              math.isfinite(ix.evaluate(x))]
    return min(usable, key=ix.evaluate) if usable else None


FALLBACK_SECONDS = 5.0  # CP-SAT's search for a first fitting plan once the time is up


def _fallback(ix: Indexed, clock: Clock) -> np.ndarray:
    """The leanest plan (memory first, then cost): feasible whenever any plan is, for a sum.
    With several memory rows it may not fit; then CP-SAT looks for any plan that does, for the
    time left but at least ``FALLBACK_SECONDS`` (unbounded without a time limit): the search
    ends here only when the solver found no plan in its time, and before it had no limit."""
    memory = [np.zeros(c.size) for c in ix.costs]
    for row in ix.rows:
        for i, vec in row:
            memory[i] = memory[i] + vec
    x = np.array([int(np.lexsort((c, m))[0]) for c, m in zip(ix.costs, memory, strict=True)])
    if ix.fits(x) and math.isfinite(ix.evaluate(x)):
        return x
    limit = None if clock.deadline is None else max(clock.remaining(), FALLBACK_SECONDS)
    answer = solve_cpsat(ix, None, limit, 1.0)
    if answer.x is None:
        msg = "no plan that fits the memory limit was found; raise the limit or the time limit"
        limit = None if clock.deadline is None else clock.deadline - clock.start
        raise NoSolutionError(msg, time_limit=limit)  # the caller's seconds, not the deadline
    return answer.x


NOISE = 1e-9  # CP-SAT scales costs to integers; its bound carries that rounding


def _magnitude(problem: ChoiceProblem) -> float:
    """Sum of the largest finite |cost| per node and per edge: the scale of any objective.
    A model's layers share their cost arrays (the same objects), so each is scanned once:
    46,400 arrays of llama3-70b training on dp=8,tp=8 took 0.18 s one by one."""
    arrays = [*problem.node_costs, *(matrix for _, _, matrix in problem.edges)]
    largest: dict[int, float] = {}
    total = 0.0
    for a in arrays:  # summed in the same order as before: the same float
        if id(a) not in largest:
            largest[id(a)] = float(np.abs(a[np.isfinite(a)]).max(initial=0.0))
        total += largest[id(a)]
    return total


def finish(problem: ChoiceProblem, choices: tuple[int, ...], bound: float, timed_out: bool,
            clock: Clock, backend: str, before: Sizes, after: Sizes) -> Solution:
    objective = problem.evaluate(choices)
    bound = min(bound, objective)
    if objective - bound <= NOISE * _magnitude(problem):
        bound = objective  # below float noise of the costs involved (e.g. an objective of 0)
    stats = SolveStats(backend=backend, nodes_before=before[0], options_before=before[1],
                       edges_before=before[2], nodes_after=after[0], options_after=after[1],
                       edges_after=after[2], seconds=tuple(clock.phases))
    sol = Solution(choices=choices, objective=objective, bound=bound, status=SolveStatus.OPTIMAL,
                   stats=stats, peak_memory=problem.peak_memory(choices))
    if sol.optimal:
        return sol
    status = SolveStatus.TIME_LIMIT if timed_out else SolveStatus.FEASIBLE
    return Solution(choices=choices, objective=objective, bound=bound, status=status,
                    stats=stats, peak_memory=sol.peak_memory)
