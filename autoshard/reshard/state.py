"""The compact layout state the reshard search walks over, and its moves.

A :class:`~autoshard.sharding.tensor_sharding.TensorSharding` is, for the purpose of moving data,
fully described by (the per-dim axis lists Shardy, XLA and JAX all use): for each tensor dim the
ordered mesh axes that shard it (major→minor), and the mesh axes that hold a pending reduction
(``Partial``) with their reduce op. Every other axis replicates. The search uses that as a plain
hashable tuple, with axes as mesh indices::

    State = (dims, partial)
    dims    = ((0,), (), (2, 1))          # dim 0 on axis 0; dim 2 on axis 2 then axis 1
    partial = ((1, "sum"),)               # axis 1 pending sum (in this example it is not,
                                          # an axis is in at most one of dims / partial)

A device's block of dim ``d`` is the tile whose index is the mixed-radix number of the
device's coordinates on ``dims[d]`` (first axis most significant); tiles are contiguous and of
equal size, so states are only valid when every dim divides evenly.

Moves (Shardy's collectives on axis lists, ``reshard_to_collectives.cc``; DTensor's steps one
axis at a time, ``_redistribute.py``):
``all_gather`` pops a suffix of a dim; ``all_slice`` appends unused axes; ``all_to_all`` moves a
suffix of one dim to the end of another; ``all_reduce`` drops Partial axes; ``reduce_scatter``
turns Partial axes into a suffix of a dim; ``replicated_to_partial`` marks an unused axis
Partial (free: DTensor's ``_partition_value``); ``collective_permute`` swaps two equal-sized
axes (or one for an unused one) without changing any block size.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

Dims = tuple[tuple[int, ...], ...]
PartialAxes = tuple[tuple[int, str], ...]
State = tuple[Dims, PartialAxes]

ALL_GATHER = "all_gather"
ALL_REDUCE = "all_reduce"
REDUCE_SCATTER = "reduce_scatter"
ALL_TO_ALL = "all_to_all"
ALL_SLICE = "all_slice"
REPLICATED_TO_PARTIAL = "replicated_to_partial"
COLLECTIVE_PERMUTE = "collective_permute"
LOCAL_KINDS = (ALL_SLICE, REPLICATED_TO_PARTIAL)


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    """One step of the search, before pricing.

    ``bytes_divisor`` is the number of shards that divide the tensor's total bytes to give the
    step's byte count under costmodel's conventions (all-gather: the gathered output per rank;
    reduce-scatter: the full input per rank; all-reduce, all-to-all, permute: the local buffer;
    local slice: the output).
    """

    kind: str
    axes: tuple[int, ...]
    src_dim: int | None
    dst_dim: int | None
    reduce_op: str | None
    bytes_divisor: int
    after: State


def shard_count(dims: Dims, sizes: tuple[int, ...]) -> int:
    return math.prod(sizes[a] for axes in dims for a in axes)


def used_axes(state: State) -> set[int]:
    dims, partial = state
    used = {a for axes in dims for a in axes}
    used.update(a for a, _ in partial)
    return used


def is_divisible(dims: Dims, sizes: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    return all(shape[d] % math.prod(sizes[a] for a in axes) == 0
               for d, axes in enumerate(dims))


def _replace_dim(dims: Dims, index: int, axes: tuple[int, ...]) -> Dims:
    return (*dims[:index], axes, *dims[index + 1:])


def _ordered_subsets(items: tuple[int, ...]) -> list[tuple[int, ...]]:
    return [perm for r in range(1, len(items) + 1)
            for perm in itertools.permutations(items, r)]


def _sorted_subsets(items: tuple[int, ...]) -> list[tuple[int, ...]]:
    return [combo for r in range(1, len(items) + 1)
            for combo in itertools.combinations(items, r)]


def moves_from(state: State, sizes: tuple[int, ...], shape: tuple[int, ...],
               allowed_partial: tuple[tuple[int, str], ...],
               multi_axis_slices: bool = True) -> list[Move]:
    """Every single move out of ``state`` that keeps all dims evenly divisible.

    ``allowed_partial`` lists the (axis, reduce op) pairs a ``replicated_to_partial`` may
    create; the search passes the target's Partial axes, since making an axis Partial never
    helps to reach a target that is not Partial on it. ``multi_axis_slices=False`` offers
    one-axis slices only (enough when slices are free: several free slices cost the same).
    """
    first, last = _moves_but_to_partial(state, sizes, shape, multi_axis_slices)
    before = shard_count(state[0], sizes)
    return [*first, *_to_partial_moves(state, allowed_partial, before), *last]


def clear_move_cache() -> None:
    """Forget the memoized moves (``reshard.find.clear_caches`` calls it)."""
    _moves_but_to_partial.cache_clear()


@functools.lru_cache(maxsize=1 << 16)
def _moves_but_to_partial(state: State, sizes: tuple[int, ...], shape: tuple[int, ...],
                          multi_axis_slices: bool) -> tuple[tuple[Move, ...], tuple[Move, ...]]:
    """The moves of ``moves_from`` before and after its ``replicated_to_partial`` moves, which
    alone depend on the target's Partial axes: the search grows one state graph per target
    Partial set (eight on a 3-axis mesh), and they share these (Moves are immutable).
    Mixtral 8x7B on dp=2,ep=4,tp=8 explores 10,811 states, 1,458 of them distinct (same
    shape, mesh and slice rule)."""
    dims, partial = state
    before = shard_count(dims, sizes)
    moves: list[Move] = []
    for d, axes in enumerate(dims):
        for cut in range(len(axes) - 1, -1, -1):
            new_dims = _replace_dim(dims, d, axes[:cut])
            moves.append(Move(kind=ALL_GATHER, axes=axes[cut:], src_dim=d, dst_dim=None,
                              reduce_op=None, bytes_divisor=shard_count(new_dims, sizes),
                              after=(new_dims, partial)))
    moves.extend(_slice_moves(state, sizes, shape, multi_axis_slices))
    moves.extend(_all_to_all_moves(state, sizes, shape, before))
    moves.extend(_partial_moves(state, sizes, shape, before))
    return tuple(moves), tuple(_permute_moves(state, sizes, before))


def _slice_moves(state: State, sizes: tuple[int, ...], shape: tuple[int, ...],
                 multi_axis: bool) -> list[Move]:
    dims, partial = state
    free = tuple(a for a in range(len(sizes)) if a not in used_axes(state))
    options = _ordered_subsets(free) if multi_axis else [(a,) for a in free]
    moves = []
    for d, axes in enumerate(dims):
        for added in options:
            new_dims = _replace_dim(dims, d, axes + added)
            if is_divisible(new_dims, sizes, shape):
                moves.append(Move(kind=ALL_SLICE, axes=added, src_dim=None, dst_dim=d,
                                  reduce_op=None, bytes_divisor=shard_count(new_dims, sizes),
                                  after=(new_dims, partial)))
    return moves


def _all_to_all_moves(state: State, sizes: tuple[int, ...], shape: tuple[int, ...],
                      before: int) -> list[Move]:
    dims, partial = state
    moves = []
    for s, axes in enumerate(dims):
        for cut in range(len(axes) - 1, -1, -1):
            moved = axes[cut:]
            for t in range(len(dims)):
                if t == s:
                    continue
                new_dims = _replace_dim(_replace_dim(dims, s, axes[:cut]), t, dims[t] + moved)
                if is_divisible(new_dims, sizes, shape):
                    moves.append(Move(kind=ALL_TO_ALL, axes=moved, src_dim=s, dst_dim=t,
                                      reduce_op=None, bytes_divisor=before,
                                      after=(new_dims, partial)))
    return moves


def _partial_moves(state: State, sizes: tuple[int, ...], shape: tuple[int, ...],
                   before: int) -> list[Move]:
    dims, partial = state
    moves = []
    ops = dict(partial)
    for combo in _sorted_subsets(tuple(a for a, _ in partial)):
        op_set = sorted({ops[a] for a in combo})
        if len(op_set) != 1:
            continue
        rest = tuple(p for p in partial if p[0] not in combo)
        moves.append(Move(kind=ALL_REDUCE, axes=combo, src_dim=None, dst_dim=None,
                          reduce_op=op_set[0], bytes_divisor=before, after=(dims, rest)))
    for ordered in _ordered_subsets(tuple(a for a, _ in partial)):
        op_set = sorted({ops[a] for a in ordered})
        if len(op_set) != 1:
            continue
        rest = tuple(p for p in partial if p[0] not in ordered)
        for d, axes in enumerate(dims):
            new_dims = _replace_dim(dims, d, axes + ordered)
            if is_divisible(new_dims, sizes, shape):
                moves.append(Move(kind=REDUCE_SCATTER, axes=ordered, src_dim=None, dst_dim=d,
                                  reduce_op=op_set[0], bytes_divisor=before,
                                  after=(new_dims, rest)))
    return moves


def _to_partial_moves(state: State, allowed_partial: tuple[tuple[int, str], ...],
                      before: int) -> list[Move]:
    dims, partial = state
    used = used_axes(state)
    moves = []
    for axis, op in allowed_partial:
        if axis in used:
            continue
        new_partial = tuple(sorted((*partial, (axis, op))))
        moves.append(Move(kind=REPLICATED_TO_PARTIAL, axes=(axis,), src_dim=None, dst_dim=None,
                          reduce_op=op, bytes_divisor=before, after=(dims, new_partial)))
    return moves


def _permute_moves(state: State, sizes: tuple[int, ...], before: int) -> list[Move]:
    """Swap two equal-sized axes (sharding ones, or one sharding and one unused)."""
    dims, partial = state
    where = {a: (d, i) for d, axes in enumerate(dims) for i, a in enumerate(axes)}
    partial_axes = {a for a, _ in partial}
    moves = []
    for a, b in itertools.combinations(range(len(sizes)), 2):
        if sizes[a] != sizes[b] or a in partial_axes or b in partial_axes:
            continue
        if a not in where and b not in where:
            continue
        new_dims = tuple(tuple(b if x == a else a if x == b else x for x in axes)
                         for axes in dims)
        moves.append(Move(kind=COLLECTIVE_PERMUTE, axes=(a, b), src_dim=None, dst_dim=None,
                          reduce_op=None, bytes_divisor=before, after=(new_dims, partial)))
    return moves


def enumerate_states(sizes: tuple[int, ...], shape: tuple[int, ...],
                     partial_ops: tuple[str, ...] = ("sum",)) -> list[State]:
    """Every evenly divisible layout of ``shape`` on a mesh of ``sizes``, in a stable order.

    Each axis replicates, is Partial with one of ``partial_ops`` (all Partial axes share one
    op), or shards a dim; axes sharding one dim come in every order.
    """
    ndim = len(shape)
    choices = ("R", *(f"P{k}" for k in range(len(partial_ops))), *range(ndim))
    states: list[State] = []
    for assignment in itertools.product(choices, repeat=len(sizes)):
        partial_kinds = {c for c in assignment if isinstance(c, str) and c != "R"}
        if len(partial_kinds) > 1:
            continue
        partial = tuple((a, partial_ops[int(c[1:])]) for a, c in enumerate(assignment)
                        if isinstance(c, str) and c != "R")
        per_dim = [tuple(a for a, c in enumerate(assignment) if c == d) for d in range(ndim)]
        for orders in itertools.product(*(itertools.permutations(axes) for axes in per_dim)):
            dims = tuple(tuple(order) for order in orders)
            if is_divisible(dims, sizes, shape):
                states.append((dims, partial))
    return states
