"""Does a user-written alpha-beta link undercut the measured floor of the topology's links?

Why: ``--link dp=alpha:5us,bw:100GB/s`` is a Hockney link: ``alpha`` is the latency of one
algorithm step (a ring all-reduce over n ranks pays 2(n−1)·alpha, recursive doubling
log2(n)·alpha; the cheaper wins), with no per-collective launch floor and no pipeline fill
unless the spec adds ``launch:`` and ``pipeline:``. The GPU presets' links follow measured NCCL
curves whose floor is tens of µs (an 8-rank NVLink all-reduce of 8 bytes: ~37 µs), so a
textbook link that is nominally slower can price small collectives far below them, and the
planner then prefers it for exactly the small tensor-parallel messages where it is wrong.
A textbook link stays a legitimate what-if (unit-less studies, TPU ICI), so this module does
not change its price: it only says when it undercuts the measured curve of the level the
link replaces, for a caller to warn.

Promises: pure; the comparison is one all-reduce of :data:`PROBE_BYTES` over the same number of
ranks on one level, the textbook link against the measured link of one level of the topology:
the level the caller's ranks cross (for a mesh axis, the outermost level its devices span; an
axis inside one dgx-h100 node is held to the NVLink curve, 26.0 µs for 2 ranks, not to the
cheaper IB curve, 11.6 µs, of a level it never reaches).
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
    against the measured link's of the level they cross (``floor_s``, on the link named
    ``floor_link``)."""

    ranks: int
    textbook_s: float
    floor_s: float
    floor_link: str


def undercut_floor(link: Link, ranks: int, topology: Topology, *, level: int
                   ) -> FloorGap | None:
    """The gap when ``link`` is pure alpha-beta and prices a small all-reduce over ``ranks``
    below the measured link of ``topology.levels[level]`` (the level those ranks cross); None
    otherwise (a link with curve terms, one rank, or a level whose link is itself textbook:
    TPU, generic).

    Example:
        >>> from costmodel.presets import get_preset
        >>> dgx = get_preset("dgx-h100")  # levels: node (nvlink), cluster (ib)
        >>> gap = undercut_floor(Link(5e-6, 1e-11), 8, dgx, level=1)
        >>> round(gap.textbook_s * 1e6, 1), gap.floor_link  # recursive doubling: 3 × 5 µs
        (15.0, 'ib')
        >>> undercut_floor(Link(20e-6, 1e-11), 2, dgx, level=0).floor_link  # 20 µs < 26.0 µs
        'nvlink'
        >>> undercut_floor(Link(5e-6, 1e-11, launch_s=6.8e-6), 8, dgx, level=1)
    """
    crossed = topology.levels[level].link
    if not link.is_alpha_beta or ranks < 2 or crossed.is_alpha_beta:
        return None
    floor_s, textbook_s = _probe(crossed, ranks), _probe(link, ranks)
    if textbook_s >= floor_s:
        return None
    return FloorGap(ranks=ranks, textbook_s=textbook_s, floor_s=floor_s,
                    floor_link=crossed.name)


def _probe(link: Link, ranks: int) -> float:
    return float(collective_seconds(CollectiveKind.ALL_REDUCE, PROBE_BYTES, ((ranks, link),)))


__all__ = ["PROBE_BYTES", "FloorGap", "undercut_floor"]
