"""Sharding rules no dimension signature can state, kept beside the generic derivation.

Two ops shard a factor their signature must call BLOCKED, because the local computation is not
the op's own reference on local shards:

* ``embedding`` with the vocab (table rows) sharded: each device looks up only the ids that fall
  in its rows and writes zeros elsewhere, so the output is ``Partial(sum)`` (Megatron's
  ``VocabParallelEmbedding``).
* ``cross_entropy`` with the vocab (logits' last dim) sharded: Megatron's vocab-parallel loss.
  Each device all-reduces the row max, the sum of exponentials and the target logit over the
  vocab axes (three small all-reduces of one f32 per token), after which every device holds the
  full loss: the output is ``Replicate`` on those axes.

:func:`run_local` executes these rules on an emulated mesh (the all-reduces become NumPy
reductions over the group's shards), which is how the tests prove them against the unsharded
reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

Coord = tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class HandFactor:
    """A blocked factor a hand rule may shard anyway.

    ``output``: what outputs lacking the factor become on the sharding axes ("partial" →
    Partial(sum), "replicate" → Replicate after ``collectives``). ``collectives``: the kinds of
    intra-op collectives run over those axes, each of ``bytes_per_token`` times the number of
    local target positions.
    """

    output: str
    collectives: tuple[tuple[str, str], ...] = ()
    bytes_per_token: int = 0


HAND_FACTORS: Mapping[str, Mapping[str, HandFactor]] = {
    "embedding": {"v": HandFactor(output="partial")},
    "cross_entropy": {"v": HandFactor(
        output="replicate",
        collectives=(("all_reduce", "max"), ("all_reduce", "sum"), ("all_reduce", "sum")),
        bytes_per_token=4)},
}


def vocab_offset(coord: Coord, vocab_axes: Sequence[int], axis_sizes: Sequence[int],
                 vocab: int) -> tuple[int, int]:
    """First vocab row and row count held at ``coord`` when ``vocab_axes`` (major→minor) shard
    the vocab evenly."""
    index, count = 0, 1
    for axis in vocab_axes:
        index = index * axis_sizes[axis] + coord[axis]
        count *= axis_sizes[axis]
    rows = vocab // count
    return index * rows, rows


def embedding_local(ids: np.ndarray, table: np.ndarray, start: int) -> np.ndarray:
    """Masked lookup of the rows ``start .. start+len(table)``; zeros for ids outside."""
    local = ids.astype(np.int64) - start
    inside = (local >= 0) & (local < table.shape[0])
    out = table[np.where(inside, local, 0)]
    return np.where(inside[..., None], out, np.zeros_like(out))


def cross_entropy_group(logit_shards: Sequence[np.ndarray], starts: Sequence[int],
                        targets: np.ndarray) -> np.ndarray:
    """Vocab-parallel mean loss from the shards of one vocab group (the all-reduces made
    explicit): max, sum of exp, and the target logit are each reduced over the group."""
    shards = [s.astype(np.float64) for s in logit_shards]
    row_max = np.max(np.stack([s.max(axis=-1) for s in shards]), axis=0)
    sum_exp = np.sum(np.stack([np.exp(s - row_max[..., None]).sum(axis=-1) for s in shards]),
                     axis=0)
    picked = np.zeros(targets.shape)
    for shard, start in zip(shards, starts, strict=True):
        local = targets.astype(np.int64) - start
        inside = (local >= 0) & (local < shard.shape[-1])
        value = np.take_along_axis(shard, np.where(inside, local, 0)[..., None], axis=-1)[..., 0]
        picked += np.where(inside, value, 0.0)
    loss = np.log(sum_exp) + row_max - picked
    return np.asarray(loss.mean(), dtype=np.float32)


def run_local(kind: str, vocab_axes: Sequence[int], axis_sizes: Sequence[int], vocab: int,
              local_inputs: Mapping[Coord, Sequence[np.ndarray]]) -> dict[Coord, np.ndarray]:
    """Every device's output of a hand rule, given every device's local inputs."""
    if kind == "embedding":
        out = {}
        for coord, (ids, table) in local_inputs.items():
            start, _ = vocab_offset(coord, vocab_axes, axis_sizes, vocab)
            out[coord] = embedding_local(ids, table, start)
        return out
    out = {}
    for coord, (_logits, targets) in local_inputs.items():
        group = [c for c in local_inputs
                 if all(c[a] == coord[a] for a in range(len(coord)) if a not in vocab_axes)]
        starts = [vocab_offset(c, vocab_axes, axis_sizes, vocab)[0] for c in group]
        out[coord] = cross_entropy_group([local_inputs[c][0] for c in group], starts, targets)
    return out
