"""Strategy enumeration: every way one op can run on the mesh, derived from its signature.

Written once per op for one mesh axis, expanded mechanically to N axes (DTensor's single-dim
strategies, Shardy's factor rules). On one axis an op can:

* replicate (``R``): the axis does nothing to this op;
* shard one non-blocked factor: every tensor holding it is ``Shard`` on that dim (or
  ``_StridedShard`` when the factor is a minor part of a merged dim whose major part is whole,
  the layout a view of a sharded tensor has); tensors without it are ``Replicate``; outputs of
  a sharded contraction are ``Partial`` with the factor's reduce op;
* pass Partial through (``P{i,j}``): for each input set the op is linear in, those inputs and
  the outputs are ``Partial(sum)``;
* apply a hand rule (:mod:`autoshard.strategies.hand_rules`) that shards a blocked factor anyway.

The N-D strategies are the product of per-axis choices. A factor sharded by several axes is
split by them in mesh order; a merged dim ``(a b)`` takes the axes of ``a`` then those of
``b``, which needs ``shard_order`` when that is not mesh order. Combinations are dropped when a
factor does not divide by its axes (unless ``allow_uneven``, which keeps single-factor dims
whose chunks are all non-empty), when a merged dim would hold several axes in a strided
layout, or when they repeat an earlier strategy. Results are cached per op structure and are
deterministic: options are ordered R, factors in signature order, Partial sets, hand rules.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.errors import UsageError
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import (
    Partial,
    Placement,
    Replicate,
    Shard,
    StridedShard,
    chunk_sizes,
)
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.hand_rules import HAND_FACTORS, HandFactor, ring_steps
from graphs import FactorKind, TensorSpec, get_op
from graphs.signature import DimSignature, Operand

REPLICATE = "R"


@dataclass(frozen=True, slots=True)
class IntraOpCollective:
    """A collective a strategy runs inside the op (hand rules), over ``axes``."""

    kind: str
    axes: tuple[str, ...]
    bytes: float
    reduce_op: str = "sum"
    overlap: float = 0.0  # fraction of the op's own compute it runs beside (ring steps)


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """Input and output shardings of one op on the mesh.

    ``per_axis`` names each axis's choice (``R``, a factor, ``P{0}``); ``label`` joins them
    for reports (``dp:d0 tp:f``, or ``R`` when nothing is sharded). ``work`` is how many times
    each device runs the op's kernel on blocks of its local shapes (a ring over n devices: n).
    """

    inputs: tuple[TensorSharding, ...]
    outputs: tuple[TensorSharding, ...]
    label: str
    per_axis: tuple[str, ...]
    intra_op: tuple[IntraOpCollective, ...] = ()
    work: int = 1


@dataclass(frozen=True, slots=True)
class _Option:
    """One axis's choice: a factor to shard, a Partial input set, or nothing."""

    name: str
    factor: str | None = None
    partial_inputs: frozenset[int] | None = None
    hand: HandFactor | None = None


def enumerate_strategies(kind: str, ins: Sequence[TensorSpec], outs: Sequence[TensorSpec],
                         attrs: Mapping[str, Any], mesh: Mesh, *, allow_uneven: bool = False,
                         include_strided: bool = False) -> tuple[Strategy, ...]:
    """Every valid strategy of an op of ``kind`` on ``mesh``, all-replicate first.

    ``include_strided`` keeps strategies whose operands are in a view's strided layout
    (``_StridedShard`` with a tensor-size split factor); the planner leaves them out because no
    collective moves data into or out of them directly.
    """
    return _cached(kind, tuple(ins), tuple(outs), _freeze(attrs), mesh, allow_uneven,
                   include_strided)


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(frozen: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in frozen}


@functools.lru_cache(maxsize=8192)
def _cached(kind: str, ins: tuple[TensorSpec, ...], outs: tuple[TensorSpec, ...],
            attrs: tuple[tuple[str, Any], ...], mesh: Mesh, allow_uneven: bool,
            include_strided: bool) -> tuple[Strategy, ...]:
    opdef = get_op(kind)
    sig = opdef.signature(ins, outs, _thaw(attrs))
    options = _axis_options(kind, sig, opdef.partial_inputs, len(ins))
    per_axis = [options if size > 1 else options[:1] for size in mesh.axis_sizes]
    seen: set[tuple[tuple[TensorSharding, ...], tuple[TensorSharding, ...]]] = set()
    out: list[Strategy] = []
    for choice in itertools.product(*per_axis):
        strategy = _build(sig, choice, mesh, ins, allow_uneven, include_strided)
        if strategy is None:
            continue
        key = (strategy.inputs, strategy.outputs)
        if key not in seen:
            seen.add(key)
            out.append(strategy)
    return tuple(out)


def _clear_caches() -> None:
    _cached.cache_clear()
    _sharding.cache_clear()


enumerate_strategies.cache_clear = _clear_caches  # type: ignore[attr-defined]


def _axis_options(kind: str, sig: DimSignature, partial_sets: Sequence[frozenset[int]],
                  num_inputs: int) -> tuple[_Option, ...]:
    options = [_Option(REPLICATE)]
    options.extend(_Option(f, factor=f) for f in sig.shardable)
    for s in partial_sets:
        if s and max(s) < num_inputs:
            options.append(_Option("P{" + ",".join(map(str, sorted(s))) + "}",
                                   partial_inputs=frozenset(s)))
    for factor, hand in HAND_FACTORS.get(kind, {}).items():
        if factor in sig.factors:
            options.append(_Option(f"{factor}*", factor=factor, hand=hand))
    return tuple(options)


def _build(sig: DimSignature, choice: tuple[_Option, ...], mesh: Mesh,
           ins: Sequence[TensorSpec], allow_uneven: bool, include_strided: bool
           ) -> Strategy | None:
    sizes = mesh.axis_sizes
    if len({opt.hand for opt in choice if opt.hand is not None}) > 1:
        return None  # one hand rule per strategy (its runner and collectives assume one)
    axes_of: dict[str, list[int]] = {}
    for axis, opt in enumerate(choice):
        if opt.factor is not None:
            axes_of.setdefault(opt.factor, []).append(axis)
        if opt.hand is not None:
            for also in opt.hand.also:
                axes_of.setdefault(also, []).append(axis)
    for factor, axes in axes_of.items():
        if any(choice[a].hand != choice[axes[0]].hand for a in axes):
            return None  # one factor, sharded both by a hand rule and generically
        shards, size = math.prod(sizes[a] for a in axes), sig.size(factor)
        if size % shards and not (allow_uneven and _unevenly_shardable(
                sig, factor, [sizes[a] for a in axes])):
            return None
    local = {f: -(-sig.size(f) // math.prod(sizes[a] for a in axes_of.get(f, ())))
             for f in sig.factors}
    inputs, outputs = [], []
    for index, operand in enumerate(sig.inputs):
        sharding = _operand(operand, choice, axes_of, local, mesh, sig, index, include_strided)
        if sharding is None:
            return None
        inputs.append(sharding)
    for operand in sig.outputs:
        sharding = _operand(operand, choice, axes_of, local, mesh, sig, None, include_strided)
        if sharding is None:
            return None
        outputs.append(sharding)
    names = tuple(opt.name for opt in choice)
    label = " ".join(f"{a}:{n}" for a, n in zip(mesh.axis_names, names, strict=True)
                     if n != REPLICATE) or REPLICATE
    intra_op, work = _intra_op(choice, mesh, ins, sig, local)
    return Strategy(inputs=tuple(inputs), outputs=tuple(outputs), label=label, per_axis=names,
                    intra_op=intra_op, work=work)


def _unevenly_shardable(sig: DimSignature, factor: str, axis_sizes: Sequence[int]) -> bool:
    """True when ``factor`` may be split by axes of ``axis_sizes`` (in order) into uneven
    (``torch.chunk``) pieces.

    Every piece must be non-empty (:func:`_pieces_non_empty`) and contiguous (:func:`_alone`),
    and a contracted factor must not reduce by "avg": the mean of unequal pieces' means is not
    the mean of the whole (a Partial(avg) output would be wrong), while sums and maxima of
    pieces stay exact."""
    if not _pieces_non_empty(sig.size(factor), axis_sizes) or not _alone(sig, factor):
        return False
    return sig.kind(factor) is not FactorKind.CONTRACTED or sig.reduction(factor) != "avg"


def _pieces_non_empty(size: int, axis_sizes: Sequence[int]) -> bool:
    """True when chunking ``size`` by each axis in turn leaves no device an empty piece.

    Why not ``size >= shards``: ``torch.chunk`` makes ceil-sized pieces, so 5 over 4 is
    2, 2, 1, 0, and axes chunk the current piece one after another (5 over 2 then 3: 3 → 1,
    1, 1 but 2 → 1, 1, 0)."""
    if not axis_sizes:
        return size > 0
    return all(_pieces_non_empty(piece, axis_sizes[1:])
               for piece in chunk_sizes(size, axis_sizes[0]))


def _alone(sig: DimSignature, factor: str) -> bool:
    """True when ``factor`` never shares a dim with another factor (uneven chunks stay
    contiguous only then)."""
    return all(len(dim) == 1 for operand in (*sig.inputs, *sig.outputs) for dim in operand
               if factor in dim)


def _operand(operand: Operand, choice: tuple[_Option, ...], axes_of: Mapping[str, list[int]],
             local: Mapping[str, int], mesh: Mesh, sig: DimSignature, input_index: int | None,
             include_strided: bool) -> TensorSharding | None:
    """The sharding of one operand (``input_index`` None for outputs)."""
    placements: list[Placement] = [Replicate() for _ in choice]
    present = {f for dim in operand for f in dim}
    for axis, opt in enumerate(choice):
        if opt.partial_inputs is not None:
            if input_index is None or input_index in opt.partial_inputs:
                placements[axis] = Partial("sum")
        elif opt.factor is not None and opt.factor not in present and input_index is None:
            if opt.hand is not None:
                if opt.hand.output == "partial":
                    placements[axis] = Partial("sum")
            elif sig.kind(opt.factor) is FactorKind.CONTRACTED:
                placements[axis] = Partial(sig.reduction(opt.factor))
            else:
                return None  # a parallel factor missing from this output: not derivable
    order: list[tuple[int, tuple[int, ...]]] = []
    for d, dim in enumerate(operand):
        sharded = [(j, f) for j, f in enumerate(dim) if axes_of.get(f)]
        if not sharded:
            continue
        axes = [a for _, f in sharded for a in axes_of[f]]
        if _contiguous(dim, axes_of, local):
            for a in axes:
                placements[a] = Shard(d)
            if axes != sorted(axes):
                order.append((d, tuple(axes)))
        elif include_strided and len(axes) == 1:
            split = math.prod(sig.size(f) for f in dim[:sharded[0][0]])
            placements[axes[0]] = StridedShard(d, split)
        else:
            return None
    return _sharding(mesh, tuple(placements), len(operand), tuple(order) or None)


@functools.lru_cache(maxsize=65536)
def _sharding(mesh: Mesh, placements: tuple[Placement, ...], ndim: int,
              order: tuple[tuple[int, tuple[int, ...]], ...] | None) -> TensorSharding:
    """One object per distinct operand sharding: the ops of a 3-axis model spell ~34 k
    operand shardings with a few thousand distinct ones, and an interned sharding is validated
    once and hashed once (its hash is cached) in every reshard and strategy cache after."""
    return TensorSharding(mesh, placements, ndim, order)


def _contiguous(dim: tuple[str, ...], axes_of: Mapping[str, list[int]],
                local: Mapping[str, int]) -> bool:
    """A merged dim's shard is one contiguous block iff every factor more major than a sharded
    factor is split down to local size 1."""
    last = max(j for j, f in enumerate(dim) if axes_of.get(f))
    return all(local[f] == 1 for f in dim[:last])


def _intra_op(choice: tuple[_Option, ...], mesh: Mesh, ins: Sequence[TensorSpec],
              sig: DimSignature, local: Mapping[str, int]
              ) -> tuple[tuple[IntraOpCollective, ...], int]:
    """The hand rule's collectives over its axes, and the strategy's ``work``."""
    hands = [(a, opt.hand) for a, opt in enumerate(choice) if opt.hand is not None]
    if not hands:
        return (), 1
    hand = hands[0][1]
    axes = tuple(mesh.axis_names[a] for a, _ in hands)
    if hand.ring:
        ring = math.prod(mesh.axis_sizes[a] for a, _ in hands)
        kv = sum(math.prod(local[f] for dim in sig.inputs[i] for f in dim) * ins[i].dtype.itemsize
                 for i in (1, 2))
        steps = ring_steps(hand.ring, ring, float(kv))
        return tuple(IntraOpCollective("collective_permute", axes, step.bytes,
                                       overlap=step.overlap) for step in steps), ring
    if not hand.collectives:
        return (), 1
    # Local target positions: every factor of the last input (the targets), locally.
    tokens = math.prod(local[f] for dim in sig.inputs[-1] for f in dim)
    return tuple(IntraOpCollective(kind, axes, float(hand.bytes_per_token * tokens), op)
                 for kind, op in hand.collectives), 1


def strategy_by_label(strategies: Sequence[Strategy], label: str) -> Strategy:
    """The strategy with ``label``; a UsageError lists the labels when none matches."""
    for strategy in strategies:
        if strategy.label == label:
            return strategy
    labels = ", ".join(s.label for s in strategies[:12])
    raise UsageError(f'no strategy labelled "{label}" (some are: {labels})')
