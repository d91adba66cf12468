"""Timed slices as a Chrome trace (the Trace Event Format), which Perfetto and chrome://tracing
open.

The format (Google's "Trace Event Format" document, docs/sources.md) in the JSON Object form:
``{"traceEvents": [...], "otherData": {...}}``. Every slice is a complete event (``"ph": "X"``
with ``name``, ``cat``, ``ts``, ``dur``, ``pid``, ``tid``, ``args``; times in microseconds);
each track is a thread of a process, named by metadata events (``"ph": "M"``:
``process_name``, ``thread_name`` and their ``*_sort_index``, which keep the tracks in the
timeline's order).

Times are written at 1 ns resolution, each slice's start and end rounded from the same
seconds, so slices that touch in the timeline touch in the file and nesting survives. Perfetto
reads ``ts`` and ``dur`` into integer nanoseconds two ways (google/perfetto
``src/trace_processor/importers/json/json_utils.cc`` ``CoerceToTs`` at
``54f9b3fc4aad6667a9c24604c8abb531ba310eef``): ``ts`` from the number's text, its decimal
digits shifted three places and cut (``json_trace_tokenizer.cc`` at
``692321f26216e7db4f04c9c19149a21082f854d8``), ``dur`` from the parsed double as
``int64(dur · 1000.0)``, cut toward zero (``json_trace_parser_impl.cc`` at
``74fbed7d43de71e92e8042f931c76a2662554efc``). :func:`microseconds` writes each value so that
both readings give the same nanoseconds. Slices of one thread that overlap without nesting
cannot all be shown; the schedules here never put two slices on one axis at once (each axis is
one stream), but should any slices overlap (a hand-made timeline), the track gets a second
lane, a thread named ``dp #2``, rather than a file that hides one of them.

:func:`trace_events` takes any slices and tracks: a schedule of several pipeline stages (one
process each) writes through it unchanged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autoshard.planning.record import Plan
from autoshard.timeline.pipeline import pipeline_timeline
from autoshard.timeline.schedule import DRAWN_MICRO_BATCHES, step_timeline
from autoshard.timeline.slices import Slice, Timeline, Track

NS_PER_S = 1_000_000_000


def trace_events(slices: Sequence[Slice], tracks: Sequence[Track]) -> list[dict[str, Any]]:
    """Metadata events naming every process and thread, then one complete event per slice
    (sorted by start, then process and thread): deterministic for the same slices."""
    order = list(dict.fromkeys([*tracks, *sorted({s.track for s in slices} - set(tracks))]))
    timed = [(_ns(s.start_s), _ns(s.end_s), index, s) for index, s in enumerate(slices)]
    lanes = {track: _lanes([t for t in timed if t[3].track == track]) for track in order}
    pids = {process: i + 1 for i, process in enumerate(dict.fromkeys(t.process for t in order))}
    tids: dict[tuple[Track, int], int] = {}
    meta: list[dict[str, Any]] = []
    for process, pid in pids.items():
        meta.append(_meta("process_name", pid, None, {"name": process}))
        meta.append(_meta("process_sort_index", pid, None, {"sort_index": pid}))
    for track in order:
        pid = pids[track.process]
        for lane in range(max(lanes[track].values(), default=0) + 1):
            tid = 1 + sum(1 for key in tids if key[0].process == track.process)
            tids[(track, lane)] = tid
            name = track.thread if lane == 0 else f"{track.thread} #{lane + 1}"
            meta.append(_meta("thread_name", pid, tid, {"name": name}))
            meta.append(_meta("thread_sort_index", pid, tid, {"sort_index": tid}))
    events = []
    for start, end, index, piece in timed:
        pid = pids[piece.track.process]
        tid = tids[(piece.track, lanes[piece.track][index])]
        events.append(((start, pid, tid, index), {
            "name": piece.name, "cat": piece.category.value, "ph": "X", "ts": microseconds(start),
            "dur": microseconds(end - start), "pid": pid, "tid": tid, "args": dict(piece.args)}))
    events.sort(key=lambda pair: pair[0])
    return meta + [event for _, event in events]


def chrome_trace(timeline: Timeline) -> dict[str, Any]:
    """The timeline as a Trace Event Format JSON object."""
    return {"traceEvents": trace_events(timeline.slices, timeline.tracks),
            "otherData": {**timeline.metadata, "end_us": microseconds(_ns(timeline.end_s)),
                          "resolution_ns": 1}}


def trace_json(timeline: Timeline) -> str:
    """The trace as text: one event per line, the same bytes for the same timeline."""
    trace = chrome_trace(timeline)
    events = ",\n".join(json.dumps(e, separators=(",", ":")) for e in trace["traceEvents"])
    other = json.dumps(trace["otherData"], separators=(",", ":"))
    return f'{{"traceEvents":[\n{events}\n],\n"otherData":{other}}}\n'


def write_trace(plan: Plan, path: str | Path,
                drawn: int | None = DRAWN_MICRO_BATCHES) -> Timeline:
    """Lay out ``plan``'s step and write it to ``path`` (making its directory) as a Chrome
    trace; return the timeline. ``drawn``: alike micro-batches drawn slice by slice before
    the rest repeat as one block (None: all; :func:`~autoshard.timeline.schedule.
    step_timeline`)."""
    timeline = pipeline_timeline(plan) if plan.pipeline else step_timeline(plan, drawn)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(trace_json(timeline))
    return timeline


def _ns(seconds: float) -> int:
    return round(seconds * NS_PER_S)


def microseconds(ns: int) -> float:
    """``ns`` nanoseconds as the microseconds a trace holds, read back as ``ns`` both by the
    number's digits and by ``int(x · 1000.0)``: the double nearest ``ns / 1000`` when its
    product is not below ``ns`` (about 99 % of values), else the next doubles up, whose extra
    digits the digit reading cuts off.

    >>> microseconds(686244), microseconds(7)
    (686.244, 0.007)
    >>> 1.001 * 1000.0
    1000.9999999999999
    >>> microseconds(1001)
    1.0010000000000001
    """
    value = ns / 1000
    while int(value * 1000.0) < ns:
        value = math.nextafter(value, math.inf)
    return value


def _lanes(timed: list[tuple[int, int, int, Slice]]) -> dict[int, int]:
    """Lane per slice (by layout index) so that no lane holds two slices that overlap:
    the first lane free by the slice's start, in start order."""
    ends: list[int] = []
    lane_of: dict[int, int] = {}
    for start, end, index, _ in sorted(timed, key=lambda t: (t[0], t[1], t[2])):
        lane = next((k for k, free in enumerate(ends) if free <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
        ends[lane] = end
        lane_of[index] = lane
    return lane_of


def _meta(name: str, pid: int, tid: int | None, args: dict[str, Any]) -> dict[str, Any]:
    event: dict[str, Any] = {"name": name, "ph": "M", "pid": pid}
    if tid is not None:
        event["tid"] = tid
    event["args"] = args
    return event


__all__ = ["NS_PER_S", "chrome_trace", "microseconds", "trace_events", "trace_json", "write_trace"]
