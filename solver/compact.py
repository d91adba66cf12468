"""The working form every reduction and backend shares, and the map back to the user's nodes.

``Work`` holds only finite options, merges equal-choice groups into one node, sums parallel
edges (either direction) into one matrix per node pair and keeps memory as rows of terms.
Each current option remembers which original options it stands for (``table``), so a choice in
the reduced problem lifts back to one option per original node. The one reduction whose choice
depends on two neighbours (series elimination of a degree-2 node, ``reduce.py``) is recorded as
an :class:`Eliminated` entry and replayed in reverse order after the surviving nodes are lifted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from solver.errors import NoFiniteOptionError
from solver.problem import ChoiceProblem, Stream, Window


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Eliminated:
    """A node removed by series elimination: its best option for each neighbour pair.

    ``ends`` holds, per neighbour, its members and its table when the node was removed, so a
    lifted choice of original options maps back to the neighbour's option index of that time.
    """

    members: tuple[int, ...]
    table: np.ndarray
    ends: tuple[tuple[tuple[int, ...], np.ndarray], tuple[tuple[int, ...], np.ndarray]]
    best: np.ndarray  # best[i, j]: the node's option when the ends take options i and j


def _option_at(members: tuple[int, ...], table: np.ndarray, out: list[int]) -> int:
    chosen = np.array([out[m] for m in members])
    hits = np.flatnonzero((table == chosen).all(axis=1))
    if hits.size == 0:
        raise AssertionError(f"lifted options {chosen.tolist()} of nodes {list(members)} are "
                             "not an option of the eliminated node's neighbour")
    return int(hits[0])


@dataclass(slots=True, kw_only=True)
class WorkStream:
    """A window's stream in the working form: node terms summed per node, edge terms summed
    per node pair (key ``(a, b)`` with ``a < b``, matrix indexed ``[a option, b option]``)."""

    nodes: dict[int, np.ndarray]
    edges: dict[tuple[int, int], np.ndarray]
    constant: float = 0.0


@dataclass(slots=True, kw_only=True)
class WorkWindow:
    streams: list[WorkStream]
    weight: float


@dataclass(slots=True, kw_only=True)
class Work:
    """Mutable reduced problem keyed by node id (ids are original representative indices)."""

    costs: dict[int, np.ndarray]
    adj: dict[int, dict[int, np.ndarray]]
    rows: list[dict[int, np.ndarray]]
    limit: float | None
    members: dict[int, tuple[int, ...]]
    table: dict[int, np.ndarray]
    eliminated: list[Eliminated] = field(default_factory=list)
    # nodes folded away with their one option left (``reduce.fold_singletons``): members and
    # the original options that option stands for
    settled: list[tuple[tuple[int, ...], np.ndarray]] = field(default_factory=list)
    # nodes that other constraints refer to (the periodic bound's linking rows): they may
    # lose impossible options (``table`` says which remain) but are never merged, eliminated
    # or pruned by dominance, whose proofs only see the costs written here
    frozen: frozenset[int] = frozenset()
    windows: list[WorkWindow] = field(default_factory=list)

    def nodes(self) -> list[int]:
        return sorted(self.costs)

    def restrict(self, node: int, keep: np.ndarray) -> None:
        """Keep only the options of ``node`` where ``keep`` is true."""
        if not keep.any():
            msg = (f"node {self.members[node][0]} has no usable option left: every option is "
                   f"impossible (inf cost, or inf on every pairing with a neighbour)")
            raise NoFiniteOptionError(msg, node=self.members[node][0])
        self.costs[node] = self.costs[node][keep]
        self.table[node] = self.table[node][keep]
        for other, matrix in self.adj[node].items():
            self.adj[node][other] = matrix[keep]
            self.adj[other][node] = self.adj[node][other].T
        for row in self.rows:
            if node in row:
                row[node] = row[node][keep]
        for stream in self.streams():
            if node in stream.nodes:
                stream.nodes[node] = stream.nodes[node][keep]
            for (a, b), matrix in stream.edges.items():
                if a == node:
                    stream.edges[(a, b)] = matrix[keep]
                elif b == node:
                    stream.edges[(a, b)] = matrix[:, keep]

    def streams(self) -> list[WorkStream]:
        return [stream for window in self.windows for stream in window.streams]

    def in_window(self, node: int) -> bool:
        """Whether a window term mentions ``node`` (structural reductions leave it alone,
        except those that move its window terms exactly: ``reduce.merge_leaf`` and
        ``reduce.fold_singletons``)."""
        return any(node in stream.nodes or any(node in pair for pair in stream.edges)
                   for stream in self.streams())

    def window_neighbours(self, node: int) -> set[int]:
        return {other for stream in self.streams() for pair in stream.edges if node in pair
                for other in pair if other != node}

    def remove(self, node: int) -> None:
        if self.in_window(node):
            raise AssertionError(f"node {node} still has window terms; move them first")
        for other in self.adj.pop(node):
            del self.adj[other][node]
        for row in self.rows:
            row.pop(node, None)
        del self.costs[node], self.members[node], self.table[node]

    def lift(self, choice: dict[int, int], num_nodes: int) -> tuple[int, ...]:
        out = [-1] * num_nodes
        for node, option in choice.items():
            for member, original in zip(self.members[node], self.table[node][option],
                                        strict=True):
                out[member] = int(original)
        for members, originals in self.settled:  # before the replay: they may be its ends
            for member, original in zip(members, originals, strict=True):
                out[member] = int(original)
        for step in reversed(self.eliminated):
            (a_members, a_table), (b_members, b_table) = step.ends
            option = step.best[_option_at(a_members, a_table, out),
                               _option_at(b_members, b_table, out)]
            for member, original in zip(step.members, step.table[option], strict=True):
                out[member] = int(original)
        if min(out) < 0:
            raise AssertionError("a reduced choice did not cover every original node")
        return tuple(out)

    def size(self) -> tuple[int, int, int]:
        edges = sum(len(a) for a in self.adj.values()) // 2
        return len(self.costs), int(sum(c.size for c in self.costs.values())), edges


def build_work(problem: ChoiceProblem, frozen: frozenset[int] = frozenset()) -> Work:
    """Contract groups, sum parallel edges and drop impossible options (``frozen``: see
    :attr:`Work.frozen`)."""
    owner = list(range(problem.num_nodes))
    for group in problem.groups or ():
        for node in group:
            owner[node] = group[0]
    members: dict[int, list[int]] = {}
    for node, rep in enumerate(owner):
        members.setdefault(rep, []).append(node)
    costs = {rep: np.sum([problem.node_costs[m] for m in ms], axis=0)
             for rep, ms in members.items()}
    adj: dict[int, dict[int, np.ndarray]] = {rep: {} for rep in members}
    for u, v, matrix in problem.edges:
        a, b = owner[u], owner[v]
        if a == b:
            costs[a] = costs[a] + np.diagonal(matrix)
            continue
        adj[a][b] = adj[a].get(b, 0.0) + matrix
        adj[b][a] = adj[a][b].T
    rows = []
    for row in problem.memory_rows():
        merged: dict[int, np.ndarray] = {}
        for node, vec in row:
            merged[owner[node]] = merged.get(owner[node], 0.0) + vec
        rows.append(merged)
    windows = [WorkWindow(streams=[_work_stream(stream, owner) for stream in window.streams],
                          weight=window.weight) for window in problem.windows]
    work = Work(costs=costs, adj=adj, rows=rows, limit=problem.memory_limit, windows=windows,
                members={rep: tuple(ms) for rep, ms in members.items()}, frozen=frozen,
                table={rep: np.tile(np.arange(costs[rep].size)[:, None], (1, len(ms)))
                       for rep, ms in members.items()})
    for rep in work.nodes():
        if not np.isfinite(costs[rep]).any():
            msg = (f"group of node {rep} (nodes {list(members[rep])}) has no option index "
                   f"that is finite for every member; allow a common option")
            raise NoFiniteOptionError(msg, node=rep)
        work.restrict(rep, np.isfinite(costs[rep]))
    drop_unpairable(work)
    return work


def _work_stream(stream: Stream, owner: list[int]) -> WorkStream:
    nodes: dict[int, np.ndarray] = {}
    edges: dict[tuple[int, int], np.ndarray] = {}
    for node, vec in stream.nodes:
        nodes[owner[node]] = nodes.get(owner[node], 0.0) + vec
    for u, v, matrix in stream.edges:
        a, b = owner[u], owner[v]
        if a == b:  # both ends in one group: they take the same option
            nodes[a] = nodes.get(a, 0.0) + np.diagonal(matrix)
            continue
        key, oriented = ((a, b), matrix) if a < b else ((b, a), matrix.T)
        edges[key] = edges.get(key, 0.0) + oriented
    return WorkStream(nodes=nodes, edges=edges, constant=stream.constant)


def drop_unpairable(work: Work) -> bool:
    """Drop options that are inf against every option of some neighbour, to a fixpoint."""
    changed, any_change = True, False
    while changed:
        changed = False
        for node in work.nodes():
            keep = np.ones(work.costs[node].size, dtype=bool)
            for matrix in work.adj[node].values():
                keep &= np.isfinite(matrix).any(axis=1)
            if not keep.all():
                work.restrict(node, keep)
                changed = any_change = True
    return any_change


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Indexed:
    """The reduced problem renumbered 0..n-1, as the backends consume it."""

    ids: tuple[int, ...]
    costs: tuple[np.ndarray, ...]
    edges: tuple[tuple[int, int, np.ndarray], ...]
    rows: tuple[tuple[tuple[int, np.ndarray], ...], ...]
    limit: float | None
    windows: tuple[Window, ...] = ()

    @property
    def n(self) -> int:
        return len(self.costs)

    def evaluate(self, x: np.ndarray) -> float:
        total = float(sum(c[x[i]] for i, c in enumerate(self.costs)))
        total += float(sum(m[x[u], x[v]] for u, v, m in self.edges))
        return total + sum(window.value(x) for window in self.windows)

    def row_sums(self, x: np.ndarray) -> list[float]:
        return [float(sum(vec[x[i]] for i, vec in row)) for row in self.rows]

    def fits(self, x: np.ndarray) -> bool:
        if self.limit is None:
            return True
        return all(s <= self.limit for s in self.row_sums(x))

    def min_row_sums(self) -> list[float]:
        return [float(sum(vec.min() for _, vec in row)) for row in self.rows]


def index_work(work: Work) -> Indexed:
    ids = tuple(work.nodes())
    pos = {node: i for i, node in enumerate(ids)}
    edges = tuple((pos[u], pos[v], work.adj[u][v]) for u in ids for v in sorted(work.adj[u])
                  if pos[u] < pos[v])
    rows = tuple(tuple((pos[n], row[n]) for n in sorted(row)) for row in work.rows)
    rows = rows if work.limit is not None else ()
    windows = tuple(Window(weight=window.weight, streams=tuple(
        Stream(nodes=tuple((pos[n], stream.nodes[n]) for n in sorted(stream.nodes)),
               edges=tuple((pos[a], pos[b], stream.edges[(a, b)]) for a, b in sorted(stream.edges)),
               constant=stream.constant)
        for stream in window.streams)) for window in work.windows)
    return Indexed(ids=ids, costs=tuple(work.costs[i] for i in ids), edges=edges, rows=rows,
                   limit=work.limit, windows=windows)
