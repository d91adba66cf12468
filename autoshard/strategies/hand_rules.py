"""Sharding rules no dimension signature can state, kept beside the generic derivation.

Four ops shard a factor their signature must call BLOCKED, because the local computation is
not the op's own reference on local shards:

* ``embedding`` with the vocab (table rows) sharded: each device looks up only the ids that fall
  in its rows and writes zeros elsewhere, so the output is ``Partial(sum)`` (Megatron's
  ``VocabParallelEmbedding``).
* ``cross_entropy`` with the vocab (logits' last dim) sharded: Megatron's vocab-parallel loss.
  Each device all-reduces the row max, the sum of exponentials and the target logit over the
  vocab axes (three small all-reduces of one f32 per token), after which every device holds the
  full loss: the output is ``Replicate`` on those axes.

* ``attention_bwd`` with the query-head group ``g`` sharded (grouped-query attention with its
  query heads split finer than its KV heads, as DeepSpeed-Ulysses does with GQA): dq is sharded
  like q, and dk, dv (sums over the group's query heads) are ``Partial(sum)``. The local
  computation is the kind's own reference on the local heads.
* ``attention`` and ``attention_bwd`` with the sequence sharded: ring attention (context
  parallelism). Queries (s) and keys/values (t) are sharded together on the same axes; the
  K/V blocks pass around the ring in n − 1 point-to-point steps, each hidden behind one block
  of the attention (and in the backward the dK/dV partial sums travel with them, plus a last
  step home); each device computes its queries against every block, n times the local
  shapes' work (:mod:`autoshard.strategies.ring_attention`).

:func:`run_local` executes these rules on an emulated mesh (the all-reduces become NumPy
reductions over the group's shards), which is how the tests prove them against the unsharded
reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoshard.sharding.placements import chunk_sizes
from autoshard.strategies.ring_attention import ring_backward, ring_forward, ring_groups
from graphs import get_op

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
    also: tuple[str, ...] = ()
    ring: str = ""


HAND_FACTORS: Mapping[str, Mapping[str, HandFactor]] = {
    "embedding": {"v": HandFactor(output="partial")},
    "cross_entropy": {"v": HandFactor(
        output="replicate",
        collectives=(("all_reduce", "max"), ("all_reduce", "sum"), ("all_reduce", "sum")),
        bytes_per_token=4)},
    "attention": {"s": HandFactor(output="replicate", also=("t",), ring="forward")},
    "attention_bwd": {"s": HandFactor(output="replicate", also=("t",), ring="backward"),
                      "g": HandFactor(output="partial")},
}
"""Per op kind, the blocked factors a hand rule shards. ``also``: factors sharded together
with it on the same axes (the ring's keys with its queries); ``ring``: the rule is ring
attention (its forward or backward), whose steps :func:`ring_steps` lists."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RingStep:
    """One point-to-point step of a ring: ``bytes`` each device sends to its neighbour and
    the fraction of the op's compute it runs beside (``overlap``)."""

    bytes: float
    overlap: float


def ring_steps(direction: str, ring_size: int, kv_bytes: float) -> tuple[RingStep, ...]:
    """The steps of ring attention over ``ring_size`` devices with ``kv_bytes`` of local K
    and V: forward, n − 1 steps of K/V, each beside one of the n block computations;
    backward, n − 1 steps of K/V with the dK/dV partial sums (twice the bytes) beside a
    block each, then the dK/dV home (not overlapped). Megatron-Core's
    ``AttnFuncWithCPAndKVP2P`` does the same (send/recv of the next K/V block while
    computing the current one; dK/dV accumulated along the ring).

    Example:
        >>> [(s.bytes, s.overlap) for s in ring_steps("forward", 4, 8.0)]
        [(8.0, 0.25), (8.0, 0.25), (8.0, 0.25)]
        >>> [(s.bytes, s.overlap) for s in ring_steps("backward", 2, 8.0)]
        [(16.0, 0.5), (8.0, 0.0)]
    """
    if ring_size < 2:
        return ()
    if direction == "forward":
        return tuple(RingStep(bytes=kv_bytes, overlap=1.0 / ring_size)
                     for _ in range(ring_size - 1))
    travelling = tuple(RingStep(bytes=2.0 * kv_bytes, overlap=1.0 / ring_size)
                       for _ in range(ring_size - 1))
    return (*travelling, RingStep(bytes=kv_bytes, overlap=0.0))


def vocab_offset(coord: Coord, vocab_axes: Sequence[int], axis_sizes: Sequence[int],
                 vocab: int) -> tuple[int, int]:
    """First vocab row and row count held at ``coord`` when ``vocab_axes`` (mesh order) shard
    the vocab.

    Why not ``index × vocab // shards``: under ``allow_uneven`` the vocab is split as DTensor
    splits a Shard dim, each axis ``torch.chunk``-ing the piece the previous axes left
    (:func:`~autoshard.sharding.placements.chunk_sizes`: ceil-sized, the last short). A device's
    first row is then the sum of the pieces before it at every level, not a multiple of one
    piece size (11 rows over x=2, y=2: pieces 3, 3, 3, 2 at rows 0, 3, 6, 9).

    Example:
        >>> [vocab_offset((i, j), (0, 1), (2, 2), 11) for i in range(2) for j in range(2)]
        [(0, 3), (3, 3), (6, 3), (9, 2)]
        >>> [vocab_offset((i,), (0,), (3,), 5) for i in range(3)]
        [(0, 2), (2, 2), (4, 1)]
    """
    start, rows = 0, vocab
    for axis in vocab_axes:
        pieces = chunk_sizes(rows, axis_sizes[axis])
        start += sum(pieces[:coord[axis]])
        rows = pieces[coord[axis]]
    return start, rows


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


def run_local(kind: str, factor: str, hand_axes: Sequence[int], axis_sizes: Sequence[int],
              specs: Sequence[Any], attrs: Mapping[str, Any],
              local_inputs: Mapping[Coord, Sequence[np.ndarray]]
              ) -> dict[Coord, tuple[np.ndarray, ...]]:
    """Every device's outputs of the hand rule sharding ``factor``, given every device's local
    inputs; ``specs`` are the op's global input specs (shapes), ``attrs`` its attrs with
    defaults."""
    if kind == "attention_bwd" and factor == "g":
        reference = get_op(kind).reference
        return {coord: tuple(reference(arrays, attrs)) for coord, arrays in local_inputs.items()}
    if kind in ("attention", "attention_bwd"):
        return _ring(kind, hand_axes, axis_sizes, specs, attrs, local_inputs)
    if kind == "embedding":
        vocab = specs[1].shape[0]
        out = {}
        for coord, (ids, table) in local_inputs.items():
            start, _ = vocab_offset(coord, hand_axes, axis_sizes, vocab)
            out[coord] = (embedding_local(ids, table, start),)
        return out
    vocab, out = specs[0].shape[-1], {}
    for coord, (_logits, targets) in local_inputs.items():
        group = [c for c in local_inputs
                 if all(c[a] == coord[a] for a in range(len(coord)) if a not in hand_axes)]
        starts = [vocab_offset(c, hand_axes, axis_sizes, vocab)[0] for c in group]
        out[coord] = (cross_entropy_group([local_inputs[c][0] for c in group], starts,
                                          targets),)
    return out


def _ring(kind: str, hand_axes: Sequence[int], axis_sizes: Sequence[int],
          specs: Sequence[Any], attrs: Mapping[str, Any],
          local_inputs: Mapping[Coord, Sequence[np.ndarray]]
          ) -> dict[Coord, tuple[np.ndarray, ...]]:
    total_s, total_t = specs[0].shape[1], specs[1].shape[1]
    scale, causal = attrs.get("scale"), bool(attrs.get("causal", True))
    out: dict[Coord, tuple[np.ndarray, ...]] = {}
    for group in ring_groups(list(local_inputs), hand_axes, axis_sizes):
        if kind == "attention":
            done = ring_forward(group, local_inputs, scale, causal, total_s, total_t)
            out.update({c: (done[c],) for c in group})
        else:
            out.update(ring_backward(group, local_inputs, scale, causal, total_s, total_t))
    return out
