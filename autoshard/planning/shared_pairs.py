"""A tensor read by exactly two consumers: its shared reshards priced exactly, pairwise.

For a tensor of producer ``u`` read (exposed, same phase and runs) by exactly two consumer
edges ``e1 = (u, v1)`` and ``e2 = (u, v2)``, the true cost of a plan is ``r(a, L1) + r(a, L2)``
when the two read different layouts and ``r(a, L)`` once when both read ``L`` (``a`` the
producer's option, ``r`` the reshard with its runs per step): a term of three choices. It
becomes pairwise, exactly, with one auxiliary node ``c`` per such tensor whose options are
``(a, ℓ)``: ``ℓ`` the shared layout (a :class:`~.shared_reshards.Share` of the pair) that
``v1`` reads, or *other* when ``v1`` reads a layout ``v2`` cannot share. The node pays
``r(a, ℓ)``; edge ``(u, c)`` holds ``a`` equal; edge ``(c, v1)`` lets ``v1`` read exactly
``ℓ`` (or, for *other*, any unshared layout at its per-edge price); edge ``(c, v2)`` costs
``v2``'s per-edge price unless ``v2`` reads ``ℓ``, which is free (the reshard is made once).
For fixed op choices exactly one option of ``c`` is finite, and it costs the truth.

Its LP: ``c`` replaces ``u`` in the two consumer edges (the tree ``u – c – {v1, v2}`` adds
no cycle the per-edge problem lacks), and edge ``(c, v2)`` carries the joint of ``(a, ℓ,
b2)``, so a fractional plan pays for a shared layout at least the larger of its two readers'
weights on it, never the mean the ``1/k`` relaxed pricing charges. Measured: the periodic LP
of llama3-8b training on dp=8,tp=8 was integral in every round once the pairs it needed were
pair nodes; with a producer copy holding one 0/1 flag per layout in their place, its first
plan was 10.8 % above its bound (202.3 against 182.6 ms) and the MIP had to close the rest.
Why an auxiliary node at all, and why this one. Keeping the per-edge prices and subtracting
the saving, ``−[v1 and v2 both read ℓ]·r(a, ℓ)``, is a correction that depends on three
choices (``a``, ``b1``, ``b2``): it is a sum of pairwise terms only when ``r(a, ℓ)`` does not
depend on ``a``. Write ``g(a, ℓ1, ℓ2) = [ℓ1 = ℓ2 ≠ other]·r(a, ℓ1)`` (``ℓi`` the shared layout
reader ``i`` reads, or *other*) as ``A(a, ℓ1) + B(a, ℓ2) + C(ℓ1, ℓ2)`` and take differences
between two producer options ``a, a'`` (``ΔA(ℓ) = A(a, ℓ) − A(a', ℓ)``, likewise ``ΔB``,
``Δr``): every pair ``ℓ1 ≠ ℓ2`` has ``g = 0``, so ``ΔA(ℓ1) = −ΔB(ℓ2)``; with at least three
values (``K ≥ 2`` layouts and *other*) each ``ΔA(ℓ)`` equals ``−ΔB`` of two other values, so
all ``ΔB`` are one ``β`` and all ``ΔA`` are ``−β`` (with ``K = 1``, ``g(other, other) = 0``
gives ``ΔA(other) = −ΔB(other)`` and the same follows), and then ``Δr(ℓ) = ΔA(ℓ) + ΔB(ℓ) = 0``.
A reshard's price depends on the layout it starts from, so the term is genuinely three-way:
a pairwise problem needs an auxiliary node whose option fixes both ``r(a, ·)`` (the
producer's class) and ``ℓ``, which is this node. Its linearisation with the correction's
negative coefficient (``s ≤`` each reader's edge marginal of ``(a, ℓ)``, no lower-bound row
needed in a minimisation) would add no node, but it is a side row over two edges'
marginals: every solver road (tree DP, exact reductions, periodic aggregation, MIP,
CP-SAT, ``evaluate``) would need to carry it, where the pair node keeps the problem a plain
pairwise one that all of them already solve.

The node has at most ``K + 1`` options per producer class, ``K`` the shareable layouts (up to
24 on a 2-axis mesh); a class gets none for a layout it reaches free or never
(:func:`pair_options`: 541 of 600 (class, layout) pairs kept for llama3-8b's
``mlp.down`` gradient on dp=8,tp=8).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autoshard.planning.edge_costs import Edge
from autoshard.planning.layers import layer_of
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import Strategy

EdgeMatrix = tuple[int, int, np.ndarray]
Targets = Callable[[int, int], dict[TensorSharding, np.ndarray]]
Cache = dict[tuple, np.ndarray]


def pair_node(u: int, members: tuple[int, int], layouts: tuple[TensorSharding, ...],
              node: int, objective: Sequence[EdgeMatrix], edges: Sequence[Edge],
              targets: Targets, cache: Cache) -> tuple[np.ndarray, list[EdgeMatrix]]:
    """The auxiliary node ``node`` of producer ``u`` read by the two edges ``members``
    sharing ``layouts`` (module docstring): its option costs and its three edges. ``p`` is
    the producer's option up to equal prices: options whose rows agree in both consumer
    edges (the same output layout, for a reshard's price depends on nothing else) are one
    class, which keeps the node small. Class ``p``'s options are ``(p, ℓ)`` for the layouts
    :func:`pair_options` keeps for it, in ``layouts`` order, then ``(p, other)``.
    ``objective`` holds the per-edge prices (never relaxed: a pair's shares are always
    exact)."""
    e1, e2 = members
    (_, v1, _, (_, _, i1)), (_, v2, _, (_, _, i2)) = edges[e1], edges[e2]
    m1, m2 = objective[e1][2], objective[e2][2]
    t1, t2 = targets(v1, i1), targets(v2, i2)
    key = (id(m1), id(m2), layouts, id(t1), id(t2))
    classes, rows, kept = pair_options(m1, m2, layouts, t1, t2, cache)
    owner, which = np.nonzero(np.concatenate([kept, np.ones((rows.size, 1), bool)], axis=1))
    other = which == len(layouts)  # option o is (class owner[o], layout which[o]) or other
    width = owner.size

    def node_cost() -> np.ndarray:
        cost = np.zeros(width)
        for k, layout in enumerate(layouts):
            at = which == k
            cost[at] = m1[rows[owner[at]], t1[layout][0]]
        return cost

    def link() -> np.ndarray:
        return np.where(classes[:, None] == owner[None, :], 0.0, np.inf)

    def first_edge() -> np.ndarray:
        out = np.full((width, m1.shape[1]), np.inf)
        own = np.asarray(m1, dtype=np.float64)[rows[owner]]
        shared = np.zeros(m1.shape[1], dtype=bool)
        for k, layout in enumerate(layouts):
            columns = t1[layout]
            shared[columns] = True
            at = np.flatnonzero(which == k)
            out[np.ix_(at, columns)] = np.where(np.isfinite(own[np.ix_(at, columns)]), 0.0,
                                                np.inf)
        # other: v1 reads a layout the class has no option for, at its per-edge price
        for o in np.flatnonzero(other):
            free = ~shared.copy()
            for k in np.flatnonzero(~kept[owner[o]]):
                free[t1[layouts[k]]] = True
            out[o, free] = own[o, free]
        return out

    def second_edge() -> np.ndarray:
        out = np.asarray(m2, dtype=np.float64)[rows[owner]].copy()
        for k, layout in enumerate(layouts):
            at = np.flatnonzero(which == k)
            columns = t2[layout]
            part = out[np.ix_(at, columns)]
            out[np.ix_(at, columns)] = np.where(np.isfinite(part), 0.0, np.inf)
        return out

    cost = cached(cache, ("pair-cost", *key), node_cost)
    return cost, [(u, node, cached(cache, ("pair-link", *key), link)),
                  (node, v1, cached(cache, ("pair-1", *key), first_edge)),
                  (node, v2, cached(cache, ("pair-2", *key), second_edge))]


def pair_options(m1: np.ndarray, m2: np.ndarray, layouts: tuple[TensorSharding, ...],
                 t1: dict[TensorSharding, np.ndarray], t2: dict[TensorSharding, np.ndarray],
                 cache: Cache | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per producer option its class (:func:`row_classes`), per class a representative
    option (``rows``), and which shared layouts each class keeps an option for (``kept``,
    classes × layouts). A layout is dropped for a class, exactly, when the reshard to it
    is impossible from that class (the option could only cost inf) or free for both
    readers (sharing saves nothing: the *other* option lets the first reader read it at
    its per-edge price, 0, and the second reader pays 0 whatever the first reads)."""
    # the reader layouts' columns (t1, t2) are part of the key: the same matrices could in
    # principle be read through other strategy tuples
    key = ("pair-options", id(m1), id(m2), layouts, id(t1), id(t2))
    found = None if cache is None else cache.get(key)
    if found is not None:
        return found
    classes = row_classes(m1, m2)
    rows = np.array([int(np.flatnonzero(classes == p)[0]) for p in range(classes.max() + 1)])
    kept = np.zeros((rows.size, len(layouts)), dtype=bool)
    for k, layout in enumerate(layouts):
        first = np.asarray(m1, dtype=np.float64)[rows, t1[layout][0]]
        second = np.asarray(m2, dtype=np.float64)[rows, t2[layout][0]]
        kept[:, k] = np.isfinite(first) & ((first > 0) | (second > 0))
    for array in (classes, rows, kept):
        array.setflags(write=False)
    if cache is not None:
        cache[key] = (classes, rows, kept)
    return classes, rows, kept


def row_classes(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Per producer option, its class: options with equal rows in both matrices share one,
    numbered in order of first appearance (deterministic)."""
    rows = np.concatenate([np.asarray(first), np.asarray(second)], axis=1)
    _, index, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(np.argsort(index))  # class numbers by first appearance
    return order[inverse.reshape(-1)]


def pair_choice(u: int, members: tuple[int, int], layouts: tuple[TensorSharding, ...],
                choices: Sequence[int], strategies: Sequence[tuple[Strategy, ...]],
                edges: Sequence[Edge], objective: Sequence[EdgeMatrix],
                targets: Targets, cache: Cache | None = None) -> int:
    """The pair node's option for op ``choices``: the class of the producer ``u``'s option
    and the layout the first consumer reads (other when the class keeps no option for
    it). ``cache`` keeps the classes of identical layers' matrices between calls."""
    (_, v1, _, (_, _, i1)), (_, v2, _, (_, _, i2)) = edges[members[0]], edges[members[1]]
    classes, _, kept = pair_options(objective[members[0]][2], objective[members[1]][2],
                                    layouts, targets(v1, i1), targets(v2, i2), cache)
    p = int(classes[choices[u]])
    read = strategies[v1][choices[v1]].inputs[i1]
    start = int(kept[:p].sum()) + p  # each class before p: its kept layouts and other
    k = layouts.index(read) if read in layouts else -1
    if k >= 0 and kept[p, k]:
        return start + int(kept[p, :k].sum())
    return start + int(kept[p].sum())


def padded(costs: list[np.ndarray], edges: list[EdgeMatrix], names: Sequence[str],
            first_node: int, cache: Cache) -> tuple[list[np.ndarray], list[EdgeMatrix]]:
    """Every layer's node of one template (group ``names[n]`` is node ``first_node + n``)
    widened to the template's largest option count, the extra options impossible (inf): the
    first layer's pair node may have more producer classes than the others', and the layers'
    blocks must keep equal option counts position by position."""
    widest: dict[str, int] = {}
    keys = []
    for name, cost in zip(names, costs, strict=True):
        found = layer_of(name)
        keys.append(None if found is None else found[1])
        if found is not None:
            widest[found[1]] = max(widest.get(found[1], 0), cost.size)
    grow = {first_node + n: widest[key] for n, key in enumerate(keys)
            if key is not None and widest[key] > costs[n].size}
    if not grow:
        return costs, edges
    costs = [np.concatenate([c, np.full(grow[first_node + n] - c.size, np.inf)])
             if first_node + n in grow else c for n, c in enumerate(costs)]
    out = []
    for u, v, matrix in edges:
        if u in grow or v in grow:
            rows, columns = grow.get(u, matrix.shape[0]), grow.get(v, matrix.shape[1])
            matrix = cached(cache, ("pad", id(matrix), rows, columns),
                            lambda m=matrix, r=rows, c=columns: _pad(m, r, c))
        out.append((u, v, matrix))
    return costs, out


def _pad(matrix: np.ndarray, rows: int, columns: int) -> np.ndarray:
    out = np.full((rows, columns), np.inf)
    out[: matrix.shape[0], : matrix.shape[1]] = matrix
    return out


def consistency(options: int, flags: int) -> np.ndarray:
    """Edge (producer, copy): the copy's options ``a * flags + f`` agree with ``a``."""
    matrix = np.full((options, options * flags), np.inf)
    for a in range(options):
        matrix[a, a * flags:(a + 1) * flags] = 0.0
    return matrix


def cached(cache: Cache, key: tuple, make: Callable[[], np.ndarray]) -> np.ndarray:
    """``cache[key]``, made (read-only) on first use: identical layers share one array."""
    found = cache.get(key)
    if found is None:
        found = make()
        found.setflags(write=False)
        cache[key] = found
    return found
