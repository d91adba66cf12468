"""Dimension signatures: every operand dim of an op mapped to named factors.

This is the one description of an op's parallelism that the planner derives strategies from
(the same idea as Shardy's OpShardingRule factors and DTensor's single-dim placeholders).
A signature is written once per op kind as an einsum-like string, parsed once and cached,
then bound to concrete shapes:

    "b s h, h f -> b s f"        matmul of activations by a weight
    "(b s) h -> b s h"           a reshape: dim 0 of the input is the product b·s, b major
    "b 1 h, b s h -> b s h"      broadcasting: "1" is a size-1 dim that carries no factor
    "b s v, b s ->"              a scalar result (cross-entropy); an empty operand is a scalar,
                                 an empty input side means no inputs

Each factor is PARALLEL (it appears in an output: sharding it shards the outputs alike),
CONTRACTED (only in inputs: sharding it leaves the outputs Partial with the factor's reduce op)
or BLOCKED (must stay whole everywhere, e.g. the softmax dim). Factors that appear only in
inputs default to CONTRACTED with reduce op "sum"; ``blocked`` and ``reductions`` override.

Example:
    >>> sig = bind_signature("b s h, h f -> b s f", [(2, 3, 4), (4, 5)], [(2, 3, 5)])
    >>> sig.factors, sig.sizes
    (('b', 's', 'h', 'f'), (2, 3, 4, 5))
    >>> sig.kind("h")
    <FactorKind.CONTRACTED: 'contracted'>
"""

from __future__ import annotations

import enum
import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from graphs.errors import ShapeError

Dim = tuple[str, ...]
"""The factors of one tensor dim, major to minor; ``()`` for a size-1 dim with no factor."""

Operand = tuple[Dim, ...]


@enum.unique
class FactorKind(enum.Enum):
    """PARALLEL: in some output. CONTRACTED: reduced away (outputs become Partial when it is
    sharded). BLOCKED: never sharded (softmax dim, attention's key and head dims)."""

    PARALLEL = "parallel"
    CONTRACTED = "contracted"
    BLOCKED = "blocked"


@dataclass(frozen=True, slots=True, kw_only=True)
class DimSignature:
    """A signature bound to shapes. Tuples ``factors``, ``sizes``, ``kinds`` and
    ``reductions`` are aligned; ``reductions[i]`` is "sum", "avg" or "max" for contracted
    factors and "" otherwise. Factor order is order of first appearance (inputs, then outputs)."""

    inputs: tuple[Operand, ...]
    outputs: tuple[Operand, ...]
    factors: tuple[str, ...]
    sizes: tuple[int, ...]
    kinds: tuple[FactorKind, ...]
    reductions: tuple[str, ...]

    def index(self, factor: str) -> int:
        return self.factors.index(factor)

    def size(self, factor: str) -> int:
        return self.sizes[self.factors.index(factor)]

    def kind(self, factor: str) -> FactorKind:
        return self.kinds[self.factors.index(factor)]

    def reduction(self, factor: str) -> str:
        return self.reductions[self.factors.index(factor)]

    @property
    def shardable(self) -> tuple[str, ...]:
        """Factors that a mesh axis may shard (everything not blocked), in signature order."""
        return tuple(f for f, k in zip(self.factors, self.kinds, strict=True)
                     if k is not FactorKind.BLOCKED)


@functools.lru_cache(maxsize=4096)
def parse_signature(text: str) -> tuple[tuple[Operand, ...], tuple[Operand, ...]]:
    """Parse the structure of a signature string (no sizes); cached, so call freely."""
    if text.count("->") != 1:
        raise ValueError(f'signature "{text}" needs exactly one "->"')
    left, right = text.split("->")
    inputs = tuple(_parse_operand(p, text) for p in left.split(",")) if left.strip() else ()
    return inputs, tuple(_parse_operand(p, text) for p in right.split(","))


def _parse_operand(part: str, text: str) -> Operand:
    dims: list[Dim] = []
    tokens = part.replace("(", " ( ").replace(")", " ) ").split()
    group: list[str] | None = None
    for token in tokens:
        if token == "(":
            if group is not None:
                raise ValueError(f'signature "{text}": nested parentheses')
            group = []
        elif token == ")":
            if group is None:
                raise ValueError(f'signature "{text}": unbalanced ")"')
            dims.append(tuple(group))
            group = None
        elif token == "1":
            if group is not None:
                raise ValueError(f'signature "{text}": "1" inside a merged dim')
            dims.append(())
        elif group is not None:
            group.append(token)
        else:
            dims.append((token,))
    if group is not None:
        raise ValueError(f'signature "{text}": unbalanced "("')
    return tuple(dims)


def bind_signature(
    text: str,
    input_shapes: Sequence[Sequence[int]],
    output_shapes: Sequence[Sequence[int]],
    *,
    blocked: Iterable[str] = (),
    reductions: Mapping[str, str] | None = None,
    sizes: Mapping[str, int] | None = None,
) -> DimSignature:
    """Bind a signature string to concrete shapes, inferring every factor's size.

    A merged dim ``(a b)`` may leave one factor's size unknown; it is the dim size divided by
    the others (pass the rest in ``sizes``). Raises ShapeError when the shapes disagree.
    """
    in_ops, out_ops = parse_signature(text)
    if not in_ops and len(input_shapes) == 1 and not len(input_shapes[0]):
        in_ops = ((),)   # " -> " of a unary op on a scalar: one rank-0 input, not none
    _check_ranks(text, in_ops, input_shapes, "input")
    _check_ranks(text, out_ops, output_shapes, "output")
    known = dict(sizes or {})
    order: list[str] = []
    pairs = [*zip(in_ops, input_shapes, strict=True), *zip(out_ops, output_shapes, strict=True)]
    dims = [(dim, int(size)) for operand, shape in pairs
            for dim, size in zip(operand, shape, strict=True)]
    for dim, _ in dims:
        order.extend(f for f in dim if f not in order)
    # Single-factor dims first, so merged dims can divide by what they already know.
    for dim, size in sorted(dims, key=lambda d: len(d[0]) > 1):
        _bind_dim(text, dim, size, known)
    out_factors = {f for operand in out_ops for dim in operand for f in dim}
    blocked_set, red = set(blocked), dict(reductions or {})
    kinds, reds = [], []
    for f in order:
        if f in blocked_set:
            kinds.append(FactorKind.BLOCKED)
            reds.append("")
        elif f in out_factors:
            kinds.append(FactorKind.PARALLEL)
            reds.append("")
        else:
            kinds.append(FactorKind.CONTRACTED)
            reds.append(red.get(f, "sum"))
    return DimSignature(inputs=in_ops, outputs=out_ops, factors=tuple(order),
                        sizes=tuple(known[f] for f in order), kinds=tuple(kinds),
                        reductions=tuple(reds))


def _check_ranks(text: str, operands: tuple[Operand, ...], shapes: Sequence[Sequence[int]],
                 side: str) -> None:
    if len(operands) != len(shapes):
        msg = f'signature "{text}" has {len(operands)} {side}s but the op has {len(shapes)}'
        raise ShapeError(msg)
    for i, (operand, shape) in enumerate(zip(operands, shapes, strict=True)):
        if len(operand) != len(shape):
            msg = (f'signature "{text}": {side} {i} has {len(operand)} dims in the signature '
                   f"but shape {list(shape)}")
            raise ShapeError(msg)


def _bind_dim(text: str, dim: Dim, size: int, known: dict[str, int]) -> None:
    if not dim:
        if size != 1:
            raise ShapeError(f'signature "{text}": a "1" dim has size {size}')
        return
    unknown = [f for f in dim if f not in known]
    product = math.prod(known[f] for f in dim if f in known)
    if len(unknown) > 1:
        msg = f'signature "{text}": sizes of {unknown} in merged dim {dim} are not determined'
        raise ShapeError(msg)
    if unknown:
        if product == 0 or size % product:
            raise ShapeError(f'signature "{text}": dim {dim} of size {size} does not split')
        known[unknown[0]] = size // product
    elif product != size:
        msg = f'signature "{text}": dim {dim} has size {size} but its factors give {product}'
        raise ShapeError(msg)
