"""Ring attention (context parallelism) executed block by block on an emulated mesh.

Why here: the ring is the one attention strategy whose local program is not the op's reference
on local shards. Each device holds a contiguous block of the queries and of the keys/values
along the sequence; the K/V blocks travel around the ring (one point-to-point step each, Liu et
al. 2023, "Ring Attention with Blockwise Transformers"; Megatron-Core's context parallelism
with P2P, ``--cp-comm-type p2p``) and every device merges its queries' attention over each
block with the online softmax (running max and normaliser, Milakov & Gimelshein 2018; the
FlashAttention recurrence). The causal mask is evaluated on absolute positions (query i sees
key j iff j ≤ i + (t − s), bottom-right aligned as the ``attention`` kind), so blocks wholly in
a query block's future contribute nothing.

The backward runs the same pairs: each device's dq sums its queries' contributions against
every K/V block; each K/V block's dk, dv sum the contributions of every query block (the dK/dV
partial sums that travel around the ring), with the softmax statistics of the full row (the
log-sum-exp a real kernel keeps from the forward) and D = rowsum(P ∘ dP) summed over blocks.

Megatron-Core balances causal work by giving rank r the chunks r and 2n−1−r of the sequence
("zig-zag"); that is a permutation of token positions applied to every input, under which
every op but the causal mask is unchanged. The emulator runs contiguous blocks (so positions
are plain offsets); the planner prices the balanced case (each rank 1/n of the attention).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

Coord = tuple[int, ...]


def block_index(coord: Coord, axes: Sequence[int], axis_sizes: Sequence[int]) -> int:
    """The device's block along the sequence when ``axes`` (mesh order) shard it."""
    index = 0
    for axis in axes:
        index = index * axis_sizes[axis] + coord[axis]
    return index


def ring_groups(coords: Sequence[Coord], axes: Sequence[int], axis_sizes: Sequence[int]
                ) -> list[list[Coord]]:
    """Devices that share every coordinate off the ring axes, each list in ring order."""
    groups: dict[Coord, list[Coord]] = {}
    for coord in coords:
        key = tuple(c for a, c in enumerate(coord) if a not in axes)
        groups.setdefault(key, []).append(coord)
    return [sorted(group, key=lambda c: block_index(c, axes, axis_sizes))
            for group in groups.values()]


def _scores(q: np.ndarray, k: np.ndarray, scale: float, rows: np.ndarray, cols: np.ndarray,
            causal: bool) -> np.ndarray:
    """Scores [b, hq, s_blk, t_blk] of one block pair, masked at absolute positions."""
    group = q.shape[2] // k.shape[2]
    keys = k[:, :, np.arange(q.shape[2]) // group]
    scores = np.einsum("bshd,bthd->bhst", q, keys) * scale
    if causal:
        scores = np.where(cols[None, :] <= rows[:, None], scores, -np.inf)
    return scores


def _starts(blocks: Sequence[np.ndarray]) -> list[int]:
    """Each block's first position along the sequence (dim 1), blocks in ring order.

    Why from the blocks' own sizes and not ``index × size``: under ``allow_uneven`` the
    sequence is split in ``torch.chunk`` sizes (the last blocks short or empty), and the blocks
    in ring order are contiguous and consecutive whether one axis or several split it."""
    return [int(start) for start in np.cumsum([0, *(b.shape[1] for b in blocks)])[:-1]]


def _positions(start: int, size: int, shift: int = 0) -> np.ndarray:
    return np.arange(start, start + size) + shift


def ring_forward(group: Sequence[Coord], local: Mapping[Coord, Sequence[np.ndarray]],
                 scale: float | None, causal: bool, total_s: int, total_t: int
                 ) -> dict[Coord, np.ndarray]:
    """Every device's output block: its queries against the ring's K/V blocks, merged online
    in ring order (own block first, then the one from the previous rank, …)."""
    n = len(group)
    q_starts = _starts([local[c][0] for c in group])
    k_starts = _starts([local[c][1] for c in group])
    out = {}
    for r, coord in enumerate(group):
        q = local[coord][0]
        s_blk, scale_r = q.shape[1], (1.0 / np.sqrt(q.shape[3]) if scale is None else scale)
        rows = _positions(q_starts[r], s_blk, total_t - total_s)
        high = np.full((q.shape[0], q.shape[2], s_blk), -np.inf)
        norm = np.zeros_like(high)
        acc = np.zeros((q.shape[0], q.shape[2], s_blk, local[coord][2].shape[3]))
        for step in range(n):
            j = (r - step) % n
            k, v = local[group[j]][1], local[group[j]][2]
            scores = _scores(q, k, scale_r, rows, _positions(k_starts[j], k.shape[1]), causal)
            new_high = np.maximum(high, scores.max(axis=-1))
            safe = np.where(np.isfinite(new_high), new_high, 0.0)
            weights = np.exp(scores - safe[..., None])
            correction = np.exp(np.where(np.isfinite(high), high - safe, -np.inf))
            group_size = q.shape[2] // k.shape[2]
            values = v[:, :, np.arange(q.shape[2]) // group_size]
            acc = acc * correction[..., None] + np.einsum("bhst,bthe->bhse", weights, values)
            norm = norm * correction + weights.sum(axis=-1)
            high = new_high
        out[coord] = np.einsum("bhse->bshe", acc / norm[..., None]).astype(q.dtype)
    return out


def ring_backward(group: Sequence[Coord], local: Mapping[Coord, Sequence[np.ndarray]],
                  scale: float | None, causal: bool, total_s: int, total_t: int
                  ) -> dict[Coord, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every device's (dq, dk, dv) blocks from its (q, k, v, dout) blocks (module docstring)."""
    n = len(group)
    q0, k0 = local[group[0]][0], local[group[0]][1]
    scale_r = 1.0 / np.sqrt(q0.shape[3]) if scale is None else scale
    hq, hk = q0.shape[2], k0.shape[2]
    heads = np.arange(hq) // (hq // hk)
    q_starts = _starts([local[c][0] for c in group])
    k_starts = _starts([local[c][1] for c in group])
    pairs = {}
    for r in range(n):
        q = local[group[r]][0]
        rows = _positions(q_starts[r], q.shape[1], total_t - total_s)
        blocks = [_scores(q, local[group[j]][1], scale_r, rows,
                          _positions(k_starts[j], local[group[j]][1].shape[1]), causal)
                  for j in range(n)]
        top = np.max([b.max(axis=-1) for b in blocks], axis=0)
        lse = top + np.log(sum(np.exp(b - top[..., None]).sum(axis=-1) for b in blocks))
        pairs[r] = [np.exp(b - lse[..., None]) for b in blocks]
    dq = {c: np.zeros_like(local[c][0], dtype=np.float64) for c in group}
    dk = {c: np.zeros((*local[c][1].shape[:2], hq, local[c][1].shape[3])) for c in group}
    dv = {c: np.zeros((*local[c][2].shape[:2], hq, local[c][2].shape[3])) for c in group}
    for r, coord in enumerate(group):
        q, dout = local[coord][0], local[coord][3]
        dprobs = [np.einsum("bshe,bthe->bhst", dout, local[group[j]][2][:, :, heads])
                  for j in range(n)]
        rowsum = sum(np.einsum("bhst,bhst->bhs", pairs[r][j], dprobs[j]) for j in range(n))
        for j in range(n):
            probs, owner = pairs[r][j], group[j]
            dscores = probs * (dprobs[j] - rowsum[..., None])
            dq[coord] += np.einsum("bhst,bthd->bshd", dscores,
                                   local[owner][1][:, :, heads]) * scale_r
            dk[owner] += np.einsum("bhst,bshd->bthd", dscores, q) * scale_r
            dv[owner] += np.einsum("bhst,bshe->bthe", probs, dout)
    out = {}
    for coord in group:
        k, v = local[coord][1], local[coord][2]
        fold_k = dk[coord].reshape(*k.shape[:3], hq // hk, -1).sum(axis=3)
        fold_v = dv[coord].reshape(*v.shape[:3], hq // hk, -1).sum(axis=3)
        out[coord] = (dq[coord].astype(local[coord][0].dtype), fold_k.astype(k.dtype),
                      fold_v.astype(v.dtype))
    return out
