"""A memory-bound chain's whole problem, once no plan that ties its layers fits.

Tying layers may cost memory (a plan could mix layer strategies to fit), so only the whole
problem, every layer's rows spelled out, can say that nothing fits. Building its working form
is the dearest step of all: llama3-70b training on dp=8,tp=8 (80 layers, 8,030 nodes, 5,133
rows) took 555 s on a loaded machine, against a 30 s limit. So it is built only when it may
hold a plan and the time left can pay for it (:data:`BUILD_SECONDS_PER_TERM`). Otherwise:

- a row that cannot fit even with every node at its leanest option proves that nothing fits
  (one numpy pass over the compiled rows); the verdict's least peak comes with the bounds the
  time left allows (:func:`solver.peak.least_peak`), the tied plan found an upper bound too;
- the leanest plan, when it fits, is the answer (cut short, as a search out of time);
- else the search ends without a plan (``NoSolutionError``: raise the time limit).
"""

from __future__ import annotations

import math

from solver.clock import Clock
from solver.errors import Infeasible, NoSolutionError
from solver.graph_search import Sizes, finish, infeasible, sizes_of, solve_graph
from solver.peak import leanest_plan, plan_peak
from solver.problem import ChoiceProblem
from solver.row_sums import RowSums
from solver.solution import Solution

# a lower estimate of the working form's build per (node, vector) term of the memory rows:
# 7.4 us were measured on 375 k terms of a synthetic liveness problem (2 cores shared, load
# 8.5), and llama3-70b's whole problem (181.6 M option entries in its rows) took 555 s. Set
# low on purpose: a build is skipped only when even this fast it could not end in time
BUILD_SECONDS_PER_TERM = 2e-6


def solve_untied(whole: ChoiceProblem, tied_verdict: Infeasible, clock: Clock, gap: float,
                 before: Sizes, known_bound: float | None) -> Solution:
    """The whole problem's answer or verdict (module docstring), its working form built only
    when there is time for it.

    Raises:
        Infeasible: no plan fits (its least peak bounded, the tied plan's among the found).
        NoSolutionError: no time to search, and the leanest plan does not fit.
    """
    assert whole.memory_limit is not None
    if float(whole.compiled_rows().least_sums().max()) > whole.memory_limit:
        raise tightened(infeasible(whole, Clock(clock.remaining())), tied_verdict)
    left = clock.remaining()
    if left is not None and row_terms(whole) * BUILD_SECONDS_PER_TERM >= left:
        lean = leanest_plan(whole)
        if plan_peak(whole, lean) <= whole.memory_limit:
            bound = -math.inf if known_bound is None else known_bound
            return finish(whole, lean, bound, True, clock, "leanest", before, sizes_of(whole))
        limit = None if clock.deadline is None else clock.deadline - clock.start
        raise NoSolutionError("no plan that fits the memory limit was found within the time "
                              "limit (a plan that ties the layers does not fit, and there was "
                              "no time to search plans that mix them); raise the time limit "
                              "or the memory limit", time_limit=limit)
    try:
        return solve_graph(whole, Clock(left), "auto", True, gap, known_bound, before)
    except Infeasible as verdict:
        raise tightened(verdict, tied_verdict) from None


def row_terms(problem: ChoiceProblem) -> int:
    """How many (node, vector) terms the memory rows hold, from the compiled rows."""
    compiled = problem.compiled_rows()
    if isinstance(compiled, RowSums):
        return int(compiled.occurrences.size)
    return int((compiled.stops - compiled.firsts).sum())


def tightened(verdict: Infeasible, tied_verdict: Infeasible) -> Infeasible:
    """The whole problem's verdict, the tied plan found (a plan of the whole problem too) its
    upper bound when lower than the verdict's own."""
    found = [p for p in (verdict.found_peak, tied_verdict.found_peak) if p is not None]
    if verdict.exact or not found or min(found) == verdict.found_peak:
        return verdict
    upper = min(found)
    return Infeasible(min_peak=min(verdict.min_peak, upper), limit=verdict.limit,
                      exact=verdict.min_peak >= upper, found_peak=upper)
