"""A reader of Chrome trace files written from the format's documents, not from our writer.

Rules, with where they come from:

* Google, "Trace Event Format" (the Catapult trace viewer's format document,
  https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU): the JSON
  Object Format is an object whose ``traceEvents`` holds the events (``displayTimeUnit``,
  ``otherData`` and a few more keys are optional); every event has ``name``, ``ph`` (one
  character), ``pid``; a complete event (``ph == "X"``) has ``ts`` and ``dur`` in
  microseconds and ``tid``, optional ``cat`` (a string) and ``args`` (an object); metadata
  events (``ph == "M"``) are named ``process_name``, ``process_labels``,
  ``process_sort_index``, ``thread_name`` or ``thread_sort_index``, carry ``args.name``
  (a string), ``args.labels`` or ``args.sort_index`` (an integer), and the thread ones a
  ``tid``.
* Perfetto's JSON importer (google/perfetto, ``src/trace_processor/importers/json/``):
  ``ts`` becomes integer nanoseconds from the number's text, its decimal digits shifted three
  places and cut (``json_trace_tokenizer.cc`` at ``692321f26216e7db4f04c9c19149a21082f854d8``
  passes the raw text to ``CoerceToTs(const std::string&)`` in ``json_utils.cc`` at
  ``54f9b3fc4aad6667a9c24604c8abb531ba310eef``); ``dur`` from the parsed double,
  ``static_cast<int64_t>(dur * 1000.0)`` (``json_trace_parser_impl.cc`` at
  ``74fbed7d43de71e92e8042f931c76a2662554efc`` calls ``CoerceToTs(value["dur"])``); a
  missing ``tid`` means the pid; slices of one thread must nest: two that overlap without one
  containing the other cannot both be shown.

:func:`read_trace` checks all of that and returns the complete events with integer
nanosecond times and their thread names, so tests can ask questions of the file itself.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OPTIONAL_TOP_KEYS = {"displayTimeUnit", "systemTraceEvents", "otherData", "stackFrames",
                     "samples", "metadata"}
METADATA_ARGS = {"process_name": ("name", str), "process_labels": ("labels", str),
                 "process_sort_index": ("sort_index", int), "thread_name": ("name", str),
                 "thread_sort_index": ("sort_index", int)}


@dataclass(frozen=True)
class Event:
    """One complete event: times in integer nanoseconds, as Perfetto stores them."""

    name: str
    cat: str
    start_ns: int
    end_ns: int
    process: str
    thread: str
    args: dict[str, Any]

    def overlaps(self, other: Event) -> bool:
        """Whether the two intervals share more than an end point."""
        return self.start_ns < other.end_ns and other.start_ns < self.end_ns


@dataclass(frozen=True)
class Trace:
    events: list[Event]
    other: dict[str, Any]

    def on(self, thread: str) -> list[Event]:
        return [e for e in self.events if e.thread == thread]

    @property
    def end_ns(self) -> int:
        return max(e.end_ns for e in self.events)


def read_trace(path: str | Path) -> Trace:
    """Parse and check one trace file (AssertionError naming the first rule broken)."""
    data = json.loads(Path(path).read_text(), parse_float=Number)
    assert isinstance(data, dict), "the JSON Object Format is an object"
    assert isinstance(data.get("traceEvents"), list), "traceEvents must be a list"
    assert set(data) - {"traceEvents"} <= OPTIONAL_TOP_KEYS, set(data)
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    complete = []
    for event in data["traceEvents"]:
        assert isinstance(event, dict) and isinstance(event.get("name"), str), event
        assert isinstance(event.get("ph"), str) and len(event["ph"]) == 1, event
        assert isinstance(event.get("pid"), int), event
        if event["ph"] == "M":
            _metadata(event, processes, threads)
        elif event["ph"] == "X":
            complete.append(_complete(event))
        else:
            raise AssertionError(f"unexpected phase {event['ph']!r}")
    events = []
    for raw, start, end in complete:
        key = (raw["pid"], raw["tid"] or raw["pid"])
        assert key in threads, f"thread {key} has no thread_name"
        assert raw["pid"] in processes, f"process {raw['pid']} has no process_name"
        events.append(Event(name=raw["name"], cat=raw.get("cat", ""), start_ns=start,
                            end_ns=end, process=processes[raw["pid"]], thread=threads[key],
                            args=raw.get("args", {})))
    _check_nesting(events)
    return Trace(events=events, other=data.get("otherData", {}))


def _metadata(event: dict, processes: dict[int, str], threads: dict) -> None:
    assert event["name"] in METADATA_ARGS, event
    key, kind = METADATA_ARGS[event["name"]]
    assert isinstance(event.get("args"), dict) and isinstance(event["args"].get(key), kind), event
    if event["name"].startswith("thread_"):
        assert isinstance(event.get("tid"), int), event
    if event["name"] == "process_name":
        processes[event["pid"]] = event["args"]["name"]
    elif event["name"] == "thread_name":
        threads[(event["pid"], event["tid"] or event["pid"])] = event["args"]["name"]


def _complete(event: dict) -> tuple[dict, int, int]:
    for key in ("ts", "dur"):
        value = event.get(key)
        assert isinstance(value, int | float) and math.isfinite(value) and value >= 0, event
    assert isinstance(event.get("tid"), int), event
    assert isinstance(event.get("cat", ""), str), event
    assert isinstance(event.get("args", {}), dict), event
    start, dur = _digits_ns(event["ts"]), _double_ns(event["dur"])
    # a file that reads the same both ways does not depend on the Perfetto version
    assert (_double_ns(event["ts"]), _digits_ns(event["dur"])) == (start, dur), event
    return event, start, start + dur


class Number(float):
    """A JSON number that keeps its text (``json.loads(parse_float=...)``)."""

    text: str

    def __new__(cls, text: str) -> Number:
        number = super().__new__(cls, text)
        number.text = text
        return number


def _digits_ns(value: int | float) -> int:
    """Perfetto's ``CoerceToTs(std::string)``: drop the exponent into the shift, remove the
    decimal point, keep ``integer digits + exponent + 3`` digits (padding with zeros)."""
    text = value.text if isinstance(value, Number) else str(value)
    mantissa, _, exponent = text.lower().partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    keep = max(1, len(whole) + int(exponent or 0) + 3)
    return int(digits[:keep].ljust(keep, "0"))


def _double_ns(value: int | float) -> int:
    """Perfetto's ``CoerceToTs(Json::Value)``: integers times 1000, reals
    ``static_cast<int64_t>(value * 1000.0)`` (toward zero)."""
    return int(value) * 1000 if isinstance(value, int) else int(float(value) * 1000.0)


def _check_nesting(events: list[Event]) -> None:
    by_thread: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for event in events:
        by_thread[(event.process, event.thread)].append(event)
    for key, group in by_thread.items():
        group = sorted(group, key=lambda e: (e.start_ns, -e.end_ns))
        open_ends: list[int] = []
        for event in group:
            while open_ends and open_ends[-1] <= event.start_ns:
                open_ends.pop()
            assert not open_ends or event.end_ns <= open_ends[-1], \
                f"{event.name} overlaps an earlier slice on {key} without nesting"
            open_ends.append(event.end_ns)
