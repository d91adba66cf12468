"""Exact min-sum dynamic programming over a tree decomposition, plus Lagrangian memory.

Without a memory row the DP is exact: bucket elimination in a min-degree order is a DP over a
tree decomposition, linear in the number of nodes for chains, trees and the small-treewidth
graphs transformers make (residual streams give width 2). A memory row is moved into the
objective as ``cost + λ·memory``; for every λ ≥ 0, ``DP(λ) − λ·limit`` is a certified lower
bound (weak duality). λ is bisected between an over-budget and a fitting plan, the fitting plan
is repaired toward the cheaper one (component swaps and prefix cuts, both with exact deltas)
and polished by coordinate descent under the budget. With several liveness rows only λ = 0 is
used: the DP then proves optimality when the unconstrained optimum fits, and gives a bound.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

import numpy as np

from solver.compact import Indexed
from solver.descent import descend, local_costs, neighbours_of

MAX_TABLE = 2_000_000
BISECTION_STEPS = 14
GAP_STOP = 1e-7
REPAIR_SWEEPS = 2  # the repaired plan's polish: two sweeps of single-node moves


def min_degree_order(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Greedy min-degree elimination order (ties by index), with fill-in edges."""
    neighbours: list[set[int]] = [set() for _ in range(n)]
    for u, v in edges:
        neighbours[u].add(v)
        neighbours[v].add(u)
    heap = [(len(nb), i) for i, nb in enumerate(neighbours)]
    heapq.heapify(heap)
    done = [False] * n
    order = []
    while heap:
        degree, node = heapq.heappop(heap)
        if done[node] or degree != len(neighbours[node]):
            continue
        done[node] = True
        order.append(node)
        around = sorted(neighbours[node])
        for a in around:
            neighbours[a].discard(node)
            neighbours[a].update(b for b in around if b != a)
            heapq.heappush(heap, (len(neighbours[a]), a))
    return order


@dataclass(frozen=True, slots=True)
class _Step:
    """Eliminate ``node``: its axis goes last, the rest keep sorted order."""

    node: int
    factors: tuple[int, ...]
    perms: tuple[tuple[int, ...] | None, ...]
    shapes: tuple[tuple[int, ...], ...]
    rest: tuple[int, ...]
    rest_shape: tuple[int, ...]
    rows: np.ndarray


def _pairs(ix: Indexed) -> list[tuple[int, int]]:
    """Every node pair a cost couples: the edges', then the windows' edge terms' (once)."""
    pairs = [(u, v) for u, v, _ in ix.edges]
    seen = set(pairs)
    for window in ix.windows:
        for stream in window.streams:
            for u, v, _ in stream.edges:
                if (u, v) not in seen:
                    seen.add((u, v))
                    pairs.append((u, v))
    return pairs


class Eliminator:
    """The symbolic elimination plan, built once and re-run for every λ."""

    def __init__(self, ix: Indexed):
        self.ix = ix
        sizes = [c.size for c in ix.costs]
        self.pairs = _pairs(ix)
        self.scopes: list[tuple[int, ...]] = [(i,) for i in range(ix.n)]
        self.scopes += list(self.pairs)
        holders: list[set[int]] = [set() for _ in range(ix.n)]
        for f, scope in enumerate(self.scopes):
            for var in scope:
                holders[var].add(f)
        self.steps: list[_Step] = []
        self.largest = 0
        for node in min_degree_order(ix.n, self.pairs):
            factors = tuple(sorted(holders[node]))
            union = tuple(sorted({var for f in factors for var in self.scopes[f]}))
            self.largest = max(self.largest, int(np.prod([sizes[v] for v in union])))
            if self.largest > MAX_TABLE:
                return
            rest = tuple(v for v in union if v != node)
            target = (*rest, node)
            perms, shapes = [], []
            for f in factors:
                scope = self.scopes[f]
                perm = tuple(int(a) for a in np.argsort([target.index(v) for v in scope]))
                perms.append(None if perm == tuple(range(len(scope))) else perm)
                shapes.append(tuple(sizes[v] if v in scope else 1 for v in target))
            rest_shape = tuple(sizes[v] for v in rest)
            rows = np.arange(int(np.prod(rest_shape, dtype=np.int64)))
            self.steps.append(_Step(node, factors, tuple(perms), tuple(shapes), rest,
                                    rest_shape, rows))
            new = len(self.scopes)
            self.scopes.append(rest)
            for var in union:
                holders[var] -= set(factors)
                if var != node:
                    holders[var].add(new)

    @property
    def feasible(self) -> bool:
        return self.largest <= MAX_TABLE

    def edge_tables(self) -> list[np.ndarray]:
        """The edges' matrices per pair (parallel edges were summed by ``index_work``)."""
        sizes = [c.size for c in self.ix.costs]
        tables = [np.zeros((sizes[u], sizes[v])) for u, v in self.pairs]
        for e, (_, _, matrix) in enumerate(self.ix.edges):
            tables[e] = matrix
        return tables

    def solve(self, unary: list[np.ndarray], pairwise: list[np.ndarray] | None = None
              ) -> tuple[float, np.ndarray]:
        """Minimum of Σ unary + Σ pairwise and an assignment attaining it; ``pairwise`` is
        one matrix per entry of ``pairs`` (default: the edges', zero on window-only pairs)."""
        if pairwise is None:
            pairwise = self.edge_tables()
        tables: dict[int, np.ndarray] = dict(enumerate(unary))
        for e, matrix in enumerate(pairwise):
            tables[self.ix.n + e] = matrix
        constant = 0.0
        back = []
        first_new = self.ix.n + len(self.pairs)
        for s, step in enumerate(self.steps):
            total = None
            for f, perm, shape in zip(step.factors, step.perms, step.shapes, strict=True):
                table = tables.pop(f)
                term = (table if perm is None else table.transpose(perm)).reshape(shape)
                total = term if total is None else total + term
            flat = total.reshape(step.rows.size, -1)
            arg = flat.argmin(axis=1)
            reduced = flat[step.rows, arg]
            back.append(arg.reshape(step.rest_shape))
            if step.rest:
                tables[first_new + s] = reduced.reshape(step.rest_shape)
            else:
                constant += float(reduced[0])
        x = np.zeros(self.ix.n, dtype=np.int64)
        for step, arg in zip(reversed(self.steps), reversed(back), strict=True):
            x[step.node] = arg[tuple(x[v] for v in step.rest)]
        return constant, x


@dataclass(frozen=True, slots=True)
class DPResult:
    x: np.ndarray | None
    objective: float
    bound: float


def _memory_vectors(ix: Indexed) -> list[np.ndarray]:
    memory = [np.zeros(c.size) for c in ix.costs]
    for i, vec in ix.rows[0]:
        memory[i] = memory[i] + vec
    return memory


def lagrange_dp(ix: Indexed, deadline: float | None = None) -> DPResult | None:
    """Plan and certified bound; ``None`` when the treewidth makes the DP too big."""
    elim = Eliminator(ix)
    if not elim.feasible:
        return None
    if ix.windows:
        return _windowed(ix, elim, deadline)
    value, x0 = elim.solve(list(ix.costs))
    if ix.fits(x0):
        return DPResult(x0, ix.evaluate(x0), value)
    if len(ix.rows) != 1:
        return DPResult(None, np.inf, value)
    return _bisect(ix, elim, value, x0, deadline)


WINDOW_STEPS = 12


def _windowed(ix: Indexed, elim: Eliminator, deadline: float | None) -> DPResult:
    """Windows by Lagrangian relaxation: for any weights λ on a window's streams that sum to
    one, ``Σ λ_s·stream_s ≤ max_s stream_s``, so the DP of the weighted sums is a lower
    bound of the problem (memory rows are left to the caller's MIP: the bound holds, the
    plans that do not fit are not returned). The weights move toward each window's busiest
    stream at the last plan (a subgradient step of the dual), and every plan is scored
    exactly."""
    lam = [np.full(len(window.streams), 1.0 / len(window.streams)) for window in ix.windows]
    best, best_value, bound = None, np.inf, -np.inf
    for step in range(WINDOW_STEPS):
        unary, pairwise, constant = _weighted(ix, elim, lam)
        value, x = elim.solve(unary, pairwise)
        bound = max(bound, value + constant)
        if ix.fits(x) and ix.evaluate(x) < best_value:
            best, best_value = x, ix.evaluate(x)
        if best_value - bound <= GAP_STOP * abs(best_value) or _late(deadline):
            break
        rate = 1.0 / (step + 2)
        for w, window in enumerate(ix.windows):
            busiest = np.zeros(len(window.streams))
            busiest[int(np.argmax([stream.value(x) for stream in window.streams]))] = 1.0
            lam[w] = (1 - rate) * lam[w] + rate * busiest
    return DPResult(best, float(best_value), float(min(bound, best_value)))


def _weighted(ix: Indexed, elim: Eliminator, lam: list[np.ndarray]
              ) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """Costs plus each window's streams weighted by ``weight · λ``: unary, pairwise (one per
    ``elim.pairs``) and a constant."""
    unary = [c.copy() for c in ix.costs]
    pairwise = [m.copy() for m in elim.edge_tables()]
    index = {pair: e for e, pair in enumerate(elim.pairs)}
    constant = 0.0
    for window, weights in zip(ix.windows, lam, strict=True):
        for stream, share in zip(window.streams, weights, strict=True):
            scale = window.weight * float(share)
            if scale == 0.0:
                continue
            constant += scale * stream.constant
            for node, vec in stream.nodes:
                unary[node] += scale * vec
            for u, v, matrix in stream.edges:
                pairwise[index[(u, v)]] += scale * matrix
    return unary, pairwise, constant


def _bisect(ix: Indexed, elim: Eliminator, value0: float, x0: np.ndarray,
            deadline: float | None) -> DPResult:
    memory, limit = _memory_vectors(ix), float(ix.limit)
    mem_of = lambda x: float(sum(m[x[i]] for i, m in enumerate(memory)))  # noqa: E731

    def at(lam: float) -> tuple[float, np.ndarray]:
        val, x = elim.solve([c + lam * m for c, m in zip(ix.costs, memory, strict=True)])
        return val - lam * limit, x

    bound = value0
    lam_lo, x_lo = 0.0, x0
    lam_hi = max(abs(value0), 1e-12) / max(mem_of(x0), 1e-12)
    for _ in range(200):
        lb, x_hi = at(lam_hi)
        bound = max(bound, lb)
        if mem_of(x_hi) <= limit:
            break
        lam_lo, x_lo, lam_hi = lam_hi, x_hi, lam_hi * 4
    best, best_cost = x_hi, ix.evaluate(x_hi)
    for _ in range(BISECTION_STEPS):
        if best_cost - bound <= GAP_STOP * abs(best_cost) or _late(deadline):
            break
        lam = 0.5 * (lam_lo + lam_hi)
        lb, x = at(lam)
        bound = max(bound, lb)
        if mem_of(x) <= limit:
            lam_hi, x_hi = lam, x
            if ix.evaluate(x) < best_cost:
                best, best_cost = x, ix.evaluate(x)
        else:
            lam_lo, x_lo = lam, x
    best = repair(ix, memory, best, x_lo)
    return DPResult(best, ix.evaluate(best), min(bound, ix.evaluate(best)))


def _late(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() > deadline


def repair(ix: Indexed, memory: list[np.ndarray], fit: np.ndarray, cheap: np.ndarray
           ) -> np.ndarray:
    """Move a fitting plan toward a cheaper over-budget one, then polish it."""
    nbrs = neighbours_of(ix.n, ix.edges)
    candidates = [_prefix_cut(ix, nbrs, memory, fit, cheap),
                  _component_swaps(ix, nbrs, memory, fit, cheap)]
    best = min(candidates, key=ix.evaluate)
    return descend(ix, best, sweeps=REPAIR_SWEEPS)


def _prefix_cut(ix, nbrs, memory, fit, cheap) -> np.ndarray:
    x, limit = fit.copy(), float(ix.limit)
    mem = float(sum(m[x[i]] for i, m in enumerate(memory)))
    cost, best_cost, best_t = 0.0, 0.0, -1
    differ = np.flatnonzero(fit != cheap)
    for t, i in enumerate(differ):
        vals = local_costs(ix.costs[i], nbrs[i], x)
        cost += vals[cheap[i]] - vals[x[i]]
        mem += memory[i][cheap[i]] - memory[i][x[i]]
        x[i] = cheap[i]
        if mem <= limit and cost < best_cost:
            best_cost, best_t = cost, t
    out = fit.copy()
    out[differ[: best_t + 1]] = cheap[differ[: best_t + 1]]
    return out


def _swap_delta(ix, nbrs, fit, cheap, nodes: list[int]) -> float:
    """Exact cost change of moving ``nodes`` (a component of differing nodes) to ``cheap``."""
    inside = set(nodes)
    delta = 0.0
    for i in nodes:
        delta += ix.costs[i][cheap[i]] - ix.costs[i][fit[i]]
        for j, matrix in nbrs[i]:
            if j not in inside:
                delta += matrix[cheap[i], fit[j]] - matrix[fit[i], fit[j]]
            elif j > i:
                delta += matrix[cheap[i], cheap[j]] - matrix[fit[i], fit[j]]
    return float(delta)


def _component_swaps(ix, nbrs, memory, fit, cheap) -> np.ndarray:
    differ = fit != cheap
    parent = list(range(ix.n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for u, v, _ in ix.edges:
        if differ[u] and differ[v]:
            parent[find(u)] = find(v)
    comps: dict[int, list[int]] = {}
    for i in np.flatnonzero(differ):
        comps.setdefault(find(int(i)), []).append(int(i))
    moves = []
    for nodes in comps.values():
        d_cost = _swap_delta(ix, nbrs, fit, cheap, nodes)
        d_mem = float(sum(memory[i][cheap[i]] - memory[i][fit[i]] for i in nodes))
        if d_cost < 0:
            moves.append((d_cost / max(d_mem, 1e-300) if d_mem > 0 else -np.inf, nodes, d_mem))
    moves.sort(key=lambda m: (m[0], m[1][0]))
    x = fit.copy()
    mem = float(sum(m[x[i]] for i, m in enumerate(memory)))
    for _, nodes, d_mem in moves:
        if mem + d_mem <= ix.limit:
            x[nodes] = cheap[nodes]
            mem += d_mem
    return x
