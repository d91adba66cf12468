"""Does a user-written alpha-beta link undercut the measured floor of the topology's links?

Why: ``--link dp=alpha:5us,bw:100GB/s`` is a Hockney link: ``alpha`` is the latency of one
algorithm step (a ring all-reduce over n ranks pays 2(n−1)·alpha, recursive doubling
log2(n)·alpha; the cheaper wins), with no per-collective launch floor and no pipeline fill
unless the spec adds ``launch:`` and ``pipeline:``. The GPU presets' links follow measured NCCL
curves whose floor is tens of µs (an 8-rank NVLink all-reduce of 8 bytes: ~37 µs), so a
textbook link that is nominally slower can price small collectives far below them, and the
planner then prefers it for exactly the small tensor-parallel messages where it is wrong.
A textbook link stays a legitimate what-if (unit-less studies, TPU ICI), so this module does
not change its price: it only says when it undercuts the topology's cheapest measured curve,
for a caller to warn.

Promises: pure; the comparison is one all-reduce of :data:`PROBE_BYTES` over the same number of
ranks on one level, the textbook link against every measured link of the topology's levels.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.collectives import collective_seconds
from costmodel.kinds import CollectiveKind
from costmodel.link import Link, Topology

PROBE_BYTES = 8.0
"""The smallest message nccl-tests measures (``-b 8``): where a launch floor matters most."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FloorGap:
    """A textbook link's all-reduce of :data:`PROBE_BYTES` over ``ranks`` (``textbook_s``)
    against the cheapest measured link's (``floor_s``, on the link named ``floor_link``)."""

    ranks: int
    textbook_s: float
    floor_s: float
    floor_link: str


def undercut_floor(link: Link, ranks: int, topology: Topology) -> FloorGap | None:
    """The gap when ``link`` is pure alpha-beta and prices a small all-reduce over ``ranks``
    below every measured link of ``topology``'s levels; None otherwise (a link with curve
    terms, one rank, or a topology whose levels have no measured links: TPU, generic).

    Example:
        >>> from costmodel.presets import get_preset
        >>> gap = undercut_floor(Link(5e-6, 1e-11), 8, get_preset("dgx-h100"))
        >>> round(gap.textbook_s * 1e6, 1), gap.floor_link  # recursive doubling: 3 × 5 µs
        (15.0, 'ib')
        >>> undercut_floor(Link(5e-6, 1e-11, launch_s=6.8e-6), 8, get_preset("dgx-h100"))
    """
    if not link.is_alpha_beta or ranks < 2:
        return None
    measured = _measured_links(topology)
    if not measured:
        return None
    floor_s, floor_link = min((_probe(other, ranks), other.name) for other in measured)
    textbook_s = _probe(link, ranks)
    if textbook_s >= floor_s:
        return None
    return FloorGap(ranks=ranks, textbook_s=textbook_s, floor_s=floor_s, floor_link=floor_link)


def _measured_links(topology: Topology) -> list[Link]:
    """The measured links of the topology's levels (its fabric; extra named links are
    alternatives a user may pick, not the floor the machine has)."""
    links = dict.fromkeys(level.link for level in topology.levels)
    return [link for link in links if not link.is_alpha_beta]


def _probe(link: Link, ranks: int) -> float:
    return float(collective_seconds(CollectiveKind.ALL_REDUCE, PROBE_BYTES, ((ranks, link),)))


__all__ = ["PROBE_BYTES", "FloorGap", "undercut_floor"]
