"""A search the time limit cut short never answers with a plan slower than a hand plan.

A proven-optimal search is never slower than a named hand plan (``--strategy``): each is the
same problem with options removed. A search stopped by ``--time-limit`` has no such guarantee,
and on hard meshes its plan can be far off: llama3-8b (2 layers, seq 1,024) on
``dp=2,fsdp=4,tp=4`` stopped after 60 s at 35.1 ms and a 63 % gap, where ``--strategy
megatron`` is 20.3 ms, proven in 0.1 s. So when the time limit ends the search, the hand
plans the mesh can run are solved too (their problems are small: most options pinned away),
and the cheapest of them replaces the search's plan when it is cheaper on the search's own
problem. The limit covers both: where this fallback may apply, the search gets the limit less
a tenth (``HAND_SHARE``) and the hand plans share what is left of it, each an even split of
the rest when it starts (a plan proven early leaves its time to the next; a hand plan still
takes the ~0.1 s its solve needs when its slice is shorter). The bound stays
the search's: it bounds every plan. A search that ends by itself short of a proof (searched to
a stated gap) is left as it is: its gap already says how far any plan could beat it.

Only plans that fit the memory limit are offered, and only hand plans whose pinned problem
solves without memory rows to a plan that fits: a hand plan that needs the rows is left out
rather than allowed to spend the time again.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

import solver
from autoshard.errors import AutoshardError
from autoshard.planning.named import STRATEGIES
from autoshard.planning.pin_masks import Restriction

logger = logging.getLogger(__name__)

# the part of the time limit kept from the search for the hand plans (llama3-8b, 2 layers, on
# dp=2,fsdp=4,tp=4: all seven take 0.4 s together, a tenth of a 20 s limit is 2 s)
HAND_SHARE = 0.1
# the least time one solve is given, even when the search overran its share
MIN_SOLVE_S = 0.01


@dataclass(frozen=True, slots=True)
class HandPlan:
    """A named hand plan's choices on the search's problem and what they cost there."""

    name: str
    choices: tuple[int, ...]
    objective: float


def search_share(time_limit: float) -> float:
    """The part of ``time_limit`` the search gets when the hand plans may follow it.

    Example:
        >>> search_share(20.0)
        18.0
    """
    return time_limit * (1 - HAND_SHARE)


def best_hand_plan(problem: solver.ChoiceProblem, restrict: Callable[[str], Restriction],
                   fits: Callable[[Sequence[int]], bool], seconds: float, backend: str
                   ) -> HandPlan | None:
    """The cheapest named hand plan on ``problem`` (the search's problem, memory rows and
    all), or ``None`` when none can run here. ``restrict(name)`` gives the strategy's pins
    resolved on the plan's graph (raising an :class:`AutoshardError` when the mesh cannot
    run it); ``fits(choices)``: within the memory limit. ``seconds``: what the hand plans
    may take together (what the search left of the time limit); each is given an even split
    of what is left of it when it starts, at least ``MIN_SOLVE_S``."""
    deadline = time.perf_counter() + seconds
    free = without_rows(problem)
    best: HandPlan | None = None
    for done, name in enumerate(STRATEGIES):
        share = max((deadline - time.perf_counter()) / (len(STRATEGIES) - done), MIN_SOLVE_S)
        choices = pinned_plan(free, name, restrict, share, backend)
        if choices is None or not fits(choices):
            continue
        value = problem.evaluate(choices)
        if math.isfinite(value) and (best is None or value < best.objective):
            best = HandPlan(name=name, choices=choices, objective=value)
    return best


def without_rows(problem: solver.ChoiceProblem) -> solver.ChoiceProblem:
    """``problem`` without its memory rows (the hand plans are solved on it)."""
    return solver.ChoiceProblem(node_costs=problem.node_costs, edges=problem.edges,
                                blocks=problem.blocks, windows=problem.windows)


def pinned_plan(free: solver.ChoiceProblem, name: str, restrict: Callable[[str], Restriction],
                time_limit: float, backend: str) -> tuple[int, ...] | None:
    """Hand plan ``name`` solved on ``free`` (no memory rows), or ``None`` when the mesh
    cannot run it or its pins leave no plan."""
    try:
        masks = restrict(name).masks
    except AutoshardError:
        return None  # a role the mesh lacks, pins no option satisfies: not a plan here
    costs = [np.where(masks[n], cost, np.inf) if n in masks else cost
             for n, cost in enumerate(free.node_costs)]
    try:
        answer = solver.solve(dataclasses.replace(free, node_costs=tuple(costs)),
                              time_limit=time_limit, backend=backend)
    except solver.SolverError:
        return None  # no finite plan under the pins
    logger.info("hand plan %s: %.6g s (%s)", name, answer.objective, answer.status.name)
    return tuple(answer.choices)


def with_hand_floor(solution: solver.Solution, problem: solver.ChoiceProblem,
                    hand: HandPlan | None) -> solver.Solution:
    """``solution``, or ``hand`` in its place when it is cheaper on ``problem``; the bound is
    the search's either way."""
    if hand is None or hand.objective >= solution.objective:
        return solution
    return dataclasses.replace(
        solution, choices=hand.choices, objective=hand.objective, bound=-math.inf,
        peak_memory=problem.peak_memory(hand.choices), restricted=None).with_bound(solution.bound)
