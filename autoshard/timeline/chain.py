"""Where the steps of one overlapped reshard run: pipelined across mesh axes, inside the time
the model prices.

The op and layer overlap models price a reshard hidden beside compute by its busiest axis
(:mod:`autoshard.planning.step_parts`): its steps are dependent (a gradient's all-reduce over
``dp`` reads the reduce-scatter over ``fsdp``), but frameworks bucket them, so bucket k's
``dp`` step runs while bucket k+1's ``fsdp`` step does, and the chain lasts about as long as
its busiest axis. Drawn as one slice per step, that is a staggered chain: each step starts no
earlier than the one before it and ends no earlier than it (its last bucket comes after the
previous step's), on its axes only when they are free. Worked example, reduce-scatter over
``fsdp`` 3 ms then all-reduce over ``dp`` 2 ms, from 0::

    fsdp  [0, 3]  reduce_scatter
    dp    [1, 3]  all_reduce       (ends with the step it depends on; span 3 ms = busiest axis)

Some chains cannot be drawn that way within the busiest axis's time (a short step between two
long ones on different axes: 2 ms, 1 ms, 2 ms; the middle one would have to run at half speed
over the whole window, which one slice per step cannot show). Those keep the start order only
and, failing that, run each axis's steps back to back from the start, which always fits (each
axis's total is at most the busiest; a step over two axes may then show at different times on
their two tracks); every placement keeps one axis to one step at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

from autoshard.planning.record import CollectiveRecord

SLACK = 1e-12  # relative: rounding in the sums the window is checked against


Chain = Sequence[CollectiveRecord]
Starts = list[dict[str, float]]  # per step of a chain: its start on each of its axes


def chain_starts(chains: Sequence[Chain], start_s: float) -> list[Starts]:
    """When each step of each chain (a reshard's non-local collectives, in order) starts on
    each of its axes, from ``start_s``: no axis runs two steps at once and every step ends by
    ``start_s`` plus the busiest axis's seconds over all the chains (one reshard hidden behind
    an op, or a layer window's). Chains are independent of each other; see the module
    docstring for the order of preference within one.

    >>> from autoshard.planning.record import CollectiveRecord as C
    >>> chain = [C(kind="reduce_scatter", axes=("fsdp",), group_size=4, bytes=1.0, seconds=3.0),
    ...          C(kind="all_reduce", axes=("dp",), group_size=2, bytes=1.0, seconds=2.0)]
    >>> chain_starts([chain], 0.0)
    [[{'fsdp': 0.0}, {'dp': 1.0}]]
    """
    busy: dict[str, float] = {}
    for chain in chains:
        for step in chain:
            for axis in step.axes:
                busy[axis] = busy.get(axis, 0.0) + step.seconds
    window = max(busy.values(), default=0.0)
    limit = start_s + window + SLACK * max(abs(start_s) + window, 1e-300)
    for ends_in_order in (True, False):
        free: dict[str, float] = {}
        placed = [_ordered(chain, start_s, free, ends_in_order=ends_in_order)
                  for chain in chains]
        if all(s + step.seconds <= limit for chain, starts in zip(chains, placed, strict=True)
               for s, step in zip(starts, chain, strict=True)):
            return [[dict.fromkeys(step.axes, s) for s, step in zip(starts, chain, strict=True)]
                    for chain, starts in zip(chains, placed, strict=True)]
    free = {}
    return [_per_axis(chain, start_s, free) for chain in chains]


def _ordered(chain: Chain, start_s: float, free: dict[str, float], *, ends_in_order: bool
             ) -> list[float]:
    """Each step as early as all its axes are free (``free``, updated), no earlier than the
    step before it started and, with ``ends_in_order``, so that it ends no earlier than it."""
    starts: list[float] = []
    before_start = before_end = start_s
    for step in chain:
        begin = max(before_start, *(free.get(axis, start_s) for axis in step.axes))
        if ends_in_order:
            begin = max(begin, before_end - step.seconds)
        starts.append(begin)
        before_start, before_end = begin, begin + step.seconds
        for axis in step.axes:
            free[axis] = before_end
    return starts


def _per_axis(chain: Chain, start_s: float, free: dict[str, float]) -> Starts:
    """Every axis's steps back to back from ``start_s`` (``free``, updated), each axis on its
    own: a step over two axes may show at different times on their tracks (the model charges
    each axis its share, not the two at once), and no axis ends after its total, at most the
    busiest axis's."""
    starts = []
    for step in chain:
        starts.append({axis: free.get(axis, start_s) for axis in step.axes})
        for axis in step.axes:
            free[axis] = free.get(axis, start_s) + step.seconds
    return starts


__all__ = ["Chain", "Starts", "chain_starts"]
