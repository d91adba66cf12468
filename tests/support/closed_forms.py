"""Textbook alpha-beta times of the collectives (Thakur, Rabenseifner and Gropp 2005,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 19(1)), written out
independently of ``costmodel`` so tests can check its prices: ``n`` ranks, ``m`` bytes in
total, ``alpha`` seconds per message, ``bw`` bytes per second."""

from __future__ import annotations

import math


def all_reduce_s(n: int, m: float, alpha: float, bw: float) -> float:
    """Cheapest of ring, recursive doubling and Rabenseifner."""
    ring = 2 * (n - 1) * alpha + 2 * (n - 1) / n * m / bw
    doubling = math.log2(n) * (alpha + m / bw)
    rabenseifner = 2 * math.log2(n) * alpha + 2 * (n - 1) / n * m / bw
    return min(ring, doubling, rabenseifner)


def gather_or_scatter_s(n: int, m: float, alpha: float, bw: float) -> float:
    """All-gather / reduce-scatter of m bytes in total: ring or recursive halving/doubling."""
    return min(n - 1, math.log2(n)) * alpha + (n - 1) / n * m / bw


def axis_link(plan: object, axis: str) -> tuple[int, float, float]:
    """(ranks, alpha seconds, bytes per second) of mesh axis ``axis``, read off the plan's
    inputs (``plan.links``), never off the prices it computed."""
    (link,) = [entry for entry in plan.links if entry["axis"] == axis]  # type: ignore[attr-defined]
    return int(link["size"]), float(link["alpha_s"]), float(link["bandwidth_bytes_per_s"])
