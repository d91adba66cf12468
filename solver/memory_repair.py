"""A plan that peaks a little above the memory limit, brought under it by the cheapest moves.

Why: the memory price (:mod:`solver.memory_price`) prices one row with coefficients lowered to
be equal in every interior block, so a priced plan can fit the priced row and still peak above
the limit elsewhere; and when even the plan that asks for the least priced memory does not fit,
the search had no plan at all and the whole chain went to the tied search. llama3-70b training
on dp=2,fsdp=4,tp=8 (seq 8192, 64 micro-batches): every probe, at every price, came back at
75.69 GiB against a 74.51 GiB limit (plans 79.9-81.2 s), and the tied search, given the 90 s
left of a 120 s limit, ended on a 94.95 s plan.

The repair is the greedy of Lagrangian heuristics (Fisher 1981, "The Lagrangian Relaxation
Method for Solving Integer Programming Problems", Management Science 27(1), section 7): at the
row where the plan peaks, every single-node move that lowers it is scored by what it adds to
the objective (the node's own cost and its edges to the neighbours as they stand) per byte it
saves there, and moves are taken cheapest per byte first, each checked again against the
current plan (cost and every row it touches), until that row fits; then the next peak, until
every row fits. A move may lift another row up to the limit, or above it but below the
current peak: the largest row sum never rises and the rows at it only fall, so the repair
ends. The result is then polished by :func:`solver.problem_descent.descend_problem`, which
keeps it within the limit.

It is a heuristic: its plan is a candidate, never a bound.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

import numpy as np

from solver.descent import local_costs, neighbours_of
from solver.problem import ChoiceProblem
from solver.problem_descent import Run, descend_problem, row_sums_of, runs_of, tied_nodes

MAX_ROUNDS = 10_000  # rounds of scored moves at most (a bound only)
# the time a caller gives one repair: 0.3-0.6 s on llama3-70b's 8,030 nodes, 0.7-1.3 s on
# llama3.1-405b's
REPAIR_SECONDS = 2.0


def repair(problem: ChoiceProblem, choices: Sequence[int],
           deadline: float | None = None) -> tuple[int, ...] | None:
    """``choices`` moved, one node at a time, until every memory row is within the limit,
    then descended; ``None`` when the moves stall above the limit (no single move lowers
    the peak within the rules), the problem has windows (not pairwise) or no memory limit,
    or ``deadline`` (a ``perf_counter`` time) passes."""
    if problem.memory_limit is None or problem.windows or problem.num_nodes == 0:
        return None
    x = np.array(choices, dtype=np.intp)
    runs = runs_of(problem)
    limit = float(problem.memory_limit)
    sums = row_sums_of(problem, x, runs)
    if not sums.size:
        return None
    tied = tied_nodes(problem)  # overlapping runs are fine here: _changes adds them up
    neighbours = neighbours_of(problem.num_nodes, problem.edges)
    alive = _alive_at(runs, tied)
    for _ in range(MAX_ROUNDS):
        peak = int(np.argmax(sums))
        if sums[peak] <= limit:
            break
        if deadline is not None and time.perf_counter() >= deadline:
            return None
        moves = sorted(_scored_moves(problem, neighbours, runs, alive(peak), x, sums, peak,
                                     limit))
        moved = False
        for _, node, option in moves:
            if sums[peak] <= limit:
                break
            moved |= _try_move(problem, neighbours, runs[node], node, option, x, sums, peak,
                               limit)
        if not moved:
            return None  # no move left that lowers the peak
    found = descend_problem(problem, tuple(int(c) for c in x), deadline)
    peak_now = problem.peak_memory(found)  # the rows' own sums: the running ones may round
    if peak_now is None or peak_now > limit:
        return None
    return found


def _alive_at(runs: list[list[Run]], tied: set[int]):
    """A function from a row to the nodes (not tied) with a term alive there."""
    firsts, stops, nodes = [], [], []
    for node, mine in enumerate(runs):
        if node in tied:
            continue
        for first, stop, _ in mine:
            firsts.append(first)
            stops.append(stop)
            nodes.append(node)
    first_at, stop_at, node_at = np.array(firsts), np.array(stops), np.array(nodes)

    def alive(row: int) -> list[int]:
        return sorted(set(node_at[(first_at <= row) & (row < stop_at)].tolist()))

    return alive


def _changes(mine: list[Run], current: int, sums: np.ndarray
             ) -> list[tuple[int, int, np.ndarray, float]]:
    """The node's rows cut into segments covered by the same runs: per segment, its first
    and stop row, the change of every option against ``current`` there, and the segment's
    largest row sum now."""
    cuts = sorted({edge for first, stop, _ in mine for edge in (first, stop)})
    found = []
    for first, stop in itertools.pairwise(cuts):
        covering = [vec for a, b, vec in mine if a <= first and stop <= b]
        if not covering:
            continue
        change = sum(vec - vec[current] for vec in covering)
        found.append((first, stop, change, float(sums[first:stop].max())))
    return found


def _allowed(changes: list[tuple[int, int, np.ndarray, float]], limit: float,
             peak: float) -> np.ndarray:
    """Options that lift no segment above both the limit and the current ``peak``: the
    largest row sum never rises, and the rows at it only fall, so the repair ends."""
    ok = np.ones(changes[0][2].shape, dtype=bool)
    for _, _, change, top in changes:
        ok &= (change <= 0) | (top + change <= limit) | (top + change < peak)
    return ok


def _saving_at(changes: list[tuple[int, int, np.ndarray, float]], row: int) -> np.ndarray:
    for first, stop, change, _ in changes:
        if first <= row < stop:
            return -change
    return np.zeros(changes[0][2].shape)


def _scored_moves(problem: ChoiceProblem, neighbours: list, runs: list[list[Run]],
                  nodes: list[int], x: np.ndarray, sums: np.ndarray, peak: int, limit: float
                  ) -> list[tuple[float, int, int]]:
    """Every move of ``nodes`` that saves bytes at ``peak`` within the rules, as (added
    objective per byte saved, node, option): the best option of each node."""
    moves = []
    for node in nodes:
        changes = _changes(runs[node], int(x[node]), sums)
        saving = _saving_at(changes, peak)
        useful = (saving > 0) & _allowed(changes, limit, float(sums[peak]))
        if not useful.any():
            continue
        local = local_costs(problem.node_costs[node], neighbours[node], x)
        added = local - local[x[node]]
        useful &= np.isfinite(added)
        if not useful.any():
            continue
        score = np.where(useful, added / np.where(useful, saving, 1.0), np.inf)
        option = int(np.argmin(score))
        moves.append((float(score[option]), node, option))
    return moves


def _try_move(problem: ChoiceProblem, neighbours: list, mine: list[Run], node: int,
              option: int, x: np.ndarray, sums: np.ndarray, peak: int, limit: float) -> bool:
    """Move ``node`` to ``option`` if, against the plan as it now stands, it still saves
    bytes at ``peak``, lifts no row above the limit and costs something finite."""
    current = int(x[node])
    if option == current:
        return False
    changes = _changes(mine, current, sums)
    if not _saving_at(changes, peak)[option] > 0 or not _allowed(
            changes, limit, float(sums[peak]))[option]:
        return False
    if not np.isfinite(local_costs(problem.node_costs[node], neighbours[node], x)[option]):
        return False
    for first, stop, vec in mine:
        sums[first:stop] += vec[option] - vec[current]
    x[node] = option
    return True
