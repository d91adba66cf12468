"""The cheapest fitting plan with identical interior blocks, over the options some plans use.

The memory price (:mod:`solver.memory_price`) finds plans on the lower convex hull of
(memory, cost): a price only ever asks for a hull vertex. Where memory binds, the best plan
with identical interior layers is often *inside* the hull, a layer plan that takes one
probe's choice at some nodes and another's elsewhere, which no price finds and no
block-by-block mix of whole plans makes (:mod:`solver.block_mix`). The search that finds it,
the whole problem with its interior blocks tied, is a MIP over every layer and every memory
row (gpt2-shaped, 6 layers, at 90 % of its free optimum's peak: 120 s).

Here that search is made small in two ways, each exact for what it keeps:

* **The quotient by the ties.** A plan with identical interior blocks is fixed by the choices
  of the rest, the first block, one interior block and the last; every term of the whole
  problem is a function of those. Each node maps to its representative (an interior node to
  its position in the first interior block), and what lands on the same node or pair of nodes
  is summed: node costs add; an edge between positions r and r' of two interior blocks joins
  their representatives (at r = r' it is a node cost, its matrix's diagonal: both ends take
  the same choice); windows keep their streams, renamed; each memory row becomes one term per
  representative. For every plan ``x`` of the quotient, the whole problem's cost and every
  memory row of the plan ``x`` expands to are the quotient's.
* **The options the given plans use.** Each representative keeps only the options some given
  plan takes at one of the nodes it stands for (a handful, against hundreds).

The quotient, so restricted, is solved exactly (:func:`solver.graph_search.solve_graph`, its
memory rows as the terms above). Its optimum is the cheapest fitting tied plan over those
options: on the 6-layer gpt2-shaped chain 0.003932 s in 2.4 s, against the block mix's
0.004005 and the whole tied search's 0.003930 (120 s), the price search's bound 0.003910.
It is a restriction of the whole problem: the caller keeps the bound proven for the whole
problem beside it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from solver.clock import Clock
from solver.errors import Infeasible, NoSolutionError
from solver.graph_search import sizes_of, solve_graph
from solver.periodic import Chain
from solver.problem import ChoiceProblem, Stream, Term, Window

logger = logging.getLogger(__name__)


def representatives(num_nodes: int, chain: Chain) -> np.ndarray:
    """Per node of the whole problem, its representative's index in the quotient: the rest,
    the first block, the first interior block and the last block, in that order, each its
    own; every other interior node its position in the first interior block."""
    interior = chain.blocks[1:len(chain.blocks) - 1]
    own = [*chain.rest, *chain.blocks[0], *interior[0], *chain.blocks[-1]]
    rep = np.full(num_nodes, -1, dtype=np.int64)
    rep[np.asarray(own, dtype=np.int64)] = np.arange(len(own))
    first = len(chain.rest) + len(chain.blocks[0])
    for block in interior[1:]:
        rep[np.asarray(block, dtype=np.int64)] = first + np.arange(len(block))
    if (rep < 0).any():
        raise ValueError("the chain's rest and blocks must cover every node")
    return rep


class _Options:
    """Per representative the options kept (``kept[q]``, sorted: the options some plan
    takes at a node it stands for); a whole node's kept options are its representative's,
    as indices into its own vectors (the members of one representative have the same
    options)."""

    def __init__(self, rep: np.ndarray, plans: Sequence[Sequence[int]]):
        count = int(rep.max()) + 1
        sets: list[set[int]] = [set() for _ in range(count)]
        for plan in plans:
            for node, option in enumerate(plan):
                sets[rep[node]].add(int(option))
        self.kept = [np.array(sorted(s), dtype=np.int64) for s in sets]
        self.rep = rep

    def of(self, node: int) -> np.ndarray:
        return self.kept[self.rep[node]]


def quotient(problem: ChoiceProblem, chain: Chain, plans: Sequence[Sequence[int]]
             ) -> tuple[ChoiceProblem, np.ndarray, list[np.ndarray]]:
    """The quotient of ``problem`` by ties between the interior blocks of ``chain``, each
    representative restricted to the options ``plans`` use there (module docstring): the
    problem, each whole node's representative, and per representative its kept options
    (the quotient's option ``k`` is the whole problem's ``kept[q][k]``)."""
    if problem.groups:
        raise ValueError("a chain's problem has no groups")
    rep = representatives(problem.num_nodes, chain)
    options = _Options(rep, plans)
    kept = options.kept
    costs = [np.zeros(k.size) for k in kept]
    for node, cost in enumerate(problem.node_costs):
        costs[rep[node]] += cost[options.of(node)]
    edges: dict[tuple[int, int], np.ndarray] = {}
    for u, v, matrix in problem.edges:
        a, b = int(rep[u]), int(rep[v])
        if a == b:  # two interior blocks, one position: both ends take the same option
            costs[a] += matrix[kept[a], kept[a]]
            continue
        sub = matrix[np.ix_(kept[a], kept[b])]
        if a > b:
            a, b, sub = b, a, sub.T
        edges[(a, b)] = edges[(a, b)] + sub if (a, b) in edges else sub
    rows = _rows(problem, rep, kept)
    restricted = ChoiceProblem(
        node_costs=costs, edges=[(a, b, m) for (a, b), m in edges.items()], liveness=rows,
        memory_limit=problem.memory_limit if rows is not None else None,
        windows=_windows(problem.windows, options))
    return restricted, rep, kept


def _rows(problem: ChoiceProblem, rep: np.ndarray, kept: list[np.ndarray]
          ) -> list[tuple[Term, ...]] | None:
    """The quotient's memory rows, one term per representative, from the compiled rows of
    the whole problem (its terms are never listed one by one: 45 M on llama3.1-405b).

    With every representative at its first kept option (``base``), switching representative
    ``q`` to its option ``k`` adds ``delta_k[r, q]`` to row ``r`` (``switch_deltas``); a row
    is ``base_r`` (carried by representative 0's vector, taken whatever it chooses) plus one
    such entry per representative. Rows that cannot exceed the limit even at every
    representative's largest entry are dropped, identical rows kept once."""
    if problem.memory_limit is None or not problem.memory_rows():
        return None
    compiled = problem.compiled_rows()
    count, width = len(kept), max(k.size for k in kept)
    assignment = np.array([k[0] for k in kept])[rep]

    def deltas(k: int) -> np.ndarray:  # rows x representatives: each switched to option k
        column = np.array([q[min(k, q.size - 1)] for q in kept])
        return compiled.switch_deltas(rep, count, column[rep], assignment)[1]

    # two passes, so that only the rows that can bind are ever held for every option (a
    # rows x representatives array at a time: 12,630 x 330 on llama3.1-405b)
    base = compiled.sums(assignment)
    most = np.zeros((base.size, count))
    for k in range(1, width):
        np.maximum(most, deltas(k), out=most)
    binding = base + most.sum(axis=1) > problem.memory_limit
    if not binding.any():
        return None
    stacked = np.stack([np.zeros((int(binding.sum()), count))]
                       + [deltas(k)[binding] for k in range(1, width)], axis=2)
    table = np.concatenate((base[binding, None], stacked.reshape(int(binding.sum()), -1)),
                           axis=1)
    table = np.unique(table, axis=0)
    out = []
    for row in table:
        entries = row[1:].reshape(count, width)
        terms = []
        for q in range(count):
            vector = entries[q, :kept[q].size].copy()
            if q == 0:
                vector += row[0]
            if q == 0 or vector.any():
                terms.append((q, vector))
        out.append(tuple(terms))
    return out


def _windows(windows: tuple[Window, ...], options: _Options) -> tuple[Window, ...]:
    """Each window with its nodes renamed to their representatives and its vectors and
    matrices restricted to the kept options (a stream's edge whose ends meet becomes a node
    term, its diagonal); windows made identical merged, their weights added."""
    rep, kept = options.rep, options.kept
    merged: dict[tuple, Window] = {}
    for window in windows:
        streams = []
        for stream in window.streams:
            nodes = [(int(rep[n]), vector[options.of(n)]) for n, vector in stream.nodes]
            edges = []
            for u, v, matrix in stream.edges:
                a, b = int(rep[u]), int(rep[v])
                if a == b:
                    nodes.append((a, matrix[kept[a], kept[a]]))
                else:
                    edges.append((a, b, matrix[np.ix_(kept[a], kept[b])]))
            streams.append(Stream(nodes=tuple(nodes), edges=tuple(edges),
                                  constant=stream.constant))
        key = (window.group, tuple(
            (tuple((n, v.tobytes()) for n, v in s.nodes),
             tuple((a, b, m.tobytes()) for a, b, m in s.edges), s.constant) for s in streams))
        if key in merged:
            kept_window = merged[key]
            merged[key] = Window(streams=kept_window.streams, group=kept_window.group,
                                 weight=kept_window.weight + window.weight)
        else:
            merged[key] = Window(streams=tuple(streams), weight=window.weight,
                                 group=window.group)
    return tuple(merged.values())


def best_tied_plan(problem: ChoiceProblem, chain: Chain, plans: Sequence[Sequence[int]],
                   time_limit: float | None, gap: float
                   ) -> tuple[tuple[int, ...], float] | None:
    """The cheapest plan that fits whose interior blocks take identical choices and whose
    every node takes an option one of ``plans`` takes at a node of its position (module
    docstring), with its cost; ``None`` when none fits in time. Searched within ``gap``."""
    clock = Clock(time_limit)  # the quotient counts: its rows are the whole problem's
    small, rep, kept = quotient(problem, chain, plans)
    try:
        answer = solve_graph(small, clock, "auto", True, gap, None, sizes_of(small),
                             peak_search=False)
    except (Infeasible, NoSolutionError):
        return None
    choices = tuple(int(kept[q][answer.choices[q]]) for q in rep)
    cost = problem.evaluate(choices)
    peak = problem.peak_memory(choices)
    fits = peak is None or problem.memory_limit is None or peak <= problem.memory_limit
    logger.info("tied plan over %d options of %d representatives: plan %.10g, %s, %s",
                sum(k.size for k in kept), len(kept), cost, "fits" if fits else "overflows",
                answer.status.value)
    return (choices, cost) if fits and math.isfinite(cost) else None
