"""The collectives costmodel prices: one closed set, shared by both collective models."""

from __future__ import annotations

import enum


@enum.unique
class CollectiveKind(enum.Enum):
    """The collectives costmodel prices; values are Shardy's / our CSV names.

    Members: ALL_GATHER (every rank ends with the concatenation of all shards), ALL_REDUCE
    (every rank ends with the sum), REDUCE_SCATTER (every rank ends with one shard of the sum),
    ALL_TO_ALL (every rank sends a distinct shard to every other), BROADCAST (one root's buffer
    to all), REDUCE (sum onto one root), COLLECTIVE_PERMUTE (each rank sends its buffer to one
    peer, as in a shift).
    """

    ALL_GATHER = "all_gather"
    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    COLLECTIVE_PERMUTE = "collective_permute"

    def __repr__(self) -> str:
        return f"CollectiveKind.{self.name}"
