"""``solve``: reductions, then the tree DP, then an ILP only when the DP cannot prove the answer.

A problem whose ``blocks`` are verified to be a chain of identical blocks (a model's layers)
takes another road first: the periodic LP of :mod:`solver.periodic`, the size of a few blocks,
whose bound is a bound of the whole problem; memory-constrained chains are searched with the
interior blocks tied and keep the bound the caller proved (``known_bound``).

The pipeline follows the measured recommendation in ilp-backends.md: exact reductions, then
DP + Lagrange (plan and certified bound in about linear time); stop if the gap is closed;
otherwise HiGHS (or CP-SAT) on the aggregated marginal MIP, hinted with the DP plan, under the
remaining time. The answer is always re-scored on the user's float costs.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

import numpy as np

from solver.backends.cpsat import solve_cpsat
from solver.backends.highs import solve_highs
from solver.backends.lp import PDLP_MIN_VARS, LPAnswer, lp_answers
from solver.backends.result import BackendResult
from solver.compact import Indexed, Work, build_work, index_work
from solver.dp import DPResult, lagrange_dp
from solver.errors import (
    Infeasible,
    NoSolutionError,
    ProblemTooLargeError,
    UnknownBackendError,
)
from solver.exact import exhaustive
from solver.peak import min_peak
from solver.periodic import (
    Aggregated,
    Chain,
    PeriodicLP,
    aggregate,
    expand,
    find_chain,
    interior_groups,
    periodic_lp,
)
from solver.polish import decided_elsewhere, fix, tied_run
from solver.problem import ChoiceProblem
from solver.reduce import MemoryExhausted, reduce_work
from solver.solution import OPTIMALITY_GAP, Solution, SolveStats, SolveStatus

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "highs", "cpsat", "dp", "exhaustive")
# ``auto`` hands a DP answer to the ILP only when the ILP can plausibly close the gap in
# reasonable time: up to AUTO_ILP_MAX_NODES nodes always, above that only when the DP gap is
# larger than AUTO_LARGE_GAP (ilp-backends.md: HiGHS needs ~49 s at 5,000 nodes just to reach
# the DP's 1e-6-level gap, and cannot solve the root LP at 20,000 nodes in 60 s).
AUTO_ILP_MAX_NODES = 2000
AUTO_LARGE_GAP = 1e-3


class _Clock:
    def __init__(self, time_limit: float | None):
        self.start = time.perf_counter()
        self.deadline = None if time_limit is None else self.start + time_limit
        self.phases: list[tuple[str, float]] = []
        self.mark = self.start

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases.append((name, now - self.mark))
        self.mark = now

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(self.deadline - time.perf_counter(), 0.0)


def solve(problem: ChoiceProblem, time_limit: float | None = None, backend: str = "auto", *,
          reductions: bool = True, gap: float = OPTIMALITY_GAP,
          known_bound: float | None = None) -> Solution:
    """Choose one option per node at minimum cost within the memory limit.

    Args:
        problem: the numbers to optimise.
        time_limit: seconds; when it runs out the best plan found so far is returned with
            status ``TIME_LIMIT`` and its gap.
        backend: ``auto`` (DP, then HiGHS if needed), ``highs``, ``cpsat``, ``dp`` or
            ``exhaustive`` (tiny problems only).
        reductions: apply the exact reductions first (off only to measure them).
        gap: relative gap at which the search may stop.
        known_bound: a lower bound of this problem the caller has already proven (e.g. the
            optimum of the same problem without its memory rows); the answer's bound is at
            least this.

    Returns:
        A :class:`Solution` whose objective is recomputed from the float costs.

    Raises:
        Infeasible: no plan fits the memory limit (carries ``min_peak``).
        NoFiniteOptionError: a node has no finite option.
        ProblemTooLargeError: ``exhaustive`` (or ``dp`` on a wide graph) given a big problem.

    Example:
        >>> import numpy as np
        >>> p = ChoiceProblem(node_costs=[[1.0, 2.0], [3.0, 1.0]],
        ...                   edges=[(0, 1, np.array([[0.0, 5.0], [5.0, 0.0]]))])
        >>> sol = solve(p)
        >>> sol.choices, sol.objective, sol.optimal
        ((1, 1), 3.0, True)
    """
    if backend not in BACKENDS:
        raise UnknownBackendError(backend, BACKENDS)
    clock = _Clock(time_limit)
    before = (problem.num_nodes, sum(problem.sizes), len(problem.edges))
    if backend == "exhaustive":
        choices, objective = exhaustive(problem)
        clock.lap("exhaustive")
        return _finish(problem, choices, objective, False, clock, "exhaustive", before, before)
    chain = find_chain(problem) if backend == "auto" and reductions else None
    if chain is not None and not problem.memory_rows():
        return _solve_periodic(problem, chain, clock, gap, before)
    if chain is not None:
        return _solve_restricted(problem, chain, clock, gap, before, known_bound)
    return _solve_graph(problem, clock, backend, reductions, gap, known_bound, before)


def _solve_graph(problem: ChoiceProblem, clock: _Clock, backend: str, reductions: bool,
                 gap: float, known_bound: float | None, before: tuple[int, int, int], *,
                 lp_first: bool = True) -> Solution:
    """Reductions, then the backends on what is left (no chain)."""
    work = build_work(problem)
    _check_memory(work)
    clock.lap("compact")
    try:
        if reductions:
            reduce_work(work, deadline=clock.deadline)
            clock.lap("reduce")
        ix = index_work(work)
        x, bound, timed_out, used = _search(ix, backend, gap, clock, lp_first)
    except MemoryExhausted:
        fresh = build_work(problem)
        raise Infeasible(min_peak=_exact_peak(fresh), limit=float(fresh.limit)) from None
    choices = work.lift({node: int(x[i]) for i, node in enumerate(ix.ids)}, problem.num_nodes)
    bound = max(bound, -math.inf if known_bound is None else known_bound)
    return _finish(problem, choices, bound, timed_out, clock, used, before, work.size())


PERIODIC_ENDS = (1, 2)  # distinct blocks kept at each end, tried in turn until the gap closes
# A restricted plan within this of the proven bound is kept without the tied search (which
# costs the whole problem again: minutes on 3-axis meshes); the bar for restricted plans
GOOD_ENOUGH_GAP = 5e-3
# The next LP (two more distinct blocks) is tried when the gap is wider than GOOD_ENOUGH_GAP,
# or when the last LP was small enough for the dual simplex (2-axis meshes: ~1 s, and
# llama3-8b-shaped closes only with two). A size, not a time: with a time the plan depended on
# the machine's speed (dp=4,fsdp=8,tp=2 came out proven optimal in one sweep run and 7e-6
# short in another, its first LP taking 9.8 s and 19 s).


def _solve_periodic(problem: ChoiceProblem, chain: Chain, clock: _Clock, gap: float,
                    before: tuple[int, int, int]) -> Solution:
    """The chain's periodic LP bound (``solver.periodic``), with one and then two distinct
    blocks at each end; an integral LP optimum whose plan meets the bound is the answer.

    When it does not (the plan pays at the junctions between the distinct and the tied blocks,
    where the LP's linking is relaxed, or PDLP's x split nodes between optimal vertices), the
    tied blocks are fixed to the LP's choices and the rest re-optimised exactly (``_polish``)
    only where the LP hesitated; then the next LP answer (a vertex on PDLP's support, which
    costs a tenth of a second) gets the same; only then is all of the rest re-optimised
    (``solver.polish``), before any answer that solves the whole LP again. If a gap is left,
    the plan says what it was restricted to, and only a gap above ``GOOD_ENOUGH_GAP`` goes
    on to the search with all interior blocks tied but free."""
    bound, best, best_value, after = -math.inf, None, math.inf, before
    how, best_ends = "", 0  # how the best plan was polished, from the LP with how many ends
    for ends in PERIODIC_ENDS:
        if len(chain.blocks) - 2 * ends < 2:
            break
        agg = aggregate(problem, chain, ends, ends)
        lp = periodic_lp(agg)
        clock.lap("aggregate")
        # two thirds of the time at most: if the LP cannot finish, the restricted search needs
        # the rest. (A half starved llama3-8b-shaped dp=4,fsdp=2,tp=2 in a -j 2 sweep under a
        # 300 s limit: 10,000 PDLP iterations plus the barrier on 560 k variables took ~140 s
        # on one core, the LP gave up, and the tied search ran out of time at a 3.6 % gap.)
        remaining = clock.remaining()
        lp_bound, tried, polished = -math.inf, set(), None
        for relaxed in lp_answers(lp.form, None if remaining is None else remaining * 2 / 3,
                                  gap):
            clock.lap("periodic_lp")
            lp_bound = max(lp_bound, relaxed.bound)
            bound = max(bound, lp_bound)
            x = relaxed.x
            if x is not None and x.tobytes() not in tried:
                tried.add(x.tobytes())
                choices, value, polish = _periodic_plan(problem, chain, agg, ends, lp,
                                                        relaxed, clock, gap, bound)
                if value < best_value:
                    best, best_value, how, best_ends = choices, value, polish, ends
            if best is not None and best != polished and not _closed(best_value, bound, gap) \
                    and not relaxed.next_is_cheap:
                # the next answer, if any, solves the whole LP again: first polish all of the
                # rest around the tied run
                answer = _polish(problem, tied_run(chain, ends, problem.num_nodes), best, clock,
                                 gap)
                if answer is not None and answer.objective <= best_value:
                    best, best_value, best_ends = answer.choices, answer.objective, ends
                    how = "all" if answer.optimal else how
                polished = best
            if best is not None and _closed(best_value, bound, gap):
                break
        after = (lp.indexed.n, int(sum(c.size for c in lp.indexed.costs)), len(lp.indexed.edges))
        if best is not None and _closed(best_value, bound, gap):
            return _restricted_unless_optimal(
                _finish(problem, best, bound, False, clock, "periodic", before, after),
                _periodic_restriction(best_ends, how))
        if lp_bound == -math.inf:
            break  # out of time
        logger.info("periodic LP with %d distinct end blocks: bound %.6g, plan %.6g", ends,
                    lp_bound, best_value)
        if _closed(best_value, bound, GOOD_ENOUGH_GAP) and lp.form.num_vars >= PDLP_MIN_VARS:
            break
    if best is not None and _closed(best_value, bound, GOOD_ENOUGH_GAP):
        answer = None
    else:
        answer = _solve_restricted(problem, chain, clock, gap, before, bound)
    if best is not None and (answer is None or best_value < answer.objective):
        return _restricted_unless_optimal(
            _finish(problem, best, bound, False, clock, "periodic", before, after),
            _periodic_restriction(best_ends, how))
    return answer


def _periodic_plan(problem: ChoiceProblem, chain: Chain, agg: Aggregated, ends: int,
                   lp: PeriodicLP, relaxed: LPAnswer, clock: _Clock, gap: float,
                   bound: float) -> tuple[tuple[int, ...], float, str]:
    """``(choices, value, how polished)`` of the plan an LP answer gives: its x expanded to
    every block, then, if that misses ``gap``, polished around the LP's undecided nodes and
    their neighbours (``solver.polish``). The polish of all the rest, which costs a MIP of a
    few blocks, is the caller's: it waits until no cheaper LP answer is left to try."""
    assert relaxed.x is not None
    choices = expand(chain, agg, lp.lift(relaxed.x), problem.num_nodes)
    value, how = problem.evaluate(choices), ""
    if _closed(value, bound, gap):
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
    tied = (f"layers between the first {ends} and the last {ends} take the periodic LP's "
            "strategies")
    return tied + {
        "": "",
        "near": "; so do the other ops the LP decided, and the ops it left undecided and "
                "their neighbours are optimal around them",
        "all": "; the end layers and the rest are optimal around them"}[polished]


def _polish(problem: ChoiceProblem, fixed: np.ndarray, choices: tuple[int, ...],
            clock: _Clock, gap: float) -> Solution | None:
    """The periodic plan with its ``fixed`` nodes held and everything else solved exactly:
    the size of a few blocks at most, not of the model (``solver.polish``). ``None`` when no
    plan came back."""
    narrowed = fix(problem, fixed, choices)
    inner = _Clock(clock.remaining())
    try:
        # no LP first: the narrowed LP is as fractional as the periodic one was where the
        # plan missed the bound (a 3-axis polish: 10 s of LP, then the MIP anyway)
        answer = _solve_graph(narrowed, inner, "auto", True, gap, None,
                              (narrowed.num_nodes, sum(narrowed.sizes), len(narrowed.edges)),
                              lp_first=False)
    except (Infeasible, NoSolutionError):
        return None
    clock.lap("polish")
    return answer


def _solve_restricted(problem: ChoiceProblem, chain: Chain, clock: _Clock, gap: float,
                      before: tuple[int, int, int], known_bound: float | None) -> Solution:
    """A plan with every interior block taking the same choices; its bound is only what is
    proven for the *whole* problem (``known_bound``), so the gap says what the restriction
    may cost."""
    tied = ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                         groups=interior_groups(chain), liveness=problem.liveness,
                         node_memory=problem.node_memory, memory_limit=problem.memory_limit)
    try:
        answer = solve(tied, clock.remaining(), "auto", gap=gap)
    except Infeasible:
        # tying layers may cost memory (a plan could mix layer strategies to fit): only the
        # whole problem can say that nothing fits
        whole = dataclasses.replace(problem, blocks=None)
        return solve(whole, clock.remaining(), "auto", gap=gap, known_bound=known_bound)
    for name, seconds in answer.stats.seconds:
        clock.phases.append((f"restricted_{name}", seconds))
    clock.mark = time.perf_counter()
    bound = -math.inf if known_bound is None else known_bound
    if answer.optimal and bound >= answer.objective * (1 - OPTIMALITY_GAP):
        bound = answer.objective  # not ``gap``: a looser gap must not be called optimal
    timed_out = answer.status is SolveStatus.TIME_LIMIT
    after = (answer.stats.nodes_after, answer.stats.options_after, answer.stats.edges_after)
    solution = _finish(problem, answer.choices, bound, timed_out, clock, "restricted", before,
                       after)
    if solution.optimal:
        return solution
    return dataclasses.replace(solution, restricted=RESTRICTION)


RESTRICTION = "identical interior layers take identical strategies"



def _check_memory(work: Work) -> None:
    if work.limit is None:
        return
    for row in work.rows:
        leanest = sum(float(vec.min()) for vec in row.values())
        if leanest > work.limit:
            raise Infeasible(min_peak=_exact_peak(work), limit=work.limit)


def _exact_peak(work: Work) -> float:
    if len(work.rows) == 1:
        return sum(float(vec.min()) for vec in work.rows[0].values())
    return min_peak(index_work(work))


def _search(ix: Indexed, backend: str, gap: float, clock: _Clock, lp_first: bool = True
            ) -> tuple[np.ndarray, float, bool, str]:
    best, bound, used = None, -math.inf, backend
    if backend in ("auto", "dp"):
        result = lagrange_dp(ix, clock.deadline)
        clock.lap("dp")
        best, bound = _take_dp(result, backend, ix)
        if best is not None and _closed(ix.evaluate(best), bound, gap):
            return best, bound, False, "dp"
        used = "highs" if backend == "auto" and _worth_ilp(ix, best, bound) else "dp"
    timed_out = False
    if used in ("highs", "cpsat"):
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
        best = _fallback(ix, clock.deadline)
    return best, bound, timed_out, used


def _worth_ilp(ix: Indexed, best: np.ndarray | None, bound: float) -> bool:
    if best is None or ix.n <= AUTO_ILP_MAX_NODES:
        return True
    return not _closed(ix.evaluate(best), bound, AUTO_LARGE_GAP)


def _take_dp(result: DPResult | None, backend: str, ix: Indexed
             ) -> tuple[np.ndarray | None, float]:
    if result is None:
        if backend == "dp":
            msg = ("the tree-decomposition DP would need tables above its size limit (the "
                   "graph's treewidth is too large); use backend='auto' or 'highs'")
            raise ProblemTooLargeError(msg, size=math.inf, limit=float(ix.n))
        return None, -math.inf
    return result.x, result.bound


def _closed(objective: float, bound: float, gap: float) -> bool:
    return objective - bound <= gap * max(abs(objective), 1e-300)


def _better(ix: Indexed, a: np.ndarray | None, b: np.ndarray | None) -> np.ndarray | None:
    usable = [x for x in (a, b) if x is not None and ix.fits(x) and
              math.isfinite(ix.evaluate(x))]
    return min(usable, key=ix.evaluate) if usable else None


def _fallback(ix: Indexed, deadline: float | None) -> np.ndarray:
    """The leanest plan (memory first, then cost): feasible whenever any plan is, for a sum."""
    memory = [np.zeros(c.size) for c in ix.costs]
    for row in ix.rows:
        for i, vec in row:
            memory[i] = memory[i] + vec
    x = np.array([int(np.lexsort((c, m))[0]) for c, m in zip(ix.costs, memory, strict=True)])
    if ix.fits(x) and math.isfinite(ix.evaluate(x)):
        return x
    answer = solve_cpsat(ix, None, None, 1.0)
    if answer.x is None:
        msg = "no plan that fits the memory limit was found; raise the limit or the time limit"
        raise NoSolutionError(msg, time_limit=deadline)
    return answer.x


NOISE = 1e-9  # CP-SAT scales costs to integers; its bound carries that rounding


def _magnitude(problem: ChoiceProblem) -> float:
    """Sum of the largest finite |cost| per node and per edge: the scale of any objective."""
    arrays = [*problem.node_costs, *(matrix for _, _, matrix in problem.edges)]
    return float(sum(np.abs(a[np.isfinite(a)]).max(initial=0.0) for a in arrays))


def _finish(problem: ChoiceProblem, choices: tuple[int, ...], bound: float, timed_out: bool,
            clock: _Clock, backend: str, before: tuple[int, int, int],
            after: tuple[int, int, int]) -> Solution:
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
