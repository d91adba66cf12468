"""The published training runs of ``autoshard bench fidelity``, read from ``measured.csv``.

Why a typed row: the CSV keeps every figure as published (its unit beside it, empty cells where
the source states nothing), and the bench must tell "not stated" from "zero" and convert units
in one place. :func:`read_measured` turns each CSV line into a :class:`MeasuredRow`; a malformed
file raises :class:`~autoshard.errors.UsageError` naming the row and column.

Columns (one line per published figure; ``results/fidelity/README.md`` describes the sources):
``row_id source_id table framework model params gpu gpus interconnect dp dp_sharding tp pp cp ep
vp micro_batch global_batch grad_accum seq recompute precision features measured unit
memory_gib derived source notes``. ``features`` is a ``;``-separated list; ``derived`` names the
cells taken from the source's configuration or arithmetic rather than from its table.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from autoshard.errors import UsageError

COLUMNS = ("row_id", "source_id", "table", "framework", "model", "params", "gpu", "gpus",
           "interconnect", "dp", "dp_sharding", "tp", "pp", "cp", "ep", "vp", "micro_batch",
           "global_batch", "grad_accum", "seq", "recompute", "precision", "features",
           "measured", "unit", "memory_gib", "derived", "source", "notes")
_INTS = ("params", "gpus", "dp", "tp", "pp", "cp", "ep", "vp", "micro_batch", "global_batch",
         "grad_accum", "seq")
_FLOATS = ("measured", "memory_gib")
TOKENS_PER_S_PER_GPU = "tokens/s/GPU"
UNITS = (TOKENS_PER_S_PER_GPU, "TFLOP/s/GPU")
"""Units the file may use; only tokens per second per GPU is compared (a model-FLOPs figure
would need the source's own FLOP count, which differs between frameworks)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredRow:
    """One published measurement and the setup its source states (None: not stated)."""

    row_id: str
    source_id: str
    table: str
    framework: str
    model: str
    gpu: str
    interconnect: str
    dp_sharding: str
    recompute: str
    precision: str
    features: tuple[str, ...]
    unit: str
    source: str
    params: int | None = None
    gpus: int | None = None
    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    ep: int | None = None
    vp: int | None = None
    micro_batch: int | None = None
    global_batch: int | None = None
    grad_accum: int | None = None
    seq: int | None = None
    measured: float = 0.0
    memory_gib: float | None = None

    def degree(self, name: str) -> int:
        """A parallel degree (tp, pp, cp, ep), 1 when the source leaves it empty."""
        value = getattr(self, name)
        return 1 if value is None else int(value)


def read_measured(path: Path) -> list[MeasuredRow]:
    """Every row of ``path`` in file order.

    Raises:
        UsageError: a missing file or column, a duplicate row id, a number that does not
            parse, or a unit outside :data:`UNITS`.
    """
    if not path.is_file():
        raise UsageError(f"the measured runs file {path} does not exist; pass the repository's "
                         "results/fidelity/measured.csv")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise UsageError(f"{path} lacks the column(s) {', '.join(missing)}; its header must "
                             f"be {','.join(COLUMNS)}")
        rows = [_row(line, path, number) for number, line in enumerate(reader, start=2)]
    seen: set[str] = set()
    for row in rows:
        if row.row_id in seen:
            raise UsageError(f"{path}: row id {row.row_id} appears twice; give each row its own id")
        seen.add(row.row_id)
    return rows


def _row(line: dict[str, str], path: Path, number: int) -> MeasuredRow:
    values: dict[str, object] = {}
    for column in COLUMNS:
        text = (line.get(column) or "").strip()
        if column in _INTS:
            values[column] = _number(text, int, path, number, column)
        elif column in _FLOATS:
            values[column] = _number(text, float, path, number, column)
        elif column == "features":
            values[column] = tuple(f.strip() for f in text.split(";") if f.strip())
        elif column not in ("derived", "notes"):
            values[column] = text
    if not values["row_id"]:
        raise UsageError(f"{path} line {number}: empty row_id; give every row an id")
    if values["measured"] is None or values["unit"] not in UNITS:
        raise UsageError(f"{path} line {number} ({values['row_id']}): needs a measured figure "
                         f"and a unit among {', '.join(UNITS)}, got {values['measured']!r} "
                         f"{values['unit']!r}")
    return MeasuredRow(**values)  # type: ignore[arg-type]


def _number(text: str, kind: type, path: Path, number: int, column: str) -> int | float | None:
    if text in ("", "n/a"):
        return None
    try:
        return kind(text)
    except ValueError:
        raise UsageError(f"{path} line {number}: column {column} holds {text!r}, not a "
                         f"{'whole number' if kind is int else 'number'}; fix the cell or leave "
                         "it empty") from None
