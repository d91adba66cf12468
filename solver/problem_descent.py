"""The descent on a whole problem as given: for a chain whose search ran out of time.

Why: a memory-bound chain (a model's layers under a memory limit) that runs out of time before
its priced search found any plan returns the leanest plan (each node's least-memory option),
which ignores cost: llama3-70b training on dp=2,fsdp=4,tp=8 (seq 8192, 64 micro-batches) under
a 120 s limit came back 4.5x slower than its plan without the limit. :func:`solver.descent.
descend` would polish it, but it walks the reduced problem, and building that for 80 layers
takes seconds the deadline has already spent (8.4 s on that problem's 8,030 nodes). This walks
the problem's own arrays: its edges as given (parallel edges add up), and its memory rows as
runs of consecutive rows per term (:class:`~solver.span_rows.SpanRows`' spans, or one row per
term of rows given term by term), so a move's check is a maximum over each run of the rows'
current sums: the same moves as :func:`~solver.descent.descend`, iterated conditional modes,
without the model. On the problem above (unconstrained pass): 176.5 -> 51.0 s in 1.1 s.

Nodes in ``groups`` (options tied across nodes) and nodes whose runs overlap never move (a
single move could break the tie, and overlapping runs add up on their common rows); windows
are not pairwise, so a problem with windows is returned as given.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

import numpy as np

from solver.descent import local_costs, neighbours_of
from solver.problem import ChoiceProblem
from solver.span_rows import SpanRows

MAX_SWEEPS = 50

Run = tuple[int, int, np.ndarray]
"""``(first row, stop row, bytes per option)``: a term alive over rows first..stop-1."""


def descend_problem(problem: ChoiceProblem, choices: Sequence[int],
                    deadline: float | None = None) -> tuple[int, ...]:
    """``choices`` improved one node at a time until no single change helps or ``deadline``
    (a ``perf_counter`` time) passes between sweeps; never dearer, and within every memory
    row the limit holds (a plan that fits keeps fitting)."""
    x = np.array(choices, dtype=np.intp)
    n = problem.num_nodes
    if problem.windows or n == 0:
        return tuple(int(c) for c in x)
    neighbours = neighbours_of(n, problem.edges)
    runs = runs_of(problem)
    frozen = frozen_nodes(problem, runs)
    limit = np.inf if problem.memory_limit is None else float(problem.memory_limit)
    sums = row_sums_of(problem, x, runs)
    for _ in range(MAX_SWEEPS):
        moved = False
        for i in range(n):
            if i in frozen:
                continue
            local = local_costs(problem.node_costs[i], neighbours[i], x)
            for first, stop, vec in runs[i]:
                local[sums[first:stop].max() - vec[x[i]] + vec > limit] = np.inf
            best = int(np.argmin(local))
            if local[best] < local[x[i]] - 1e-12 * abs(local[x[i]]):
                for first, stop, vec in runs[i]:
                    sums[first:stop] += vec[best] - vec[x[i]]
                x[i] = best
                moved = True
        if not moved or (deadline is not None and time.perf_counter() >= deadline):
            break
    found = tuple(int(c) for c in x)
    peak = problem.peak_memory(found)  # the rows' own sums: the running ones may round
    if peak is not None and peak > limit:
        return tuple(int(c) for c in choices)
    return found


def runs_of(problem: ChoiceProblem) -> list[list[Run]]:
    """Per node, the runs of rows its terms live over."""
    runs: list[list[Run]] = [[] for _ in range(problem.num_nodes)]
    if problem.memory_limit is None:
        return runs
    if isinstance(problem.liveness, SpanRows):
        for span in problem.liveness.spans:
            runs[span.node].append((span.first, span.stop, np.asarray(span.vector, float)))
        return runs
    for r, row in enumerate(problem.memory_rows()):
        for node, vec in row:
            runs[node].append((r, r + 1, np.asarray(vec, float)))
    return runs


def tied_nodes(problem: ChoiceProblem) -> set[int]:
    """Nodes tied to others in a group (options chosen together): no single move for them."""
    return {node for group in problem.groups or () if len(group) > 1 for node in group}


def frozen_nodes(problem: ChoiceProblem, runs: list[list[Run]]) -> set[int]:
    """Nodes a single move must not change: tied in a group, or with overlapping runs."""
    frozen = tied_nodes(problem)
    for node, mine in enumerate(runs):
        ordered = sorted((first, stop) for first, stop, _ in mine)
        if any(b[0] < a[1] for a, b in itertools.pairwise(ordered)):
            frozen.add(node)
    return frozen


def row_sums_of(problem: ChoiceProblem, x: np.ndarray, runs: list[list[Run]]) -> np.ndarray:
    """Every memory row's sum at ``x``, from the runs (rows no run reaches hold 0)."""
    count = max((stop for mine in runs for _, stop, _ in mine), default=0)
    delta = np.zeros(count + 1)
    for node, mine in enumerate(runs):
        for first, stop, vec in mine:
            delta[first] += vec[x[node]]
            delta[stop] -= vec[x[node]]
    return np.cumsum(delta)[:count]
