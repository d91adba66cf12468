"""Placements: what one mesh axis does to a tensor, with PyTorch DTensor's semantics.

Placements are one per mesh axis and apply left to right over the axes, each one chunking the
*current local* tensor (``torch.chunk`` sizes when uneven). Short forms, used in plans, CSVs
and the CLI, are DTensor's: ``R``, ``S(0)``, ``P(sum)``, ``_S(0,2)``. ``repr`` evaluates back.

``StridedShard(dim, split_factor)`` is DTensor's ``_StridedShard``: chunk the dim into
``split_factor`` blocks, chunk each block into ``n`` pieces, and rank ``i`` holds piece ``i``
of every block. It is what sharding looks like after something else already split the dim
(FSDP on top of TP, or a flatten whose minor part is sharded).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autoshard.errors import PlacementError

REDUCE_OPS = ("sum", "avg", "max", "min")


@dataclass(frozen=True, slots=True)
class Replicate:
    """Every device on the axis holds the whole (local) tensor."""

    def __str__(self) -> str:
        return "R"


@dataclass(frozen=True, slots=True)
class Shard:
    """The axis splits tensor dim ``dim`` into contiguous chunks, rank order."""

    dim: int

    def __str__(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True, slots=True)
class StridedShard:
    """DTensor's ``_StridedShard``: sharding of ``dim`` inside ``split_factor`` blocks."""

    dim: int
    split_factor: int

    def __post_init__(self) -> None:
        if self.split_factor < 1:
            raise PlacementError(f"_StridedShard split_factor must be >= 1, got "
                                 f"{self.split_factor}")

    def __str__(self) -> str:
        return f"_S({self.dim},{self.split_factor})"


_StridedShard = StridedShard


@dataclass(frozen=True, slots=True)
class Partial:
    """Each device holds a partial value; the true value is their reduction (``reduce_op``)."""

    reduce_op: str = "sum"

    def __post_init__(self) -> None:
        if self.reduce_op not in REDUCE_OPS:
            raise PlacementError(f'Partial reduce op "{self.reduce_op}" is not one of '
                                 f"{', '.join(REDUCE_OPS)}")

    def __str__(self) -> str:
        return f"P({self.reduce_op})"


Placement = Replicate | Shard | StridedShard | Partial

_FORMS = (
    (re.compile(r"^R$"), lambda m: Replicate()),
    (re.compile(r"^S\((\d+)\)$"), lambda m: Shard(int(m[1]))),
    (re.compile(r"^_S\((\d+),\s*(\d+)\)$"), lambda m: StridedShard(int(m[1]), int(m[2]))),
    (re.compile(r"^P\((\w+)\)$"), lambda m: Partial(m[1])),
    (re.compile(r"^P$"), lambda m: Partial()),
)


def parse_placement(text: str) -> Placement:
    """Short form (``R``, ``S(1)``, ``P(sum)``, ``_S(0,2)``) → placement.

    Example:
        >>> parse_placement("S(1)"), parse_placement("_S(0, 2)")
        (Shard(dim=1), StridedShard(dim=0, split_factor=2))
    """
    key = text.strip()
    for pattern, build in _FORMS:
        match = pattern.match(key)
        if match:
            return build(match)
    raise PlacementError(f'placement "{text}" is not one of R, S(d), P(sum|avg|max|min), '
                         "_S(d,split_factor)")


def shard_dim(placement: Placement) -> int | None:
    """The tensor dim a Shard or StridedShard splits, None otherwise."""
    if isinstance(placement, Shard | StridedShard):
        return placement.dim
    return None


def chunk_sizes(size: int, parts: int) -> tuple[int, ...]:
    """Sizes ``torch.chunk`` gives: ceil-sized chunks, the last ones short or empty.

    Example:
        >>> chunk_sizes(18, 4), chunk_sizes(5, 4)
        ((5, 5, 5, 3), (2, 2, 1, 0))
    """
    step = -(-size // parts) if parts else 0
    return tuple(max(0, min(step, size - i * step)) for i in range(parts))
