"""One reshard per (tensor, target layout): consumers that read a tensor in the same layout
share one redistribution, priced once.

Frameworks reshard a value once per layout it is needed in and reuse the result: XLA's SPMD
partitioner caches reshards per (HLO, target sharding) (``PartitionedHlo::Reshard`` looks the
target up in ``ReshardCache::PerHloCache::reshard_cache``, openxla/xla
xla/service/spmd/spmd_partitioner.h and .cc), and a DTensor redistributed once is one tensor
that every later op may read. Pricing one reshard per consumer edge charges a
tensor read by two consumers in the same layout twice (a LayerNorm's input gradient,
reduce-scattered for its dx and again for its dweight).

The formulation stays pairwise, so every solver road (tree DP, periodic LP, MIP) applies and
proofs stay valid. A *share* is a tensor with at least two exposed consumer edges in one phase
with equal runs per step, and a target layout ``L`` that at least two of them can read (and
that costs something from some producer layout). Two pairwise pricings of a share bracket
the truth:

* **relaxed**: each consumer edge reading ``L`` pays ``1/k`` of the reshard (``k`` edges can
  read it). ``r`` readers pay ``r/k ≤ 1`` reshard: never more than the truth, and exact when
  none or all ``k`` read it (the common case: q, k and v all read the norm's output as one
  layout);
* **exact**, for a tensor read by exactly two consumer edges: one *pair node* per tensor
  (:mod:`.shared_pairs`), options (producer option up to equal prices, the shared layout
  the first reader reads or *other*), exact and pairwise, whose LP prices a fractional plan
  at no less than the union of its readers; for three or more readers: a copy of the
  producer whose options are (producer option, one flag per exact layout), 2^K of them
  (:func:`shared_objective`).

:class:`.SharedPricing` solves with every share relaxed, then makes exact the shares (and,
for a model's identical layers, the same share of every layer) whose readers the answer
undercharges (some but not all of their ``k`` edges), a two-reader tensor with all its
layouts at once, and solves again, until no share is undercharged. The last problem is a
relaxation of the true step (exact shares exact, the others priced at most their truth),
and its answer costs the same under the truth, so its bound is the truth's bound and the
answer is optimal when it was optimal there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autoshard.planning.edge_costs import Edge
from autoshard.planning.layers import layer_of
from autoshard.planning.shared_pairs import cached, consistency, padded, pair_choice, pair_node
from autoshard.planning.step import EdgeRole, Phase, Traffic, phase_of
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import Strategy
from graphs import Op

EdgeMatrix = tuple[int, int, np.ndarray]
Cache = dict[tuple, np.ndarray]


@dataclass(frozen=True, slots=True, kw_only=True)
class Share:
    """One target layout of one tensor: ``tensor`` (output ``output`` of op ``producer``) in
    ``layout``, readable by the consumer ``edges`` (indices into the edge list) run
    ``count`` times a step; ``name`` names its node (the producer's name, so that a layer's
    shares stay in its layer; :func:`template` groups a share with its copies in the other
    layers)."""

    tensor: str
    producer: int
    output: int
    layout: TensorSharding
    edges: tuple[int, ...]
    count: int
    name: str
    group: str  # the name of the producer's node copy that carries the group's exact shares
    members: tuple[int, ...] = ()  # every exposed consumer edge of the group (``edges`` ⊆)


class _Targets:
    """Per (consumer, input), the option indices reading each layout (cached per strategy
    tuple: identical ops share their tuples)."""

    def __init__(self, strategies: Sequence[tuple[Strategy, ...]]) -> None:
        self.strategies = strategies
        self.cache: dict[tuple[int, int], dict[TensorSharding, np.ndarray]] = {}

    def __call__(self, v: int, i: int) -> dict[TensorSharding, np.ndarray]:
        options = self.strategies[v]
        key = (id(options), i)
        found = self.cache.get(key)
        if found is None:
            lists: dict[TensorSharding, list[int]] = {}
            for b, strategy in enumerate(options):
                lists.setdefault(strategy.inputs[i], []).append(b)
            found = {layout: np.array(b) for layout, b in lists.items()}
            self.cache[key] = found
        return found


def find_shares(ops: Sequence[Op], strategies: Sequence[tuple[Strategy, ...]],
                edges: Sequence[Edge], roles: Sequence[EdgeRole],
                objective: Sequence[EdgeMatrix]) -> tuple[Share, ...]:
    """Every share (module docstring), in edge order (deterministic)."""
    groups: dict[tuple[int, int, int, Phase], list[int]] = {}
    for e, (edge, role) in enumerate(zip(edges, roles, strict=False)):
        if role.traffic is Traffic.EXPOSED and edge[3][2] >= 0:
            key = (edge[0], edge[3][1], role.count, phase_of(ops[edge[1]]))
            groups.setdefault(key, []).append(e)
    targets = _Targets(strategies)
    shares: list[Share] = []
    for (u, j, count, phase), members in groups.items():
        if len(members) < 2:
            continue
        readers: dict[TensorSharding, list[int]] = {}
        for e in members:
            _, v, _, (_, _, i) = edges[e]
            for layout in targets(v, i):
                readers.setdefault(layout, []).append(e)
        for layout, sharing in readers.items():
            if len(sharing) < 2:
                continue
            first = sharing[0]
            column = objective[first][2][:, targets(edges[first][1], edges[first][3][2])[layout][0]]
            if not np.any(column[np.isfinite(column)] > 0):
                continue  # free from every producer layout: nothing to share
            tag = layout.short().replace(".", "_").replace("/", "_")
            group = f"{ops[u].name}/share-{phase.value}-{j}-{count}"
            shares.append(Share(tensor=edges[first][3][0], producer=u, output=j, layout=layout,
                                edges=tuple(sharing), count=count, name=f"{group}-{tag}",
                                group=group, members=tuple(members)))
    return tuple(shares)


def template(share: Share) -> str:
    """The share's name with its layer index replaced (the same for every layer's copy)."""
    found = layer_of(share.name)
    return share.name if found is None else found[1]


def pair_groups(shares: Sequence[Share], exact: Sequence[int]) -> list[tuple[int, ...]]:
    """The ``exact`` shares of tensors read by exactly two consumer edges, one tuple per
    tensor, in order of first appearance: one pair node each (:mod:`.shared_pairs`). A
    pair is made exact whole, every shared layout at once (:class:`.SharedPricing`): a
    node over some of its layouts with the others relaxed has a loose LP (llama3-8b, 8
    layers, on dp=8,tp=8 ended 0.5 % from its bound after 4 rounds)."""
    groups: dict[str, list[int]] = {}
    chosen = set(exact)
    for index, share in enumerate(shares):
        if is_pair(share) and index in chosen:
            groups.setdefault(share.group, []).append(index)
    return [tuple(members) for members in groups.values()]


def is_pair(share: Share) -> bool:
    """Whether ``share``'s tensor has exactly two consumer edges (priced by a pair node)."""
    return len(share.members) == 2


def extra_groups(shares: Sequence[Share], exact: Sequence[int]) -> list[tuple[int, ...]]:
    """The groups that get a node after the ops', in node order: pairs, then exact ones."""
    return [*pair_groups(shares, exact), *exact_groups(shares, exact)]


def group_template(share: Share) -> str:
    """The share's group name with its layer index replaced."""
    found = layer_of(share.group)
    return share.group if found is None else found[1]


def exact_groups(shares: Sequence[Share], exact: Sequence[int]) -> list[tuple[int, ...]]:
    """The exact shares by group (one producer copy each), in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for index in exact:
        if not is_pair(shares[index]):
            groups.setdefault(shares[index].group, []).append(index)
    return [tuple(members) for members in groups.values()]


def shared_objective(objective: Sequence[EdgeMatrix], edges: Sequence[Edge],
                     strategies: Sequence[tuple[Strategy, ...]], shares: Sequence[Share],
                     exact: Sequence[int], first_node: int
                     ) -> tuple[list[np.ndarray], list[EdgeMatrix]]:
    """The objective edges with every share priced: a tensor read by two consumer edges gets
    a pair node (:mod:`.shared_pairs`; nodes ``first_node, first_node + 1, …``), exact;
    other relaxed shares scale their readers' columns by ``1/k``; each group of ``exact``
    shares (:func:`exact_groups`, the nodes after the pairs') gets a copy ``c`` of the
    producer whose options are
    (producer option ``a``, one flag per exact layout ``F``): edge (producer, ``c``) holds
    them equal, ``c`` costs the reshards its flags say are made, and the group's consumer
    edges hang off ``c`` (where a consumer reads an exact layout its flag must be set, at no
    further cost). The producer–copy–consumer structure has no cycle the per-edge problem
    lacks, so its LP is as tight. Returns the copies' node costs and the edges; matrices
    are cached by what they derive from, so identical layers keep sharing arrays."""
    targets = _Targets(strategies)
    pairs = pair_groups(shares, exact)
    groups = exact_groups(shares, exact)
    in_exact = {i for group in (*pairs, *groups) for i in group}
    cache: Cache = {}
    scaled: dict[int, list[tuple[np.ndarray, float]]] = {}
    for index, share in enumerate(shares):
        if index in in_exact:
            continue
        for e in share.edges:
            _, v, _, (_, _, i) = edges[e]
            scaled.setdefault(e, []).append((targets(v, i)[share.layout], 1.0 / len(share.edges)))
    edited = []
    for e, (u, v, matrix) in enumerate(objective):
        if e in scaled:
            parts = scaled[e]
            key = ("scale", id(matrix), *((c.tobytes(), f) for c, f in parts))
            matrix = cached(cache, key, lambda m=matrix, p=parts: _scale_columns(m, p))
        edited.append((u, v, matrix))
    costs: list[np.ndarray] = []
    moved: set[int] = set()
    extra: list[EdgeMatrix] = []
    for n, group in enumerate(pairs):
        first = shares[group[0]]
        cost, edges_of = pair_node(first.producer, first.members,
                                   tuple(shares[i].layout for i in group), first_node + n,
                                   edited, edges, targets, cache)
        costs.append(cost)
        extra.extend(edges_of)
        moved.update(first.members)
    for n, group in enumerate(groups):
        node = first_node + len(pairs) + n
        cost, edges_of = _copy(group, node, edited, edges, targets, shares, cache)
        costs.append(cost)
        extra.extend(edges_of)
        moved.update(e for i in group for e in shares[i].edges)
    kept = [edge for e, edge in enumerate(edited) if e not in moved]
    names = [shares[group[0]].group for group in (*pairs, *groups)]
    return padded(costs, kept + extra, names, first_node, cache)


def _copy(group: tuple[int, ...], node: int, edited: Sequence[EdgeMatrix],
          edges: Sequence[Edge], targets: _Targets, shares: Sequence[Share],
          cache: Cache) -> tuple[np.ndarray, list[EdgeMatrix]]:
    """One exact group's producer copy: its node cost and its edges."""
    first = shares[group[0]]
    u = first.producer
    flags = 1 << len(group)
    columns = []
    for i in group:
        e = shares[i].edges[0]
        columns.append(edited[e][2][:, targets(edges[e][1], edges[e][3][2])[shares[i].layout][0]])
    n_u = columns[0].size
    bits = (np.arange(flags)[:, None] >> np.arange(len(group))[None, :]) & 1  # F × K
    cost = np.zeros((n_u, flags))
    for k, column in enumerate(columns):
        with np.errstate(invalid="ignore"):
            cost += np.where(bits[None, :, k] == 1, column[:, None], 0.0)
    out: list[EdgeMatrix] = [(u, node, cached(cache, ("same", n_u, flags),
                                               lambda: consistency(n_u, flags)))]
    consumers = sorted({e for i in group for e in shares[i].edges})
    for e in consumers:
        _, v, _, (_, _, i) = edges[e]
        layouts = targets(v, i)
        need = [(k, layouts[shares[s].layout]) for k, s in enumerate(group)
                if shares[s].layout in layouts]
        matrix = edited[e][2]
        key = ("copy", id(matrix), flags, *((k, c.tobytes()) for k, c in need))
        out.append((node, v, cached(cache, key, lambda m=matrix, nd=need:
                                     _copy_matrix(m, flags, bits, nd))))
    return cost.reshape(-1), out


def _copy_matrix(matrix: np.ndarray, flags: int, bits: np.ndarray,
                 need: list[tuple[int, np.ndarray]]) -> np.ndarray:
    """Rows (a, F) of the copy: the consumer edge's row a, with each exact layout's columns
    free when its flag is set and impossible when not."""
    out = np.repeat(np.asarray(matrix, dtype=np.float64), flags, axis=0)
    for k, columns in need:
        on = np.tile(bits[:, k] == 1, matrix.shape[0])
        part = out[:, columns]
        out[:, columns] = np.where(on[:, None], np.where(np.isfinite(part), 0.0, np.inf),
                                   np.inf)
    return out


def _scale_columns(matrix: np.ndarray, parts: list[tuple[np.ndarray, float]]) -> np.ndarray:
    out = np.array(matrix, dtype=np.float64)
    for columns, factor in parts:
        part = out[:, columns]
        out[:, columns] = np.where(np.isfinite(part), part * factor, np.inf)
    return out


def readers(share: Share, choices: Sequence[int], strategies: Sequence[tuple[Strategy, ...]],
            edges: Sequence[Edge]) -> int:
    """How many of the share's consumer edges read its layout under ``choices``."""
    return sum(strategies[edges[e][1]][choices[edges[e][1]]].inputs[edges[e][3][2]]
               == share.layout for e in share.edges)


def reshard_price(share: Share, choices: Sequence[int],
                  strategies: Sequence[tuple[Strategy, ...]], edges: Sequence[Edge],
                  objective: Sequence[EdgeMatrix]) -> float:
    """The share's reshard (runs per step included) from the producer's chosen layout."""
    e = share.edges[0]
    column = _Targets(strategies)(edges[e][1], edges[e][3][2])[share.layout][0]
    return float(objective[e][2][choices[share.producer], column])


def undercharged(choices: Sequence[int], strategies: Sequence[tuple[Strategy, ...]],
                 edges: Sequence[Edge], objective: Sequence[EdgeMatrix],
                 shares: Sequence[Share], exact: Sequence[int]) -> list[int]:
    """The relaxed shares the relaxation prices below their truth under ``choices``: read by
    some but not all of their edges, at a cost (from the producer's chosen layout)."""
    done = set(exact)
    found = []
    for index, share in enumerate(shares):
        if index in done:
            continue
        count = readers(share, choices, strategies, edges)
        if 0 < count < len(share.edges) and \
                reshard_price(share, choices, strategies, edges, objective) > 0:
            found.append(index)
    return found


def completed(choices: Sequence[int], strategies: Sequence[tuple[Strategy, ...]],
              edges: Sequence[Edge], objective: Sequence[EdgeMatrix], shares: Sequence[Share],
              exact: Sequence[int], size: int) -> tuple[int, ...]:
    """Op choices (the first ``len(strategies)``) extended to a problem of ``size`` nodes:
    each pair node takes the producer's option and its first reader's layout, each exact
    group's copy takes the producer's option with the flags of the layouts its
    consumers read; padding takes 0."""
    ops = list(choices[: len(strategies)])
    extra = []
    targets = _Targets(strategies)
    cache: Cache = {}  # identical layers' pairs: their classes once
    for group in pair_groups(shares, exact):
        first = shares[group[0]]
        extra.append(pair_choice(first.producer, first.members,
                                 tuple(shares[i].layout for i in group), ops, strategies,
                                 edges, objective, targets, cache))
    for group in exact_groups(shares, exact):
        flags = sum(1 << k for k, i in enumerate(group)
                    if readers(shares[i], ops, strategies, edges) > 0)
        extra.append(ops[shares[group[0]].producer] * (1 << len(group)) + flags)
    return (*ops, *extra, *([0] * (size - len(ops) - len(extra))))


def shared_blocks(blocks: tuple[tuple[int, ...], ...] | None, names: Sequence[str],
                  shares: Sequence[Share], exact: Sequence[int], sizes: Sequence[int],
                  first_free: int) -> tuple[tuple[tuple[int, ...], ...] | None, list[int]]:
    """The layer blocks with each pair node and exact group's copy (node ``first_free -
    len(sizes) + n`` for group ``n`` of :func:`extra_groups`, of ``sizes[n]`` options) in
    its producer's layer, aligned by template, and the option counts of the padding nodes
    that took. A template some layer lacks (the last layer's residual output has one
    consumer, not two) gets a padding node in that layer: its copies' option count at no
    cost and no edge, numbered from ``first_free``, so every block keeps the same length
    (the solver compares the interior blocks, which agree)."""
    groups = extra_groups(shares, exact)
    if blocks is None or not groups:
        return blocks, []
    order = []
    for block in blocks:  # the layer index of each block, from its first op's name
        found = layer_of(names[block[0]])
        if found is None:
            return blocks, []
        order.append(found[0])
    first_node = first_free - len(sizes)
    by_template: dict[str, dict[int, int]] = {}
    size_of: dict[str, int] = {}
    for n, group in enumerate(groups):
        found = layer_of(shares[group[0]].group)
        if found is not None and found[0] in order:
            by_template.setdefault(found[1], {})[found[0]] = first_node + n
            size_of[found[1]] = sizes[n]
    pads: list[int] = []
    extended = []
    for k, block in zip(order, blocks, strict=True):
        extra = []
        for name in sorted(by_template):
            node = by_template[name].get(k)
            if node is None:
                node = first_free + len(pads)
                pads.append(size_of[name])
            extra.append(node)
        extended.append((*block, *extra))
    return tuple(extended), pads
