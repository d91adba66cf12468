"""The aggregated local-polytope MIP as flat arrays, shared by the CP-SAT and HiGHS backends.

One boolean per (node, option) with Σ x = 1. For each edge, identical rows and identical
columns of the cost matrix are grouped (``np.unique``) and one edge variable is made per
(row group, column group) pair of finite cost; the marginal equalities
``Σ_c e[r, c] = Σ_{p∈r} x_u[p]`` and ``Σ_r e[r, c] = Σ_{q∈c} x_v[q]`` tie them to the nodes.
With integral x they force exactly the chosen pair to 1, so the model is exact, and its LP
relaxation is the tight local polytope (docs/solver-backends.md: 2.2× fewer edge variables than the
full product, 2× faster). A constant aggregated matrix needs no variable at all.

A window (``solver.problem.Window``) gets one time variable ``t ∈ [0, 1]`` standing for
``T = L + (U − L)·t``, where ``L`` and ``U`` bound its longest stream over every plan, so
every variable keeps the [0, 1] box that ``lp_answer.dual_bound`` relies on; each stream that
can bind is a row ``(U − L)·t ≥ stream − L`` and the objective pays ``weight·T``. A window's
edge terms get their own marginal variables (costing nothing in the objective), one set per
node pair.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from solver.backends.flow_arcs import FlowArcs, flow_arcs
from solver.compact import Indexed
from solver.problem import Stream, Window

# A process may build LPs over the same edge matrices again and again: each shared-reshard
# round does (llama3-70b dp=8,tp=8 with --share-reshards: 1,031 networks asked for over 5 LPs,
# 389 distinct; the repeats took 2.0 CPU s of its 32 s). A memory price's probes do not
# (llama3.1-405b dp=8,fsdp=8,tp=8: 878 networks, all distinct, 23.9 MiB of matrices: each
# probe's reductions leave other options). Networks are kept across builds, least recently
# used first out, while their matrices' bytes (the keys) stay under this
NETWORK_CACHE_BYTES = 32 * 2**20


class _Networks:
    """``flow_arcs`` of a matrix, remembered by its bytes across LP builds (a pure function
    of them: the LP is the same, bit for bit, as one built with every network new)."""

    def __init__(self) -> None:
        self.found: OrderedDict[tuple, FlowArcs | None] = OrderedDict()
        self.bytes = 0

    def __call__(self, agg: np.ndarray) -> FlowArcs | None:
        key = (agg.shape, agg.tobytes())
        if key in self.found:
            self.found.move_to_end(key)
            return self.found[key]
        arcs = flow_arcs(agg)
        self.found[key] = arcs
        self.bytes += len(key[1])
        while self.bytes > NETWORK_CACHE_BYTES and len(self.found) > 1:
            (_, old), _ = self.found.popitem(last=False)
            self.bytes -= len(old)
        return arcs


_networks = _Networks()


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Formulation:
    """``min obj·v`` s.t. ``row_lo ≤ A v ≤ row_hi``; the first ``num_x`` variables are x."""

    obj: np.ndarray
    constant: float
    num_x: int
    offsets: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    coefs: np.ndarray
    row_lo: np.ndarray
    row_hi: np.ndarray
    memory_rows: tuple[int, ...]
    edge_maps: tuple[tuple[int, int, np.ndarray, np.ndarray, np.ndarray], ...]
    flow_maps: tuple[FlowMap, ...] = ()
    window_maps: tuple[WindowMap, ...] = ()

    @property
    def num_vars(self) -> int:
        return self.obj.size

    def hint(self, x: np.ndarray) -> np.ndarray:
        """Full variable vector for an assignment (each edge's chosen pair set to 1, each flow
        network's unit routed along a cheapest path, which costs exactly the pair's price)."""
        values = np.zeros(self.num_vars)
        values[self.offsets[:-1] + x] = 1.0
        for u, v, inv_r, inv_c, lookup in self.edge_maps:
            var = lookup[inv_r[x[u]], inv_c[x[v]]]
            if var >= 0:
                values[var] = 1.0
        for flow in self.flow_maps:
            row, column = flow.inv_r[x[flow.u]], flow.inv_c[x[flow.v]]
            route = flow.variables[cheapest_route(flow.arcs, int(row), flow.rows + int(column))]
            values[route[route >= 0]] = 1.0
        for window in self.window_maps:
            longest = max(stream.value(x) for stream in window.window.streams)
            # a hair above, so rounding never makes the hint infeasible (HiGHS rejects the
            # whole model with an internal error when a hinted row is short by 1e-16)
            longest += 1e-9 * max(abs(longest), 1.0)
            values[window.var] = min(max((longest - window.lower) / window.span, 0.0), 1.0)
        return values


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class FlowMap:
    """Where a flow-network edge's arcs sit among the variables (``Formulation.hint``)."""

    u: int
    v: int
    inv_r: np.ndarray
    inv_c: np.ndarray
    rows: int
    variables: np.ndarray  # per arc, its variable (-1: substituted, see ``flow_edge``)
    arcs: FlowArcs


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class WindowMap:
    """Where a window's time variable sits: ``T = lower + span·values[var]``; ``rows`` are
    its stream rows (the CP-SAT backend rescales them)."""

    var: int
    lower: float
    span: float
    window: Window
    rows: tuple[int, ...]


def cheapest_route(arcs: FlowArcs, source: int, target: int) -> np.ndarray:
    """Arc indices of a cheapest path (Bellman–Ford: direct arcs may be negative in a general
    problem; the network has no negative cycle, its detour arcs being positive)."""
    nodes = int(max(arcs.tails.max(), arcs.heads.max())) + 1
    dist = np.full(nodes, np.inf)
    dist[source] = 0.0
    via = np.full(nodes, -1)
    for _ in range(nodes):
        offer = dist[arcs.tails] + arcs.costs
        best = np.full(nodes, np.inf)
        np.minimum.at(best, arcs.heads, offer)
        better = best < dist
        if not better.any():
            break
        # the first arc (lowest index) reaching each improved node at its new distance
        hit = np.flatnonzero(better[arcs.heads] & (offer == best[arcs.heads]))
        heads, first = np.unique(arcs.heads[hit], return_index=True)
        via[heads] = hit[first]
        dist[heads] = best[heads]
    route = []
    node = target
    while node != source:
        arc = int(via[node])
        if arc < 0:
            raise AssertionError(f"flow network has no route {source} -> {target}")
        route.append(arc)
        node = int(arcs.tails[arc])
    return np.array(route[::-1], dtype=np.int64)


class _Builder:
    def __init__(self, ix: Indexed):
        self.sizes = np.array([c.size for c in ix.costs])
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)])
        self.obj = [np.concatenate(ix.costs)]
        self.num = int(self.offsets[-1])
        self.x_extra = np.zeros(self.num)  # arc costs substituted onto x (``flow_edge``)
        self.rows: list[np.ndarray] = []
        self.cols: list[np.ndarray] = []
        self.coefs: list[np.ndarray] = []
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.next_row = 0
        self.constant = 0.0
        self.edge_maps: list = []
        self.flow_maps: list[FlowMap] = []
        self.window_maps: list[WindowMap] = []
        self.groups: dict = {}

    def add_rows(self, rows, cols, coefs, lo, hi) -> None:
        self.rows.append(np.asarray(rows, dtype=np.int64) + self.next_row)
        self.cols.append(np.asarray(cols, dtype=np.int64))
        self.coefs.append(np.asarray(coefs, dtype=np.float64))
        self.lo.append(np.asarray(lo, dtype=np.float64))
        self.hi.append(np.asarray(hi, dtype=np.float64))
        self.next_row += len(lo)

    def one_hot(self) -> None:
        n = self.sizes.size
        self.add_rows(np.repeat(np.arange(n), self.sizes), np.arange(self.num),
                      np.ones(self.num), np.ones(n), np.ones(n))

    def edge(self, u: int, v: int, matrix: np.ndarray, flow: bool) -> None:
        agg, inv_r, inv_c = self.grouped(matrix)
        finite = np.isfinite(agg)
        if finite.all() and np.all(agg == agg.flat[0]):
            self.constant += float(agg.flat[0])
            return
        arcs = self.arcs_for(agg) if flow else None
        if arcs is not None:
            self.flow_edge(u, v, agg.shape, inv_r, inv_c, arcs)
            return
        r_idx, c_idx = np.nonzero(finite)
        ids = self.num + np.arange(r_idx.size)
        self.num += r_idx.size
        self.obj.append(agg[r_idx, c_idx])
        lookup = np.full(agg.shape, -1, dtype=np.int64)
        lookup[r_idx, c_idx] = ids
        self.edge_maps.append((u, v, inv_r, inv_c, lookup))
        nr, nc = agg.shape
        # row-group equalities: Σ_c e[r,c] − Σ_{p∈r} x_u[p] = 0, then the column groups
        self.add_rows(np.concatenate([r_idx, inv_r]),
                      np.concatenate([ids, self.offsets[u] + np.arange(inv_r.size)]),
                      np.concatenate([np.ones(ids.size), -np.ones(inv_r.size)]),
                      np.zeros(nr), np.zeros(nr))
        self.add_rows(np.concatenate([c_idx, inv_c]),
                      np.concatenate([ids, self.offsets[v] + np.arange(inv_c.size)]),
                      np.concatenate([np.ones(ids.size), -np.ones(inv_c.size)]),
                      np.zeros(nc), np.zeros(nc))

    def grouped(self, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(distinct entries, row group of each row, column group of each column)``, cached
        by matrix bytes like the networks: the end blocks of a periodic LP repeat the same
        matrices (Mixtral dp=2,ep=4,tp=8: 405 edges, 284 distinct matrices; 0.12 s of CPU), and
        ``np.unique`` over whole rows and columns costs a sort of each."""
        key = (matrix.shape, matrix.tobytes())
        found = self.groups.get(key)
        if found is None:
            rows_u, inv_r = np.unique(matrix, axis=0, return_inverse=True)
            agg, inv_c = np.unique(rows_u, axis=1, return_inverse=True)
            found = (agg, inv_r.ravel(), inv_c.ravel())
            for array in found:
                array.setflags(write=False)  # shared by every edge with these bytes
            self.groups[key] = found
        return found

    def arcs_for(self, agg: np.ndarray) -> FlowArcs | None:
        """Networks are cached by matrix bytes (``_Networks``): a model's layers repeat the
        same few, and so do the LPs one process builds."""
        return _networks(agg)

    def flow_edge(self, u: int, v: int, shape: tuple[int, int], inv_r: np.ndarray,
                  inv_c: np.ndarray, arcs: FlowArcs) -> None:
        """Balance rows: out − in = Σ x_u over the row group; in − out = Σ x_v per column.

        A network node with a single arc (2,766 of 10,472 in gpt2's periodic LP on measured
        prices) makes that arc carry exactly its own supply or demand, ``S_n`` (a row node's
        one arc leaves it, a column node's one arc enters it: every pair has a route). The
        arc's variable and the node's row go: ``S_n`` stands for the flow in the other end's
        row and the arc's cost moves onto the x of ``n``'s group. The same LP, with fewer rows
        (when both ends have one arc, the head's row stays: ``S_tail = S_head``)."""
        nr, nc = shape
        total = nr + nc
        sign = np.where(np.arange(total) < nr, 1.0, -1.0)  # rows send, columns receive
        degree = np.bincount(arcs.tails, minlength=total) + np.bincount(arcs.heads,
                                                                         minlength=total)
        tail_single = degree[arcs.tails] == 1
        gone = tail_single | (degree[arcs.heads] == 1)
        dropped = np.where(tail_single, arcs.tails, arcs.heads)[gone]
        other = np.where(tail_single, arcs.heads, arcs.tails)[gone]
        other_coef = np.where(tail_single[gone], -sign[other], sign[other])
        kept = np.flatnonzero(~gone)
        variables = np.full(arcs.size, -1, dtype=np.int64)
        variables[kept] = self.num + np.arange(kept.size)
        self.flow_maps.append(FlowMap(u=u, v=v, inv_r=inv_r, inv_c=inv_c, rows=nr,
                                      variables=variables, arcs=arcs))
        self.num += kept.size
        self.obj.append(arcs.costs[kept])
        keep_row = np.ones(total, dtype=bool)
        keep_row[dropped] = False
        row_of = np.cumsum(keep_row) - 1
        arc_of = np.full(total, -1, dtype=np.int64)  # a dropped node's substituted arc
        arc_of[dropped] = np.arange(dropped.size)
        node = np.concatenate([inv_r, nr + inv_c])  # network node of each x column
        x_cols = np.concatenate([self.offsets[u] + np.arange(inv_r.size),
                                 self.offsets[v] + np.arange(inv_c.size)])
        np.add.at(self.x_extra, x_cols[~keep_row[node]],
                  arcs.costs[gone][arc_of[node[~keep_row[node]]]])
        own = keep_row[node]
        sub = arc_of[node[~own]]
        tails, heads, ids = arcs.tails[kept], arcs.heads[kept], variables[kept]
        self.add_rows(np.concatenate([row_of[tails], row_of[heads], row_of[node[own]],
                                      row_of[other[sub]]]),
                      np.concatenate([ids, ids, x_cols[own], x_cols[~own]]),
                      np.concatenate([sign[tails], -sign[heads], -np.ones(int(own.sum())),
                                      other_coef[sub]]),
                      np.zeros(int(keep_row.sum())), np.zeros(int(keep_row.sum())))

    def window_edges(self, ix: Indexed) -> dict[tuple[int, int], tuple]:
        """Marginal variables for the windows' edge terms, one set per node pair over the row
        and column groups of all its matrices: ``(inv_r, inv_c, ids, rep_r, rep_c)``."""
        matrices: dict[tuple[int, int], list[np.ndarray]] = {}
        for window in ix.windows:
            for stream in window.streams:
                for u, v, matrix in stream.edges:
                    matrices.setdefault((u, v), []).append(matrix)
        out = {}
        for (u, v), mats in sorted(matrices.items()):
            _, rep_r, inv_r = np.unique(np.hstack(mats), axis=0, return_index=True,
                                        return_inverse=True)
            _, rep_c, inv_c = np.unique(np.vstack(mats), axis=1, return_index=True,
                                        return_inverse=True)
            inv_r, inv_c = inv_r.ravel(), inv_c.ravel()
            nr, nc = rep_r.size, rep_c.size
            r_idx, c_idx = np.divmod(np.arange(nr * nc), nc)
            ids = self.num + np.arange(nr * nc)
            self.num += nr * nc
            self.obj.append(np.zeros(nr * nc))
            self.edge_maps.append((u, v, inv_r, inv_c, ids.reshape(nr, nc)))
            self.add_rows(np.concatenate([r_idx, inv_r]),
                          np.concatenate([ids, self.offsets[u] + np.arange(inv_r.size)]),
                          np.concatenate([np.ones(ids.size), -np.ones(inv_r.size)]),
                          np.zeros(nr), np.zeros(nr))
            self.add_rows(np.concatenate([c_idx, inv_c]),
                          np.concatenate([ids, self.offsets[v] + np.arange(inv_c.size)]),
                          np.concatenate([np.ones(ids.size), -np.ones(inv_c.size)]),
                          np.zeros(nc), np.zeros(nc))
            out[(u, v)] = (ids, rep_r, rep_c)
        return out

    def windows(self, ix: Indexed) -> None:
        """A time variable per window and a row per stream that can bind (module docstring)."""
        pairs = self.window_edges(ix)
        for window in ix.windows:
            lows = [_extreme(stream, np.min) for stream in window.streams]
            highs = [_extreme(stream, np.max) for stream in window.streams]
            lower, upper = max(lows), max(highs)
            self.constant += window.weight * lower
            if upper - lower <= 1e-12 * max(abs(upper), 1e-300):
                continue  # the longest stream is the same in every plan
            var, span, first = self.num, upper - lower, self.next_row
            self.num += 1
            self.obj.append(np.array([window.weight * span]))
            for stream, high in zip(window.streams, highs, strict=True):
                if high <= lower:
                    continue  # never longer than the window's floor
                cols, coefs = [np.array([var])], [np.array([span])]
                for node, vec in stream.nodes:
                    cols.append(self.offsets[node] + np.arange(vec.size))
                    coefs.append(-vec)
                for u, v, matrix in stream.edges:
                    ids, rep_r, rep_c = pairs[(u, v)]
                    cols.append(ids.ravel())
                    coefs.append(-matrix[np.ix_(rep_r, rep_c)].ravel())
                cols_all = np.concatenate(cols)
                self.add_rows(np.zeros(cols_all.size), cols_all, np.concatenate(coefs),
                              [stream.constant - lower], [np.inf])
            self.window_maps.append(WindowMap(var=var, lower=lower, span=span, window=window,
                                              rows=tuple(range(first, self.next_row))))

    def memory(self, ix: Indexed) -> tuple[int, ...]:
        first = self.next_row
        for row in ix.rows:
            if not row:
                continue
            cols = np.concatenate([self.offsets[i] + np.arange(vec.size) for i, vec in row])
            coefs = np.concatenate([vec for _, vec in row])
            self.add_rows(np.zeros(cols.size), cols, coefs, [-np.inf], [ix.limit])
        return tuple(range(first, self.next_row))


def build(ix: Indexed, *, flow: bool = False) -> Formulation:
    """The model; ``flow`` writes edges as sparse flow networks (``flow_arcs``) where that is
    smaller. Exact for the MIP too: with x integral each network carries one unit from the
    chosen row to the chosen column, and its cheapest route costs exactly the pair's price
    (a 3-axis polish MIP: 8.6 s against 89 s with the dense pairs, same optimum)."""
    builder = _Builder(ix)
    num_x = builder.num
    builder.one_hot()
    for u, v, matrix in ix.edges:
        builder.edge(u, v, matrix, flow)
    builder.windows(ix)
    builder.obj[0] = builder.obj[0] + builder.x_extra
    memory_rows = builder.memory(ix) if ix.limit is not None else ()
    cat = np.concatenate
    return Formulation(obj=cat(builder.obj), constant=builder.constant, num_x=num_x,
                       offsets=builder.offsets, rows=cat(builder.rows), cols=cat(builder.cols),
                       coefs=cat(builder.coefs), row_lo=cat(builder.lo), row_hi=cat(builder.hi),
                       memory_rows=memory_rows, edge_maps=tuple(builder.edge_maps),
                       flow_maps=tuple(builder.flow_maps),
                       window_maps=tuple(builder.window_maps))


def _extreme(stream: Stream, pick) -> float:
    """The stream's smallest (``np.min``) or largest (``np.max``) value over every plan,
    bounded term by term."""
    return float(stream.constant + sum(pick(vec) for _, vec in stream.nodes)
                 + sum(pick(matrix) for _, _, matrix in stream.edges))


def decode(form: Formulation, values: np.ndarray) -> np.ndarray:
    """Chosen option per node from x values (largest per node, ties to the lower index)."""
    return decode_weighted(form, values)[0]


def decode_weighted(form: Formulation, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``decode`` and, per node, the chosen option's x: 1 where the relaxation is integral,
    lower where it splits the node between options (where a rounded plan may pay)."""
    x = values[: form.num_x]
    choice = np.array([int(np.argmax(x[a:b])) for a, b in
                       zip(form.offsets[:-1], form.offsets[1:], strict=True)], dtype=np.int64)
    return choice, x[form.offsets[:-1] + choice]
