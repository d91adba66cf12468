"""The size-aware collective model: alpha-beta plus a latency floor, a bandwidth ramp and a
ceiling below the link rate, shaped like NCCL's measured curves.

Why: the textbook alpha-beta formulas (:mod:`costmodel.collectives`) put an 8-byte all-reduce
over two nodes at ~15 µs and a 16 MB one at a third of its measured time; nccl-tests tables
show 35-165 µs floors and a bandwidth that ramps over five decades of message size. The
per-layer collectives of tensor parallelism live exactly in that range. This model keeps the
alpha-beta skeleton and adds the three terms those curves need, all per level, all on
:class:`~costmodel.link.Link` (``launch_s``, ``pipeline_s``, ``bus_efficiency``), so one
closed form per (collective, group) prices every byte count, vectorised.

The model, for a group of levels ``(n_i, link_i)`` inner→outer, ``D_i = n_1···n_i`` ranks per
level-i domain (``D_0 = 1``), ``N = D_k`` ranks, message ``m`` bytes::

    t(m) = L + (√τ + √(c·m))²        (t(0) = 0)
    L = max_i launch_i + Σ_i steps_i · α_i
    τ = Σ_i pipeline_i
    c = max_i bus_i · β_i / bus_efficiency_i

- ``(√τ + √(c·m))²`` is the optimally segmented pipeline: m bytes cut into segments of s
  bytes through a pipeline of depth d with a per-segment overhead a take
  ``(d + m/s)(a + c·s)``; the best s, ``√(a·m/(d·c))``, gives ``(√(d·a) + √(c·m))²``, so
  ``τ = d·a`` is the pipeline fill. It is the closed form of NCCL's protocol and
  chunk-size switches (LL → LL128 → Simple, more channels as messages grow), which NCCL itself
  patches with a per-size correction table (``treeCorrectionFactor`` in
  ``src/graph/tuning.cc``, NVIDIA/nccl@01afd20a77b5804e0ecf1042509dd9d20ebf9e93). At large m the
  time tends to ``L + τ + c·m``: bus bandwidth ``bus_efficiency / β``, below the link rate.
- ``bus_i`` is the bytes per byte of ``m`` that cross one rank's level-i link, nccl-tests'
  bus-bandwidth factors (``doc/PERFORMANCE.md`` of NVIDIA/nccl-tests at commit
  03a204a1f38aaea17f1a777885bb2d9600ba7eff) applied per level of the hierarchical algorithm:
  all-reduce ``2(n_i−1)/n_i / D_{i−1}``
  (reduce-scatter inside, all-reduce of the 1/D_{i−1} shard across, all-gather inside);
  all-gather and reduce-scatter ``(n_i−1)/n_i / D_{i−1}``; all-to-all ``(D_i − D_{i−1})/N``
  (the share of a rank's buffer bound for ranks reached first at level i); broadcast and
  reduce ``1/D_{i−1}`` (a pipelined chain; the node's links share the bytes crossing it);
  collective-permute ``1`` on every level. The levels run as one pipeline (NCCL's trees and
  rings stream chunks through NVLink and the NIC at once), so the slowest level sets ``c``.
- ``steps_i`` counts latency hops per level, after NCCL's ``tuning.cc``: a ring over the
  group crosses level i ``r_i = N/D_{i−1} − N/D_i`` times (``Σ r_i = N − 1``; for two levels
  ``N − nNodes`` NVLink hops and ``nNodes − 1`` network hops, NCCL's ``nInterSteps``).
  All-reduce takes the cheaper of the ring (``2·r_i``) and NCCL's tree (a chain of ``2(n_1−1)``
  hops inside, ``2⌈log2 n_i⌉`` across each outer level); all-gather, reduce-scatter,
  all-to-all, broadcast and reduce take ``r_i``; collective-permute one hop on the outermost
  level.
- ``launch`` is paid once per collective: the most expensive level spanned sets it.

With the three fields at their defaults (0, 0, 1) this is alpha-beta with NCCL's step counts;
:func:`costmodel.collectives.collective_seconds` only uses it when some level of the group sets
one of them, so plain links keep the textbook prices.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from costmodel.kinds import CollectiveKind
from costmodel.link import Link

logger = logging.getLogger(__name__)

Bytes: TypeAlias = "float | np.ndarray"
Group: TypeAlias = tuple[tuple[int, Link], ...]

_K = CollectiveKind


def bus_factor(kind: CollectiveKind, ranks: int) -> float:
    """nccl-tests' ``busbw / algbw`` for ``kind`` over ``ranks`` (doc/PERFORMANCE.md):
    all-reduce 2(n−1)/n; all-gather, reduce-scatter, all-to-all (n−1)/n; others 1.

    Example:
        >>> bus_factor(CollectiveKind.ALL_REDUCE, 16)
        1.875
    """
    n = int(ranks)
    if kind is _K.ALL_REDUCE:
        return 2 * (n - 1) / n
    if kind in (_K.ALL_GATHER, _K.REDUCE_SCATTER, _K.ALL_TO_ALL):
        return (n - 1) / n
    return 1.0


@dataclass(frozen=True, slots=True)
class CurveTerms:
    """The three numbers one (collective, group) reduces to: ``t(m) = L + (√τ + √(c·m))²``.

    ``latency_s`` is L (launch floor plus hops), ``pipeline_s`` is τ, ``s_per_byte`` is c.
    """

    latency_s: float
    pipeline_s: float
    s_per_byte: float

    def seconds(self, m: Bytes) -> Bytes:
        """Vectorised time for ``m`` bytes (> 0; callers map 0 bytes to 0 seconds)."""
        root = math.sqrt(self.pipeline_s) + np.sqrt(self.s_per_byte * m)
        return self.latency_s + root * root


def _domains(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """``D_0 .. D_k``: ranks per domain of each level, D_0 = 1."""
    domains = [1]
    for size in sizes:
        domains.append(domains[-1] * size)
    return tuple(domains)


def level_bus_bytes(kind: CollectiveKind, sizes: tuple[int, ...]) -> tuple[float, ...]:
    """Bytes per byte of m crossing one rank's link at each level (see the module docstring)."""
    domains = _domains(sizes)
    total = domains[-1]
    out = []
    for i, n in enumerate(sizes):
        inner = domains[i]
        if kind is _K.ALL_REDUCE:
            out.append(2 * (n - 1) / n / inner)
        elif kind in (_K.ALL_GATHER, _K.REDUCE_SCATTER):
            out.append((n - 1) / n / inner)
        elif kind is _K.ALL_TO_ALL:
            out.append((domains[i + 1] - inner) / total)
        elif kind in (_K.BROADCAST, _K.REDUCE):
            out.append(1.0 / inner)
        else:
            out.append(1.0)
    return tuple(out)


def _ring_hops(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """``r_i = N/D_{i−1} − N/D_i``: hops of a ring over the group that cross level i."""
    domains = _domains(sizes)
    total = domains[-1]
    return tuple(total // domains[i] - total // domains[i + 1] for i in range(len(sizes)))


def _hop_latency_s(kind: CollectiveKind, sizes: tuple[int, ...],
                   alphas: tuple[float, ...]) -> float:
    if kind is _K.COLLECTIVE_PERMUTE:
        return alphas[-1]
    ring = sum(r * a for r, a in zip(_ring_hops(sizes), alphas, strict=True))
    if kind is not _K.ALL_REDUCE:
        return ring
    tree = (sizes[0] - 1) * alphas[0] + sum(
        (n - 1).bit_length() * a for n, a in zip(sizes[1:], alphas[1:], strict=True))
    return 2 * min(ring, tree)


def compute_curve_terms(kind: CollectiveKind, levels: Group) -> CurveTerms:
    """``L``, ``τ`` and ``c`` of ``kind`` over ``levels`` (canonical: sizes > 1, non-empty);
    :func:`curve_terms` is the cached form the planner's hot path uses.

    Example:
        >>> link = Link(1e-6, 1e-9, launch_s=2e-5, pipeline_s=4e-6, bus_efficiency=0.5)
        >>> terms = compute_curve_terms(CollectiveKind.ALL_GATHER, ((4, link),))
        >>> round(terms.latency_s * 1e6, 6), round(terms.s_per_byte * 1e9, 6)  # 20 + 3·1; 3/4 / 0.5
        (23.0, 1.5)
    """
    sizes = tuple(size for size, _ in levels)
    links = tuple(link for _, link in levels)
    latency = max(link.launch_s for link in links) + _hop_latency_s(
        kind, sizes, tuple(link.alpha_s for link in links))
    pipeline = sum(link.pipeline_s for link in links)
    rate = max(bus * link.beta_s_per_byte / link.bus_efficiency
               for bus, link in zip(level_bus_bytes(kind, sizes), links, strict=True))
    return CurveTerms(latency_s=latency, pipeline_s=pipeline, s_per_byte=rate)


curve_terms = functools.lru_cache(maxsize=8192)(compute_curve_terms)
"""Cached :func:`compute_curve_terms`: one (collective, group) is priced for many byte counts."""


def measured_seconds(kind: CollectiveKind, m: Bytes, levels: Group) -> Bytes:
    """Seconds of ``kind`` on ``m`` bytes (> 0, vectorised) over canonical ``levels``.

    Example:
        >>> link = Link(0.0, 1e-9, launch_s=1e-5)
        >>> round(float(measured_seconds(CollectiveKind.ALL_REDUCE, 4e3, ((2, link),))) * 1e6, 9)
        14.0
    """
    return curve_terms(kind, levels).seconds(m)


def uses_measured_model(levels: Group) -> bool:
    """True when some level sets a measured-curve field (else the textbook model applies)."""
    return any(not link.is_alpha_beta for _, link in levels)
