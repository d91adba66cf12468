"""A chain of identical blocks (a model's layers) solved at the size of a few blocks, exactly.

A training graph of L identical layers is L copies of one block, chained through the residual
stream (forward activation, backward gradient), plus a rest R (embedding, head, loss, shared
tables such as rotary ones) that may touch every block. Solving it whole costs time that grows
with L; here it costs about what four blocks cost, and the answer still carries a proven bound
of the *whole* problem.

The bound is a Lagrangian decomposition with periodic multipliers. Give every block k its own
copies of the nodes of block k-1 it has edges to (its "previous" copies), so each edge belongs
to exactly one block; ask the copies to agree with the originals through multipliers, and use
the *same* multipliers at every boundary. With identical interior blocks 1..L-2 the Lagrangian
dual is then, by LP duality and the symmetry between interior blocks, the LP

    min  c_R + c_0 + (L-2)·c_I + c_E    over the local polytopes of R, B0, I and E,
    s.t. Σ over boundaries that copy position r of (copy − original) = 0   for every r:
         (L-2)·pc_I[r] + pc_E[r] = x_0[r] + (L-2)·x_I[r]

(one representative I for the interior blocks, weighted L-2; E is the last block). Every
assignment of the whole problem maps onto a feasible point of this LP with the same cost, so its
optimum is a lower bound of the whole problem. The multipliers are only restricted, never
wrong: the bound is valid even where it is not tight.

(written here for one distinct block at each end; ``aggregate`` keeps ``head`` and ``tail``
blocks distinct, which moves the two relaxed junctions away from the model's ends, where plans
are not periodic: llama3-8b-shaped on dp=2,tp=4 closes with two, not with one). A position
copied on only one side of the tied run gets no row: its row would need one tied block's own
marginal, and dropping a row only weakens the relaxation.

One family of valid rows is added (no longer the Lagrangian dual, still a relaxation): E
copies position r from the *last* tied block, one of the L-2 counted in ``x_I``, so
``pc_E[r] ≤ (L-2)·x_I[r]`` option by option. The shared row alone lets the LP set
``pc_E = x_0`` and ``pc_I = x_I``, a cycle that prices a first layer unlike the interior with
no layer boundary paying for the change. With the rows, mixtral-8x7b's LP closes with one
distinct block at each end (ep=8,tp=8: 7.7 s instead of 28 s with two; dp=2,ep=4,tp=8:
proven optimal instead of a 5e-4 gap at 300 s).

When the LP optimum is integral, its assignment (distinct blocks from their own x, every tied
block from x_I) is a plan of the whole problem; it is re-scored on the original problem, and if
that cost meets the bound it is proven optimal. On the zoo's training graphs it does (gpt2 and
llama3-8b: LP bound = periodic plan to 1e-14). Otherwise the caller solves the problem
restricted to identical interior layers for a plan and keeps this bound.

Exact reductions run on the aggregated problem before the LP: a node outside the linking rows
has the same incident costs there as each of its copies in the whole problem, so a reduction
there is the same reduction applied to every interior block of the whole problem. Nodes in the
linking rows are frozen (their option indices are referred to by the rows).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solver.backends.formulation import Formulation, build
from solver.compact import Indexed, build_work, index_work
from solver.problem import ChoiceProblem, Stream, Window
from solver.reduce import reduce_work

logger = logging.getLogger(__name__)

MIN_BLOCKS = 4  # below this the whole problem is hardly larger than the aggregated one


@dataclass(frozen=True, slots=True, kw_only=True)
class Chain:
    """The verified chain: rest nodes, blocks, and the positions each block's edges copy
    from the block before it (``copies[k]``, empty for block 0)."""

    rest: tuple[int, ...]
    blocks: tuple[tuple[int, ...], ...]
    copies: tuple[frozenset[int], ...]


def _edge_sides(problem: ChoiceProblem, block_of: np.ndarray, position: np.ndarray):
    """Per edge: owner block (-1 for R) and each endpoint's role there, or None if the edge
    jumps over a block (then the problem is not a chain)."""
    out = []
    for u, v, matrix in problem.edges:
        owner = max(block_of[u], block_of[v])
        roles = []
        for node in (u, v):
            k = block_of[node]
            if k == -1:
                roles.append(("R", int(node)))
            elif k == owner:
                roles.append(("self", int(position[node])))
            elif k == owner - 1:
                roles.append(("prev", int(position[node])))
            else:
                return None
        out.append((int(owner), roles[0], roles[1], matrix))
    return out


def _role(node: int, owner: int, block_of: np.ndarray, position: np.ndarray
          ) -> tuple[str, int] | None:
    k = block_of[node]
    if k == -1:
        return ("R", int(node))
    if k == owner:
        return ("self", int(position[node]))
    if k == owner - 1:
        return ("prev", int(position[node]))
    return None


def _window_sides(problem: ChoiceProblem, block_of: np.ndarray, position: np.ndarray):
    """Per window: its owner block (the latest block it mentions, -1 for R) and the window
    with every node replaced by its role there, or None if a window spans more than two
    consecutive blocks."""
    out = []
    for window in problem.windows:
        mentioned = [n for stream in window.streams for n, _ in stream.nodes]
        mentioned += [n for stream in window.streams for u, v, _ in stream.edges for n in (u, v)]
        owner = int(max(block_of[n] for n in mentioned)) if mentioned else -1
        streams = []
        for stream in window.streams:
            nodes = [(_role(n, owner, block_of, position), vec) for n, vec in stream.nodes]
            edges = [(_role(u, owner, block_of, position), _role(v, owner, block_of, position),
                      m) for u, v, m in stream.edges]
            if any(r is None for r, _ in nodes) or any(a is None or b is None
                                                       for a, b, _ in edges):
                return None
            streams.append((tuple(nodes), tuple(edges), stream.constant))
        out.append((owner, tuple(streams), window.weight, window.group))
    return out


def _same_windows(first: list, other: list) -> bool:
    """Whether two blocks' windows are the same, in order, role by role and value by value."""
    if len(first) != len(other):
        return False
    for (streams_a, weight_a), (streams_b, weight_b) in zip(first, other, strict=True):
        if weight_a != weight_b or len(streams_a) != len(streams_b):
            return False
        for (nodes_a, edges_a, c_a), (nodes_b, edges_b, c_b) in zip(streams_a, streams_b,
                                                                    strict=True):
            if c_a != c_b or len(nodes_a) != len(nodes_b) or len(edges_a) != len(edges_b):
                return False
            if any(ra != rb or not np.array_equal(va, vb)
                   for (ra, va), (rb, vb) in zip(nodes_a, nodes_b, strict=True)):
                return False
            if any((a1, b1) != (a2, b2) or not np.array_equal(m1, m2)
                   for (a1, b1, m1), (a2, b2, m2) in zip(edges_a, edges_b, strict=True)):
                return False
    return True


def find_chain(problem: ChoiceProblem) -> Chain | None:
    """The chain the problem's ``blocks`` claim, if the claim holds exactly; else ``None``."""
    if problem.blocks is None or len(problem.blocks) < MIN_BLOCKS or problem.groups:
        return None
    blocks = problem.blocks
    n = problem.num_nodes
    block_of = np.full(n, -1)
    position = np.full(n, -1)
    for k, block in enumerate(blocks):
        block_of[list(block)] = k
        position[list(block)] = np.arange(len(block))
    sides = _edge_sides(problem, block_of, position)
    if sides is None:
        logger.info("periodic: an edge skips a block; solving the whole problem")
        return None
    window_sides = _window_sides(problem, block_of, position)
    if window_sides is None:
        logger.info("periodic: a window spans more than two blocks; solving the whole problem")
        return None
    owned: list[list] = [[] for _ in blocks]
    for owner, a, b, matrix in sides:
        if owner >= 0:
            owned[owner].append((a, b, matrix))
    windows: list[list] = [[] for _ in blocks]
    for owner, streams, weight, _group in window_sides:
        if owner >= 0:
            windows[owner].append((streams, weight))
    reference, key = 1, _EdgeKeys()
    for k in range(2, len(blocks) - 1):
        if not _same_block(problem, blocks[reference], blocks[k], owned[reference], owned[k],
                           key) \
                or not _same_windows(windows[reference], windows[k]):
            logger.info("periodic: block %d differs from block 1; solving the whole problem", k)
            return None
    copies = tuple(frozenset(
        [r for a, b, _ in edges for role, r in (a, b) if role == "prev"]
        + [r for streams, _ in block_windows for nodes, edge_terms, _ in streams
           for role, r in [*(n for n, _ in nodes), *(x for a, b, _ in edge_terms
                                                    for x in (a, b))] if role == "prev"])
        for edges, block_windows in zip(owned, windows, strict=True))
    rest = tuple(int(i) for i in np.flatnonzero(block_of == -1))
    return Chain(rest=rest, blocks=blocks, copies=copies)


def _same_block(problem: ChoiceProblem, first: tuple[int, ...], other: tuple[int, ...],
                first_edges: list, other_edges: list, key: Callable[[tuple], tuple]) -> bool:
    for a, b in zip(first, other, strict=True):
        ca, cb = problem.node_costs[a], problem.node_costs[b]
        if ca is not cb and not np.array_equal(ca, cb):
            return False
    if len(first_edges) != len(other_edges):
        return False
    for (a1, b1, m1), (a2, b2, m2) in zip(sorted(first_edges, key=key),
                                          sorted(other_edges, key=key), strict=True):
        if (a1, b1) != (a2, b2) or (m1 is not m2 and not np.array_equal(m1, m2)):
            return False
    return True


def _edge_key(edge: tuple) -> tuple:
    """Cheap order for pairing a block's edges with another's (a matrix's bytes would copy
    every matrix of every block: gigabytes on a 3-axis mesh). Parallel edges that tie on it
    but differ make the blocks look different, which only costs the speed-up, never a
    wrong answer."""
    a, b, matrix = edge
    finite = np.isfinite(matrix)
    return (a, b, matrix.shape, float(matrix[finite].sum()), int(finite.sum()))


class _EdgeKeys:
    """``_edge_key`` with each matrix's part computed once per ``find_chain``: identical
    layers share their matrix objects, and the reference block is compared with every other
    (Mixtral's 32 layers: 12,702 keys, of a few hundred distinct matrices). Keyed by ``id``,
    valid while the problem holds the matrices, i.e. for one call."""

    def __init__(self) -> None:
        self.parts: dict[int, tuple] = {}

    def __call__(self, edge: tuple) -> tuple:
        a, b, matrix = edge
        part = self.parts.get(id(matrix))
        if part is None:
            part = self.parts[id(matrix)] = _edge_key((0, 0, matrix))[2:]
        return (a, b, *part)


@dataclass(frozen=True, slots=True, kw_only=True)
class Aggregated:
    """The aggregated problem and how its nodes map back onto the whole problem's."""

    problem: ChoiceProblem
    frozen: frozenset[int]
    links: tuple[tuple[tuple[int, float], ...], ...]  # rows: (agg node, weight), Σ w·x = 0
    # rows ``x_copy ≤ weight·x_rep`` per option (``_last_tied_caps``): (copy, rep, weight)
    caps: tuple[tuple[int, int, float], ...] = ()
    rest: tuple[int, ...]  # agg node of each rest node, in chain.rest order
    block_nodes: tuple[tuple[int, ...], ...]  # per block of the chain, its agg nodes
    tied: tuple[int, ...]  # the blocks one representative stands for


class _Nodes:
    """The aggregated problem's nodes, each made on first use and found again by its key."""

    def __init__(self) -> None:
        self.costs: list[np.ndarray] = []
        self.index: dict[tuple, int] = {}

    def __call__(self, key: tuple, cost: np.ndarray) -> int:
        if key not in self.index:
            self.index[key] = len(self.costs)
            self.costs.append(cost)
        return self.index[key]


def _tag(k: int, tied: tuple[int, ...]) -> str:
    return "I" if k in tied else f"B{k}"


def aggregate(problem: ChoiceProblem, chain: Chain, head: int = 1, tail: int = 1
              ) -> Aggregated:
    """The LP's problem (module docstring) with ``head`` leading and ``tail`` trailing
    blocks kept distinct and the blocks between them (at least two) tied to one
    representative. Wider ends cost a larger LP but move the only relaxed boundaries (into
    and out of the tied run) away from the model's ends, where plans are not periodic."""
    blocks, count = chain.blocks, len(chain.blocks)
    tied = tuple(range(head, count - tail))
    if head < 1 or tail < 1 or len(tied) < 2:
        raise ValueError(f"need head, tail >= 1 and two tied blocks; got {head}, {tail} of "
                         f"{count} blocks")
    weight = float(len(tied))
    nodes = _Nodes()
    rest = tuple(nodes(("R", i), problem.node_costs[i]) for i in chain.rest)
    block_nodes = []
    for k, block in enumerate(blocks):
        scale = weight if k in tied else 1.0
        block_nodes.append(tuple(nodes((_tag(k, tied), r), scale * problem.node_costs[i])
                                 for r, i in enumerate(block)))
    edges = _aggregated_edges(problem, chain, nodes, tied)
    windows = _aggregated_windows(problem, chain, nodes, tied)
    links = _boundary_links(chain, nodes.index, tied)
    caps = _last_tied_caps(chain, nodes.index, tied)
    frozen = frozenset(a for terms in links for a, _ in terms)
    agg = ChoiceProblem(node_costs=nodes.costs, edges=edges, windows=windows)
    return Aggregated(problem=agg, frozen=frozen, links=tuple(links), rest=rest,
                      block_nodes=tuple(block_nodes), tied=tied, caps=caps)


def _aggregated_edges(problem: ChoiceProblem, chain: Chain, nodes: _Nodes,
                      tied: tuple[int, ...]) -> list[tuple[int, int, np.ndarray]]:
    """Every edge owned by a distinct block, the representative or no block, with its ends
    renamed; an edge from the previous block goes to the owner's zero-cost copy of that node
    (``pc``), which the boundary links tie to the original."""
    blocks, weight, rep = chain.blocks, float(len(tied)), tied[0]
    zeros = [np.zeros(problem.node_costs[i].size) for i in blocks[0]]
    block_of = {int(i): k for k, block in enumerate(blocks) for i in block}
    position = {int(i): r for block in blocks for r, i in enumerate(block)}
    edges = []
    for u, v, matrix in problem.edges:
        owner = max(block_of.get(u, -1), block_of.get(v, -1))
        if owner in tied and owner != rep:
            continue  # tied blocks are the representative's copies (checked by find_chain)
        ends = []
        for end in (u, v):
            k = block_of.get(end, -1)
            if k == -1:
                ends.append(nodes.index[("R", end)])
            elif k == owner:
                ends.append(nodes.index[(_tag(k, tied), position[end])])
            else:  # the previous block: the owner's copy of it
                r = position[end]
                ends.append(nodes(("pc" + _tag(owner, tied), r), zeros[r]))
        edges.append((ends[0], ends[1], weight * matrix if owner in tied else matrix))
    return edges


def _aggregated_windows(problem: ChoiceProblem, chain: Chain, nodes: _Nodes,
                        tied: tuple[int, ...]) -> tuple[Window, ...]:
    """Every window owned by a distinct block, the representative (weighted by the tied
    blocks it stands for) or no block, its nodes renamed as the edges' are."""
    blocks, weight, rep = chain.blocks, float(len(tied)), tied[0]
    block_of = np.full(problem.num_nodes, -1)
    position = np.full(problem.num_nodes, -1)
    for k, block in enumerate(blocks):
        block_of[list(block)] = k
        position[list(block)] = np.arange(len(block))
    sides = _window_sides(problem, block_of, position)
    if sides is None:
        raise AssertionError("find_chain accepted a window that spans more than two blocks")

    def rename(role: tuple[str, int], owner: int) -> int:
        kind, r = role
        if kind == "R":
            return nodes.index[("R", r)]
        if kind == "self":
            return nodes.index[(_tag(owner, tied), r)]
        i = blocks[owner - 1][r]
        return nodes(("pc" + _tag(owner, tied), r), np.zeros(problem.node_costs[i].size))

    out = []
    for owner, streams, window_weight, group in sides:
        if owner in tied and owner != rep:
            continue  # the representative's windows stand for it
        scale = weight if owner in tied else 1.0
        out.append(Window(weight=window_weight * scale, group=group, streams=tuple(
            Stream(nodes=tuple((rename(role, owner), vec) for role, vec in stream_nodes),
                   edges=tuple((rename(a, owner), rename(b, owner), m)
                               for a, b, m in stream_edges), constant=constant)
            for stream_nodes, stream_edges, constant in streams)))
    return tuple(out)


def _boundary_links(chain: Chain, index: dict[tuple, int], tied: tuple[int, ...]
                    ) -> list[tuple[tuple[int, float], ...]]:
    """The linear rows tying each copied node to its original across a block boundary."""
    count, weight, rep = len(chain.blocks), float(len(tied)), tied[0]
    links = []
    for k in range(1, count):  # boundaries between two distinct blocks: exact
        if k - 1 in tied or k in tied:
            continue
        links += [((index[("pc" + _tag(k, tied), r)], 1.0), (index[(_tag(k - 1, tied), r)], -1.0))
                  for r in sorted(chain.copies[k])]
    # the boundaries into the tied blocks and out of the last one share one multiplier:
    # Σ (copy - original) = weight·pc_I + pc_out - x_before - weight·x_I. A position copied on
    # only one side of the run would need one tied block's own x, which the representative
    # does not have: its rows are dropped (a weaker, still valid, relaxation)
    after = tied[-1] + 1
    for r in sorted(chain.copies[rep] & chain.copies[after]):
        links.append(((index[("pcI", r)], weight), (index[("pc" + _tag(after, tied), r)], 1.0),
                      (index[(_tag(rep - 1, tied), r)], -1.0), (index[("I", r)], -weight)))
    return links


def _last_tied_caps(chain: Chain, index: dict[tuple, int], tied: tuple[int, ...]
                    ) -> tuple[tuple[int, int, float], ...]:
    """Valid inequalities that stop the LP from closing the tied run into a cycle.

    The block after the tied run copies its position r from the *last* tied block, whose
    choice is one of the tied blocks' choices: in every plan's image, option o of that copy
    is at most the number of tied blocks taking o there, ``x_copy[o] ≤ weight·x_I[o]``.
    Without it the shared linking row lets the LP hand the block after the run the *first*
    distinct block's choice instead (``pc_after = x_before``, ``pc_I = x_I``), pricing a
    plan whose first layer differs from the interior as if no layer boundary paid for the
    change: mixtral-8x7b on dp=2,ep=4,tp=8 has an integral LP point 1e-4 below the plan
    its choices make. The rows are those positions the shared row links."""
    weight, rep, after = float(len(tied)), tied[0], tied[-1] + 1
    return tuple((index[("pc" + _tag(after, tied), r)], index[("I", r)], weight)
                 for r in sorted(chain.copies[rep] & chain.copies[after]))


@dataclass(frozen=True, slots=True, kw_only=True)
class PeriodicLP:
    """The reduced aggregated problem as an LP with its linking rows."""

    form: Formulation
    indexed: Indexed
    lift: object  # (x of the indexed problem) -> choices of the aggregated problem
    members: tuple[tuple[int, ...], ...] = ()  # per LP node, the aggregated nodes it stands for
    tables: tuple[np.ndarray, ...] = ()  # per LP node, option → its members' original options


def periodic_lp(agg: Aggregated) -> PeriodicLP:
    """Reduce the aggregated problem exactly, then write its LP plus the linking rows."""
    work = build_work(agg.problem, agg.frozen)
    reduce_work(work)
    ix = index_work(work)
    form = build(ix, flow=True)
    column: dict[tuple[int, int], int] = {}
    pos = {node: i for i, node in enumerate(ix.ids)}
    for node in agg.frozen:
        # frozen nodes keep their identity; their table maps current → original options
        for current, original in enumerate(work.table[node][:, 0]):
            column[(node, int(original))] = int(form.offsets[pos[node]] + current)
    rows, cols, coefs = [], [], []
    row = form.row_lo.size
    for terms in agg.links:
        size = agg.problem.node_costs[terms[0][0]].size
        for option in range(size):
            for node, w in terms:
                col = column.get((node, option))
                if col is not None:
                    rows.append(row)
                    cols.append(col)
                    coefs.append(w)
            row += 1
    extra = row - form.row_lo.size
    for copy, rep, weight in agg.caps:
        for option in range(agg.problem.node_costs[copy].size):
            col = column.get((copy, option))
            if col is None:
                continue  # the copy cannot take it: nothing to cap
            rows.append(row)
            cols.append(col)
            coefs.append(1.0)
            col = column.get((rep, option))
            if col is not None:
                rows.append(row)
                cols.append(col)
                coefs.append(-weight)
            row += 1
    capped = row - form.row_lo.size - extra
    cat = np.concatenate
    form = dataclasses.replace(
        form, rows=cat([form.rows, np.array(rows, dtype=np.int64)]),
        cols=cat([form.cols, np.array(cols, dtype=np.int64)]),
        coefs=cat([form.coefs, np.array(coefs, dtype=np.float64)]),
        row_lo=cat([form.row_lo, np.zeros(extra), np.full(capped, -np.inf)]),
        row_hi=cat([form.row_hi, np.zeros(extra + capped)]))

    def lift(x: np.ndarray) -> tuple[int, ...]:
        return work.lift({node: int(x[i]) for i, node in enumerate(ix.ids)},
                         agg.problem.num_nodes)

    return PeriodicLP(form=form, indexed=ix, lift=lift,
                      members=tuple(tuple(work.members[node]) for node in ix.ids),
                      tables=tuple(work.table[node] for node in ix.ids))


def expand(chain: Chain, agg: Aggregated, agg_choices: tuple[int, ...], num_nodes: int
           ) -> tuple[int, ...]:
    """A choice of the aggregated problem as a plan of the whole one (every tied block takes
    the representative's choice)."""
    out = [-1] * num_nodes
    for i, a in zip(chain.rest, agg.rest, strict=True):
        out[i] = agg_choices[a]
    for block, nodes in zip(chain.blocks, agg.block_nodes, strict=True):
        for i, a in zip(block, nodes, strict=True):
            out[i] = agg_choices[a]
    return tuple(out)


def interior_groups(chain: Chain, head: int = 1, tail: int = 1
                    ) -> tuple[tuple[int, ...], ...]:
    """Equal-choice groups tying the blocks between the ends, position by position."""
    interior = chain.blocks[head:len(chain.blocks) - tail]
    return tuple(tuple(block[r] for block in interior) for r in range(len(chain.blocks[0])))
