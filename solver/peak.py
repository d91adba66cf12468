"""The smallest achievable memory peak, for the ``Infeasible`` certificate, within the time left.

The least peak over plans of the largest memory row is a min-max integer program (the rows
share nodes), solved exactly by CP-SAT when there is time. There may not be: llama3-70b
training on dp=8,tp=8 has 5,133 rows whose terms hold 8.7 M option entries once its layers are
tied, 181.6 M untied, and the CP-SAT model of the untied one was still being built after 860 s
(9.5 GB) of a 30 s limit. So the answer is a pair of bounds, never a guess: ``lower`` is proven
(every row's leanest sum; CP-SAT's bound when it ran) and ``upper`` is the peak of a plan that
exists (the leanest plan, the same with the rows reweighted towards the peak, CP-SAT's best
when it ran). They meet (``exact``) when a plan reaches the lower bound (one row without groups
or inf pairs; llama3-70b above, at once; gpt2 training under 400 MiB once reweighted) or CP-SAT
proves its optimum. The cheap steps come first; CP-SAT's build checks the clock row by row and
its solve gets only the time left: what the deadline cuts short leaves the bounds found so far.

Edge costs play no part: an edge makes no plan impossible unless its entry is inf, and such
pairs are excluded (as are options of inf node cost).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from solver.clock import Clock
from solver.problem import ChoiceProblem
from solver.row_sums import RowSums, weighted_totals

# CP-SAT's coefficients are integers: non-integral bytes are scaled so that the heaviest row
# sums to at most this (int64 holds every partial sum), each term rounded up
SCALED_TOP = 2.0**40

# the reweighted leanest plans (_reweighted): rounds at most, and how fast a row at the peak
# gains weight on the others per round (e**4 on a row half as full); gpt2 training (12 layers,
# dp=2,tp=4) under 400 MiB: the leanest plan peaks at 1.26 GiB, a reweighted one meets the
# lower bound, 770.14 MiB, in 0.12 s
REWEIGHT_ROUNDS = 40
REWEIGHT_RATE = 8.0


@dataclasses.dataclass(frozen=True, slots=True)
class PeakBounds:
    """Where the least peak over all plans lies: no plan peaks below ``lower`` (proven) and
    some plan peaks at ``upper`` (found; ``inf`` when no plan was found). ``exact`` when they
    are the same number.

    Example:
        >>> PeakBounds(lower=3.0, upper=3.0).exact, PeakBounds(lower=2.0, upper=3.0).exact
        (True, False)
    """

    lower: float
    upper: float

    @property
    def exact(self) -> bool:
        return self.lower >= self.upper


def least_peak(problem: ChoiceProblem, clock: Clock, known_lower: float = -math.inf,
               *, search: bool = True) -> PeakBounds:
    """Bounds of the least peak of ``problem``'s memory rows over its plans.

    Args:
        problem: a problem with memory rows (groups and inf entries respected).
        clock: the solve's clock: the CP-SAT model is built and solved only before its
            deadline (none: run to the proof).
        known_lower: a lower bound the caller has proven (e.g. a group-merged row's leanest
            sum, which the per-node one below can miss).
        search: False for the cheap bounds alone (a caller that drops the verdict's numbers).

    Returns:
        The bounds; ``exact`` when the least peak is proven.

    Example:
        >>> p = ChoiceProblem(node_costs=[[0.0, 0.0], [0.0, 0.0]],
        ...                   liveness=[[(0, [1.0, 3.0]), (1, [4.0, 1.0])],
        ...                             [(0, [5.0, 1.0])]], memory_limit=1.0)
        >>> least_peak(p, Clock(None))
        PeakBounds(lower=4.0, upper=4.0)
    """
    compiled = problem.compiled_rows()
    lower = max(known_lower, float(compiled.least_sums().max(initial=-math.inf)))
    owner = _owners(problem)
    lean = _leanest(problem, owner)
    upper = plan_peak(problem, lean)
    if lower >= upper or not search or clock.expired():
        return _bounds(lower, upper)
    lean, upper = _reweighted(problem, owner, compiled, lean, upper, lower, clock)
    if lower >= upper or clock.expired():
        return _bounds(lower, upper)
    found = _cpsat(problem, owner, compiled, lean, clock)
    if found is None:
        return _bounds(lower, upper)
    plan, bound, proven = found
    upper = min(upper, plan_peak(problem, plan))
    if proven:  # exact to CP-SAT's rounding: n terms, each up by < heaviest/2**40
        return PeakBounds(lower=upper, upper=upper)
    return _bounds(max(lower, bound), upper)


def _bounds(lower: float, upper: float) -> PeakBounds:
    return PeakBounds(lower=min(lower, upper), upper=upper)


def _owners(problem: ChoiceProblem) -> list[int]:
    """Each node's group representative (itself when in no group)."""
    owner = list(range(problem.num_nodes))
    for group in problem.groups or ():
        for node in group:
            owner[node] = group[0]
    return owner


def _reweighted(problem: ChoiceProblem, owner: list[int], compiled, plan: tuple[int, ...],
                peak: float, lower: float, clock: Clock) -> tuple[tuple[int, ...], float]:
    """A leaner plan than ``plan`` (peak ``peak``), if one of these is: each the leanest
    with the rows weighted by how close they came to the peak so far (multiplicative
    weights, the textbook heuristic for a min-max of sums: rows that bind gain weight until
    another row binds), ``REWEIGHT_ROUNDS`` rounds of numpy passes, fewer past the deadline
    or once the plan meets the lower bound."""
    weight = np.ones(compiled.rows)
    best, best_peak = plan, peak
    sums = compiled.sums(plan)
    for _ in range(REWEIGHT_ROUNDS):
        if best_peak <= lower or clock.expired() or not math.isfinite(best_peak):
            break
        weight = weight * np.exp(REWEIGHT_RATE * (sums / best_peak - 1.0))
        weight = weight / weight.max()
        plan = _leanest(problem, owner, _row_weighted_totals(compiled, weight, problem.sizes))
        sums = compiled.sums(plan)
        found = plan_peak(problem, plan)
        if found < best_peak:
            best, best_peak = plan, found
    return best, best_peak


def _row_weighted_totals(compiled, weight: np.ndarray, sizes: Sequence[int]
                         ) -> list[np.ndarray]:
    """Per node, its terms' vectors times the summed weight of the rows they occur in."""
    if isinstance(compiled, RowSums):
        lengths = np.diff(np.append(compiled.starts, compiled.occurrences.size))
        per_occurrence = np.repeat(weight[compiled.filled], lengths)
        per_term = np.bincount(compiled.occurrences, weights=per_occurrence,
                               minlength=compiled.nodes.size)
    else:  # spans: the weight of the rows each covers, by a prefix sum
        prefix = np.concatenate(([0.0], np.cumsum(weight)))
        per_term = prefix[compiled.stops] - prefix[compiled.firsts]
    return weighted_totals(compiled.nodes, compiled.offsets, compiled.values, per_term, sizes)


def _leanest(problem: ChoiceProblem, owner: list[int],
             totals: list[np.ndarray] | None = None) -> tuple[int, ...]:
    """Per group (or node), the finite option with the least memory summed over every row
    (or ``totals``, per node), the cheapest among equals: a plan in one pass, whose peak is
    an upper bound."""
    totals = problem.memory_totals() if totals is None else totals
    weight: dict[int, np.ndarray] = {}
    cost: dict[int, np.ndarray] = {}
    for node, rep in enumerate(owner):
        weight[rep] = weight.get(rep, 0.0) + totals[node]
        cost[rep] = cost.get(rep, 0.0) + problem.node_costs[node]
    pick = {rep: int(np.lexsort((cost[rep], np.where(np.isfinite(cost[rep]), weight[rep],
                                                     np.inf)))[0]) for rep in weight}
    return tuple(pick[rep] for rep in owner)


def leanest_plan(problem: ChoiceProblem) -> tuple[int, ...]:
    """Per equal-choice group (or node), the finite option with the least memory summed over
    every row, the cheapest among equals (it may not fit, nor be possible: :func:`plan_peak`).

    Example:
        >>> p = ChoiceProblem(node_costs=[[1.0, 2.0, 0.0]], node_memory=[[1.0, 1.0, 0.0]],
        ...                   memory_limit=0.5)
        >>> leanest_plan(p)
        (2,)
    """
    return _leanest(problem, _owners(problem))


def plan_peak(problem: ChoiceProblem, plan: tuple[int, ...]) -> float:
    """The plan's peak, or inf when the plan is impossible (an inf node or edge entry)."""
    if not math.isfinite(problem.evaluate(plan)):
        return math.inf
    return float(problem.compiled_rows().peak(plan))


def _cpsat(problem: ChoiceProblem, owner: list[int], compiled, hint: tuple[int, ...],
           clock: Clock) -> tuple[tuple[int, ...], float, bool] | None:
    """CP-SAT's min-max program: (its best plan, its proven lower bound in bytes, whether
    it proved that plan optimal), or None when the deadline cut the build or the solve
    short before any plan."""
    from ortools.sat.python import cp_model

    values = compiled.values
    integral = bool(np.all(values == np.round(values)))
    heaviest = -float(dataclasses.replace(compiled, values=-np.abs(values)).least_sums().min())
    scale = 1.0 if integral else SCALED_TOP / max(heaviest, 1e-300)
    model = cp_model.CpModel()
    x: dict[int, list] = {}
    for rep in sorted(set(owner)):
        x[rep] = [model.new_bool_var(f"x{rep}_{p}") for p in range(problem.sizes[rep])]
        model.add_exactly_one(x[rep])
    for node, costs in enumerate(problem.node_costs):
        for p in np.flatnonzero(~np.isfinite(costs)).tolist():
            model.add(x[owner[node]][p] == 0)
    for u, v, matrix in problem.edges:
        for p, q in zip(*np.nonzero(~np.isfinite(matrix)), strict=True):
            a, b = x[owner[u]][int(p)], x[owner[v]][int(q)]
            model.add_bool_or([a.Not()] if a is b else [a.Not(), b.Not()])
    top = math.ceil(heaviest * scale) + 1
    peak = model.new_int_var(-top, top, "peak")
    for row in problem.memory_rows():
        if clock.expired():
            return None  # the build counts: nothing started after the deadline (solver.clock)
        variables: list = []
        coefs: list[int] = []
        for node, vec in row:
            ints = np.ceil(np.asarray(vec) * scale).astype(np.int64)
            nonzero = np.flatnonzero(ints)
            variables.extend(x[owner[node]][p] for p in nonzero.tolist())
            coefs.extend(ints[nonzero].tolist())
        model.add(cp_model.LinearExpr.weighted_sum(variables, coefs) <= peak)
    model.minimize(peak)
    for rep, options in x.items():
        for p, var in enumerate(options):
            model.add_hint(var, p == hint[rep])
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    left = clock.remaining()
    if left is not None:
        if left <= 0.0:
            return None
        solver.parameters.max_time_in_seconds = left
    status = solver.solve(model)
    clock.lap("least_peak")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    plan = tuple(next(p for p, var in enumerate(x[rep]) if solver.boolean_value(var))
                 for rep in owner)
    # every coefficient was rounded up by less than one unit: a row of n terms sums to at
    # most n units above its bytes times the scale
    slack = 0.0 if integral else float(problem.num_nodes)
    bound = (float(solver.best_objective_bound) - slack) / scale
    return plan, bound, status == cp_model.OPTIMAL
