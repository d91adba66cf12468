"""Stage boundaries: contiguous layers per (virtual) stage, chosen by dynamic programming and
then refined on the simulated step.

The dynamic program is the classical one for pipeline partitioning (PipeDream, Narayanan et
al. 2019 §3.1; Alpa's inter-operator pass, Zheng et al. 2022 §5.2, minimises the same
bottleneck): with ``m`` micro-batches a pipeline's step is about ``Σ_s t_s + (m-1)·max_s t_s``,
and ``Σ_s t_s`` does not depend on the cut, so the cut minimises the slowest chunk's per-micro-
batch time, each stage under its memory limit (its layers' parameters, gradients and optimizer
state, plus the activations of the micro-batches its schedule keeps in flight). The embedding
goes with the first chunk and the head with the last. Then each boundary is moved by one layer
while the simulated step (:mod:`.simulate`: bubbles, transfers, tails) improves, which catches
what the bottleneck rule ignores (the warm-up of an early slow stage, a tail that ends last).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autoshard.planning.pipeline.layer_costs import LayerCosts, PartCost

MemoryOf = Callable[[PartCost, int], float]
"""Bytes one physical stage needs, given its summed parts and its index."""


@dataclass(frozen=True, slots=True)
class Cut:
    """Layers per chunk (chunk ``k`` on stage ``k mod p``) and each chunk's summed cost,
    embedding in the first and head in the last."""

    layers: tuple[int, ...]
    chunks: tuple[PartCost, ...]

    @property
    def starts(self) -> tuple[int, ...]:
        """Index of each chunk's first layer."""
        out, at = [], 0
        for count in self.layers:
            out.append(at)
            at += count
        return tuple(out)


def chunk_costs(costs: LayerCosts, layers: Sequence[int]) -> tuple[PartCost, ...]:
    """Each chunk's summed :class:`PartCost` for ``layers`` per chunk."""
    out, at = [], 0
    for index, count in enumerate(layers):
        total = PartCost()
        for layer in costs.layers[at:at + count]:
            total = total + layer
        if index == 0:
            total = total + costs.pre
        if index == len(layers) - 1:
            total = total + costs.post
        out.append(total)
        at += count
    return tuple(out)


def make_cut(costs: LayerCosts, layers: Sequence[int]) -> Cut:
    return Cut(layers=tuple(layers), chunks=chunk_costs(costs, layers))


def balanced_cut(costs: LayerCosts, chunks: int, stages: int, limit_bytes: float,
                 memory_of: MemoryOf) -> Cut | None:
    """The cut into ``chunks`` contiguous chunks that minimises the slowest chunk's compute
    per micro-batch with every stage within ``limit_bytes`` (None when no cut fits).

    With one chunk per stage the memory of each stage is checked inside the recursion (a
    stage's in-flight count depends on its index); with several (interleaved) a stage is the
    sum of non-adjacent chunks, so the cut is balanced first and checked after.
    """
    n = len(costs.layers)
    if chunks > n:
        return None
    prefix = [PartCost()]
    for layer in costs.layers:
        prefix.append(prefix[-1] + layer)

    def span(i: int, j: int, k: int) -> PartCost:
        part = prefix[j] + prefix[i].scaled(-1.0)
        if k == 0:
            part = part + costs.pre
        if k == chunks - 1:
            part = part + costs.post
        return part

    inf = math.inf
    best = [[inf] * (n + 1) for _ in range(chunks + 1)]
    back = [[0] * (n + 1) for _ in range(chunks + 1)]
    best[0][0] = 0.0
    for k in range(chunks):
        for j in range(k + 1, n - (chunks - k - 1) + 1):
            for i in range(k, j):
                if best[k][i] == inf:
                    continue
                part = span(i, j, k)
                if chunks == stages and memory_of(part, k) > limit_bytes:
                    continue
                value = max(best[k][i], part.compute_s)
                if value < best[k + 1][j]:
                    best[k + 1][j], back[k + 1][j] = value, i
    if best[chunks][n] == inf:
        return None
    layers, j = [], n
    for k in range(chunks, 0, -1):
        i = back[k][j]
        layers.append(j - i)
        j = i
    return make_cut(costs, layers[::-1])


def refine(cut: Cut, costs: LayerCosts, step_of: Callable[[Cut], float],
           fits: Callable[[Cut], bool], rounds: int = 50) -> Cut:
    """Move single layers across boundaries while the simulated step strictly improves."""
    best, best_s = cut, step_of(cut)
    for _ in range(rounds):
        improved = False
        for b in range(len(best.layers) - 1):
            for delta in (-1, 1):
                layers = list(best.layers)
                layers[b] += delta
                layers[b + 1] -= delta
                if min(layers) < 1:
                    continue
                candidate = make_cut(costs, layers)
                if not fits(candidate):
                    continue
                seconds = step_of(candidate)
                if seconds < best_s - 1e-12:
                    best, best_s, improved = candidate, seconds, True
        if not improved:
            return best
    return best
