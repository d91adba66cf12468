"""``sweep.csv``: one tidy row per point, safe to interrupt and to resume.

Rows are appended and flushed as points finish, the header is written once, so Ctrl-C leaves
every finished point on disk. Reading tolerates a half-written last line and duplicate rows
(the last row of a point wins). At the end the file is rewritten, sorted by a key made of the
point's fields, through a temporary file and an atomic rename: the final CSV does not depend on
``-j`` or on completion order. Floats are written with ``repr`` so they read back exactly.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

logger = logging.getLogger(__name__)

COLUMNS = (
    "point", "model", "mode", "devices", "axes", "mesh", "topology", "links", "batch", "seq",
    "training", "total_s", "compute_s", "comm_s", "hidden_s", "concurrent_s", "bubble_s",
    "comm_share", "tokens_per_s", "peak_bytes_per_device", "limit_bytes", "feasible",
    "optimal", "gap", "status", "top_collective", "top_collective_axes", "top_collective_s",
    "solve_s", "wall_s", "plan", "error_kind", "error", "micro_batch", "schedule",
    "micro_batches", "bubble_fraction",
)
"""Column order of ``sweep.csv``. ``total_s = compute_s + comm_s - hidden_s - concurrent_s +
bubble_s`` (communication hidden behind compute, and beside another mesh axis's; a pipelined
point's idle time, its parts those of the stage that finishes last); ``comm_share`` is the
exposed communication's share of the step. ``tokens_per_s`` is the whole mesh's (all
``devices`` together); ``autoshard plan`` states it per device, ``tokens_per_s / devices``.
``peak_bytes_per_device`` of a point infeasible for memory is the smallest peak any plan
needs; ``plan`` is relative to the sweep directory. Pipelined points (a ``pp`` axis) fill
the last four: samples per micro-batch and replica, the schedule, micro-batches per step and
the simulated step's bubble fraction; ``total_s`` is then the simulated step."""

TIMING_COLUMNS = ("solve_s", "wall_s")
"""Columns measured in wall-clock time: they differ between two runs of the same sweep."""

CSV_NAME = "sweep.csv"


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def read_rows(path: Path) -> dict[str, dict[str, str]]:
    """Rows of an existing ``sweep.csv`` by point id; incomplete or foreign rows are dropped."""
    if not path.exists():
        return {}
    rows: dict[str, dict[str, str]] = {}
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            logger.warning("%s has other columns than this version writes; its rows are "
                           "recomputed", path)
            return {}
        for row in reader:
            if None in row or any(row.get(c) is None for c in COLUMNS) or not row["point"]:
                continue  # a line cut short by an interrupted write
            rows[row["point"]] = {c: row[c] for c in COLUMNS}
    return rows


def sort_key(row: Mapping[str, str]) -> tuple[Any, ...]:
    """Stable order: model, mode, batch, seq, topology, links, devices, axes, mesh sizes."""
    sizes = tuple(int(part.partition("=")[2] or 0) for part in row["mesh"].split(","))
    return (row["model"], row["mode"], _int(row["batch"]), _int(row["seq"]), row["topology"],
            row["links"], _int(row["devices"]), _int(row["axes"]), sizes, row["point"])


def _int(text: str) -> int:
    return int(text) if text.strip().lstrip("-").isdigit() else -1


def write_sorted(path: Path, rows: Iterable[Mapping[str, str]]) -> list[dict[str, str]]:
    """Rewrite ``path`` with ``rows`` sorted by :func:`sort_key`, atomically."""
    ordered = sorted(({c: row[c] for c in COLUMNS} for row in rows), key=sort_key)
    temporary = path.with_name(path.name + ".tmp")
    with temporary.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(ordered)
    os.replace(temporary, path)
    return ordered


class RowAppender:
    """Append rows to ``sweep.csv`` one at a time, flushed, with the header written once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: TextIO | None = None
        self._writer: Any = None

    def __enter__(self) -> RowAppender:
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._handle = self.path.open("a", newline="")
        self._writer = csv.DictWriter(self._handle, fieldnames=COLUMNS, lineterminator="\n")
        if fresh:
            self._writer.writeheader()
            self._handle.flush()
        return self

    def append(self, row: Mapping[str, Any]) -> dict[str, str]:
        if self._handle is None:
            raise AssertionError("RowAppender.append outside its with-block")
        text = {c: cell(row.get(c)) for c in COLUMNS}
        self._writer.writerow(text)
        self._handle.flush()
        return text

    def __exit__(self, *exc_info: Any) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
