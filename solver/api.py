"""``solve``: the one entry point; it picks the road a problem takes.

A problem with windows is solved as a short series of window-free ones
(:mod:`solver.windowed`). A problem whose ``blocks`` are verified to be a chain of identical
blocks (a model's layers) takes the periodic road (:mod:`solver.periodic_search`): the
periodic LP of :mod:`solver.periodic`, the size of a few blocks, whose bound is a bound of the
whole problem. A memory-constrained chain has its memory priced and is solved on the same road
(:mod:`solver.memory_price`); only a plan further than ``TIED_SEARCH_GAP`` from its bound goes
on to the search with the interior blocks tied, which keeps the best bound proved so far (the
caller's ``known_bound`` among them). Every other problem goes through reductions, the tree DP
and an ILP only when the DP cannot prove the answer (:mod:`solver.graph_search`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from solver.clock import Clock
from solver.errors import UnknownBackendError
from solver.exact import exhaustive
from solver.graph_search import DESCENT_SECONDS, Sizes, closed, finish, sizes_of, solve_graph
from solver.memory_price import TIED_SEARCH_GAP, solve_priced
from solver.memory_repair import REPAIR_SECONDS, repair
from solver.periodic import Chain, find_chain
from solver.periodic_search import solve_periodic, solve_restricted
from solver.problem import ChoiceProblem
from solver.problem_descent import descend_problem
from solver.solution import OPTIMALITY_GAP, Solution, SolveStatus
from solver.windowed import solve_windowed

BACKENDS = ("auto", "highs", "cpsat", "dp", "exhaustive")
# An answer further than this from its bound has its bound raised to ``floor_bound`` where
# that is higher. Closer, the floor (each node's and edge's cheapest entry) cannot help: on
# the scale targets' training steps it sits 54-72 % below the optimum (gpt2 12 layers on
# dp=2,tp=4, llama3-8b and llama3-70b on dp=8,tp=8, mixtral-8x7b on dp=2,ep=4,tp=8; 0.01-0.04
# s to read every array), so reading it there is time spent for nothing
FLOOR_GAP = 0.1


def solve(problem: ChoiceProblem, time_limit: float | None = None, backend: str = "auto", *,
          reductions: bool = True, gap: float = OPTIMALITY_GAP,
          known_bound: float | None = None,
          free_choices: Sequence[int] | None = None,
          stop_when: Callable[[tuple[int, ...]], bool] | None = None,
          incumbent: Sequence[int] | None = None, early_look: bool = True,
          provisional: bool = False) -> Solution:
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
        free_choices: the optimum without memory rows, when the caller has it.
        stop_when: a chain's search ends as soon as its best plan makes this true, as if
            its time had run out (the planner's solve without memory rows: once its plan
            does not fit, only the bound is wanted, and the time is the constrained solve's).
        incumbent: a plan of this problem the caller already has (finite cost, within the
            memory limit), e.g. the last answer of a series of related problems. The answer
            is never dearer, and a chain's search that runs out of time returns it instead
            of finding a first plan late (a share round of llama3-70b given 10 s spent 30 s
            in CP-SAT looking for one).
        early_look: a chain's large LP takes PDLP's first look at its point early
            (``solver.backends.lp.EARLY_LOOK``). Off for LPs known to be integral but
            degenerate, whose early point proves nothing and whose later looks it delays:
            the rounds of lazily priced shared reshards (llama3-70b dp=8,tp=8 with
            ``--share-reshards``: 175 s with it, 124 s without).
        provisional: the caller wants this answer for its plan, and may ask again for a
            proof: a chain's periodic LP (without memory rows) that PDLP leaves at its cap
            ends with the support LP's answer, without the barrier that would solve the LP
            exactly for a tighter bound (a shared-reshard round, which only says what to make
            exact next unless it is the last: llama3-70b's first round spent 43 s there for a
            plan 0.004 % cheaper), and no plan of such a chain is polished over all the rest
            around its tied layers (that round's last polish: 10.5 s for a plan 0.004 %
            cheaper, the same rounds after it); PDLP stops one leg after its last look
            (``solver.backends.lp.PDLP_PLAN_ITERATIONS``). A memory-bound chain's probes
            decide this themselves.

    Returns:
        A :class:`Solution` whose objective is recomputed from the float costs.

    Raises:
        Infeasible: no plan fits the memory limit (carries ``min_peak``, exact or, when the
            time limit cut its search short, a proven lower bound, and ``found_peak``, the
            peak of the leanest plan found).
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
    start = None if incumbent is None else _checked_incumbent(problem, incumbent)
    answer = _solve(problem, time_limit, backend, reductions, gap, known_bound, free_choices,
                    stop_when, start, early_look, provisional)
    answer = answer if start is None else _no_dearer(problem, answer, start)
    if closed(answer.objective, answer.bound, max(gap, FLOOR_GAP)):
        return answer
    return answer.with_bound(floor_bound(problem))


def _solve(problem: ChoiceProblem, time_limit: float | None, backend: str, reductions: bool,
           gap: float, known_bound: float | None, free_choices: Sequence[int] | None,
           stop_when: Callable[[tuple[int, ...]], bool] | None,
           incumbent: tuple[int, ...] | None, early_look: bool = True,
           provisional: bool = False) -> Solution:
    """``solve`` once its arguments are checked: the road the problem takes."""
    clock = Clock(time_limit, stop_when)
    before = sizes_of(problem)
    if backend == "exhaustive":
        choices, objective = exhaustive(problem)
        clock.lap("exhaustive")
        return finish(problem, choices, objective, False, clock, "exhaustive", before, before)
    if problem.windows and backend == "auto":
        def plain(simpler: ChoiceProblem, left: float | None) -> Solution:
            # the same nodes and options: a plan of the windowed problem is one of each
            return solve(simpler, left, backend, reductions=reductions, gap=gap,
                         stop_when=stop_when, incumbent=incumbent, early_look=early_look,
                         provisional=provisional)

        answer = solve_windowed(problem, clock, gap, before, plain, incumbent)
        if known_bound is not None and known_bound > answer.bound:
            answer = finish(problem, answer.choices, min(known_bound, answer.objective),
                            answer.status is SolveStatus.TIME_LIMIT, clock, "windowed", before,
                            before)
        return answer
    chain = find_chain(problem) if backend == "auto" and reductions else None
    if chain is not None and not problem.memory_rows():
        return _polished(problem, solve_periodic(problem, chain, clock, gap, before,
                                                 incumbent=incumbent, early_look=early_look,
                                                 provisional=provisional), incumbent)
    if chain is not None:
        return _polished(problem, _solve_chain_with_memory(
            problem, chain, clock, gap, before, known_bound,
            None if free_choices is None else tuple(free_choices), incumbent), incumbent)
    return solve_graph(problem, clock, backend, reductions, gap, known_bound, before)


# Without a time limit, the tied search after a priced plan runs only on problems whose memory
# rows hold at most this many option entries written out: it cannot raise the bound, only find
# a plan, and above that its MIP does not end in useful time (llama3-70b training on
# dp=2,fsdp=4,tp=8, 661 M entries: no answer after 6 minutes, behind a priced plan 9.9 % from
# its bound). The answer is then the priced plan, with its gap and restriction.
TIED_MAX_ROW_ENTRIES = 2_000_000


def _solve_chain_with_memory(problem: ChoiceProblem, chain: Chain, clock: Clock, gap: float,
                             before: Sizes, known_bound: float | None,
                             free_choices: tuple[int, ...] | None,
                             incumbent: tuple[int, ...] | None = None) -> Solution:
    """Memory priced on the periodic road first (:mod:`solver.memory_price`); only a plan
    further than ``TIED_SEARCH_GAP`` (or the caller's ``gap``, when looser) from its bound
    goes on to the tied search, which starts from the better of the two bounds and keeps the
    better plan (it cannot raise the bound, only find a better plan). Out of time with no
    priced plan, the caller's ``incumbent`` (else the leanest plan) is the answer."""
    priced = solve_priced(problem, chain, clock, gap, before, known_bound, free_choices,
                          incumbent)
    if priced is not None and (closed(priced.objective, priced.bound,
                                      max(gap, TIED_SEARCH_GAP)) or clock.expired()):
        return priced
    if priced is not None and clock.deadline is None \
            and problem.memory_row_entries() > TIED_MAX_ROW_ENTRIES:
        return priced  # no time limit to end a tied search this size: the priced plan
    bound = known_bound if priced is None else priced.bound
    if priced is None and clock.expired():
        # no time for a search: a plan that fits, at once
        lean = incumbent if incumbent is not None else leanest(problem)
        if lean is not None:
            return finish(problem, lean, -math.inf if bound is None else bound, True, clock,
                          "leanest" if incumbent is None else "incumbent", before, before)
    tied = solve_restricted(problem, chain, clock, gap, before, bound)
    if priced is not None and priced.objective < tied.objective:
        return priced
    return tied


def _polished(problem: ChoiceProblem, answer: Solution,
              incumbent: tuple[int, ...] | None) -> Solution:
    """A chain's answer the time limit cut short, polished by single-node moves on the
    problem as given (:mod:`solver.problem_descent`, at most ``DESCENT_SECONDS``): the
    leanest plan a memory-bound chain returns when no search found one ignores cost
    (llama3-70b training on dp=2,fsdp=4,tp=8 under 120 s: 328.5 s, descended 95.7 s in
    1.0 s), and a cut-short search's plan may still have single moves that pay. The bound
    stands (the plan only gets cheaper); the caller's incumbent, returned as its own plan,
    is left as it is."""
    if answer.status is not SolveStatus.TIME_LIMIT or answer.choices == incumbent:
        return answer
    choices = descend_problem(problem, answer.choices, time.perf_counter() + DESCENT_SECONDS)
    objective = problem.evaluate(choices)
    if not objective < answer.objective:
        return answer
    return dataclasses.replace(answer, choices=choices, objective=objective,
                               peak_memory=problem.peak_memory(choices))


def _checked_incumbent(problem: ChoiceProblem, incumbent: Sequence[int]
                       ) -> tuple[int, ...]:
    """``incumbent`` as a tuple, once it is a plan of ``problem`` (:func:`plan_error`;
    ``ValueError`` naming what is wrong otherwise)."""
    plan = tuple(int(c) for c in incumbent)
    error = plan_error(problem, plan)
    if error is not None:
        raise ValueError(f"the incumbent {error}")
    return plan


def plan_error(problem: ChoiceProblem, choices: Sequence[int]) -> str | None:
    """What keeps ``choices`` from being a plan of ``problem`` that ``solve(incumbent=)``
    takes (one option per node, a finite cost, within the memory limit), or None: for a
    caller holding a plan that may not obey a changed problem (``explain``'s re-solves)."""
    plan = tuple(int(c) for c in choices)
    if len(plan) != problem.num_nodes or any(
            not 0 <= c < size for c, size in zip(plan, problem.sizes, strict=True)):
        return (f"is not a plan of this problem: {len(plan)} choices for "
                f"{problem.num_nodes} nodes, or a choice out of its range")
    if not math.isfinite(problem.evaluate(plan)):
        return "costs inf: some node or edge it takes is impossible"
    peak = problem.peak_memory(plan)
    if peak is not None and problem.memory_limit is not None and peak > problem.memory_limit:
        return f"needs {peak:.6g} bytes, above the memory limit {problem.memory_limit:.6g}"
    return None


def _no_dearer(problem: ChoiceProblem, answer: Solution, incumbent: tuple[int, ...]
               ) -> Solution:
    """``answer``, or the caller's ``incumbent`` in its place when that costs less: with the
    answer's bound (a bound of the problem, whatever plan it is set against), optimal if it
    meets it, else the answer's status (a proven answer it undercuts is within its gap)."""
    value = problem.evaluate(incumbent)
    if value >= answer.objective:
        return answer
    status = SolveStatus.FEASIBLE if answer.status is SolveStatus.OPTIMAL else answer.status
    return dataclasses.replace(answer, choices=incumbent, objective=value, bound=-math.inf,
                               status=status, peak_memory=problem.peak_memory(incumbent),
                               restricted=None).with_bound(answer.bound)


def floor_bound(problem: ChoiceProblem) -> float:
    """A lower bound of every plan that needs no search: each node's cheapest option, each
    edge's cheapest entry and each window's longest stream at its cheapest (``-inf`` when a
    window has a negative weight). Weak, but a search cut short before its LP proved
    anything may prove less: gpt2 (2 layers) on dp=2,tp=2 given 0.3 s of shared-reshard
    rounds reported a bound of -613 ms for a 9 ms step (2.634 ms with this floor). Arrays
    shared by many nodes and edges (a model's layers) are read once."""
    least: dict[int, float] = {}

    def low(array: np.ndarray) -> float:
        if id(array) not in least:
            least[id(array)] = float(np.min(array))
        return least[id(array)]

    total = sum(low(cost) for cost in problem.node_costs)
    total += sum(low(matrix) for _, _, matrix in problem.edges)
    for window in problem.windows:
        if window.weight < 0:
            return -math.inf
        total += window.weight * max(
            stream.constant + sum(low(vec) for _, vec in stream.nodes)
            + sum(low(matrix) for _, _, matrix in stream.edges) for stream in window.streams)
    return total if math.isfinite(total) else -math.inf


def fitting_plan(problem: ChoiceProblem, start: Sequence[int] | None = None
                 ) -> tuple[int, ...] | None:
    """A plan within the memory limit found without a search: the leanest plan (:func:`leanest`)
    if it fits, else ``start`` repaired (:func:`solver.memory_repair.repair`, at most
    ``REPAIR_SECONDS``); ``None`` proves nothing (a plan may still fit). For callers that only
    ask whether anything fits: the planner, told that pinned tensors do not fit, asks it of the
    problem without the pins (gpt2 with replicated parameters under 100 MB: a 29 s MIP before).
    """
    lean = leanest(problem)
    if lean is not None or start is None:
        return lean
    return repair(problem, start, time.perf_counter() + REPAIR_SECONDS)


def leanest(problem: ChoiceProblem) -> tuple[int, ...] | None:
    """The plan that takes, at every node, the finite-cost option with the least memory
    summed over every memory row (the cheapest among equals), if it fits; ``None`` if not.
    Linear in the rows' terms, with no model built: what a solve whose deadline has passed
    before it found any fitting plan returns (``solver.clock``).

    Example:
        >>> p = ChoiceProblem(node_costs=[[1.0, 2.0, 0.0]], node_memory=[[1.0, 1.0, 0.0]],
        ...                   memory_limit=0.5)
        >>> leanest(p)
        (2,)
    """
    weight = problem.memory_totals()
    choices = tuple(int(np.lexsort((cost, np.where(np.isfinite(cost), memory, np.inf)))[0])
                    for cost, memory in zip(problem.node_costs, weight, strict=True))
    peak = problem.peak_memory(choices)
    fits = peak is None or problem.memory_limit is None or peak <= problem.memory_limit
    return choices if fits and math.isfinite(problem.evaluate(choices)) else None
