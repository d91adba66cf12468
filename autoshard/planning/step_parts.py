"""A step's communication in three parts: exposed, hidden behind compute, and run beside
other communication on another mesh axis.

The overlap models (:mod:`.step`) run each mesh axis as its own stream beside the compute
stream, and price an overlapped reshard whose steps span several axes by its busiest axis: the
steps of consecutive buckets pipeline across the axes. So of a reshard's communication
seconds (every collective counted once, as ``objective.comm_s`` counts them) only the busiest
axis's can overlap compute; the rest runs at the same time as that axis's, on the other axes.
Counting it as "hidden behind compute" would let one op's compute hide more than itself (the
walk that found it: 13.5 ms hidden beside 11.6 ms of compute). Per reshard hidden behind one op
(the op model), with ``busiest`` its busiest axis's seconds and ``cover`` its share of the op's
compute::

    communication   = local + Σ collectives
    exposed         = local + max(0, busiest − cover)
    beside other axes = Σ collectives − busiest
    hidden          = min(busiest, cover)        ≤ cover

and per layer window (the layer model), with ``S`` the busiest axis stream and ``C`` the
window's compute: exposed ``max(0, S − C)``, beside other axes ``Σ − S``, hidden
``min(S, C)``. The planner derives ``hidden_s`` by difference (``compute + comm − total −
concurrent``); this module computes ``concurrent_s`` from the records.
"""

from __future__ import annotations

from collections.abc import Iterable

from autoshard.planning.record import ReshardRecord
from autoshard.planning.step import LOCAL_KINDS, axis_seconds


def concurrent_seconds(reshards: Iterable[ReshardRecord], micro_batches: int) -> float:
    """Seconds of overlapped communication that ran beside the same reshard's (op model) or
    the same window's (layer model) busiest axis, on another axis; exposed reshards run their
    collectives one after another and add nothing.

    Example: a gradient reduce-scatter over ``fsdp`` (3 ms) then all-reduce over ``dp``
    (2 ms), hidden behind one op: 2 ms ran beside the fsdp stream.

    >>> from autoshard.planning.record import CollectiveRecord
    >>> steps = (CollectiveRecord(kind="reduce_scatter", axes=("fsdp",), group_size=4,
    ...                           bytes=1.0, seconds=3e-3),
    ...          CollectiveRecord(kind="all_reduce", axes=("dp",), group_size=2,
    ...                           bytes=1.0, seconds=2e-3))
    >>> record = ReshardRecord(tensor="g", producer="bwd/w", consumer="opt/w", src=(), dst=(),
    ...                        collectives=steps, overlap="op bwd/w")
    >>> round(concurrent_seconds([record], 1) * 1e3, 9)
    2.0
    """
    total = 0.0
    windows: dict[str, list[ReshardRecord]] = {}
    for record in reshards:
        if record.overlap.startswith("layer "):
            windows.setdefault(record.overlap, []).append(record)
        elif record.overlap.startswith("op "):
            total += record.count * _beside([record])
    for records in windows.values():
        every = [r for r in records if r.count == micro_batches]
        total += (micro_batches - 1) * _beside(every) + _beside(records)
    return total


def beside_seconds(record: ReshardRecord) -> float:
    """Seconds of one run of ``record`` that ran beside its busiest axis, on another: those
    of a reshard hidden behind one op (``op ...``); an exposed reshard runs its steps one after
    another, and one pooled in a layer window is counted with its window
    (:func:`concurrent_seconds`)."""
    return _beside([record]) if record.overlap.startswith("op ") else 0.0


def _beside(records: list[ReshardRecord]) -> float:
    """Collective seconds of ``records`` run together (each collective once) less their
    busiest axis's stream."""
    streams: dict[str, float] = {}
    collectives = 0.0
    for record in records:
        collectives += sum(c.seconds for c in record.collectives if c.kind not in LOCAL_KINDS)
        for axis, seconds in axis_seconds(record).items():
            streams[axis] = streams.get(axis, 0.0) + seconds
    return max(collectives - max(streams.values(), default=0.0), 0.0)


__all__ = ["beside_seconds", "concurrent_seconds"]
