"""Matmul benchmark tables: the CSV ``autoshard calibrate --matmul`` fits the GEMM model to.

Why: the GEMM model's ceiling, small-K penalty and launch floor are properties of a machine and
its BLAS; a table of measured matmuls is the user's own evidence, as nccl-tests tables are for
collectives. The format is plain CSV so any benchmark script can write it:

- lines starting with ``#`` are comments (put the provenance there); blank lines are skipped;
- the first other line is the header; column names are case-insensitive, in any order:
  ``m``, ``n``, ``k`` (positive integers: an (m × k) @ (k × n) product), ``dtype`` ("bf16",
  "f16", "f32", "f8e4m3", …: the operands' type), optional ``batch`` (independent products,
  default 1), and exactly one measure: ``tflops`` (10¹² FLOP/s), ``flops_per_s`` or
  ``seconds`` (one product's time), with FLOPs counted as ``2·batch·m·n·k``;
- no other columns (a misspelt one would silently be ignored otherwise).

Example::

    # H100 SXM5, torch 2.4 + cuBLAS 12.4, mean of 100 runs after 10 warm-up
    m,n,k,dtype,tflops
    4096,4096,4096,bf16,762.1
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
from dataclasses import dataclass

from costmodel.errors import MatmulTableError
from costmodel.kernels import Gemm

logger = logging.getLogger(__name__)

MEASURES = ("tflops", "flops_per_s", "seconds")
COLUMNS = ("batch", "m", "n", "k", "dtype", *MEASURES)


@dataclass(frozen=True, slots=True)
class MatmulRow:
    """One measured product: its shape, dtype and seconds."""

    gemm: Gemm
    dtype: str
    seconds: float

    @property
    def tflops(self) -> float:
        return self.gemm.flops / self.seconds / 1e12


@dataclass(frozen=True, slots=True)
class MatmulTable:
    """A parsed table: its name (the file) and rows in file order."""

    name: str
    rows: tuple[MatmulRow, ...]


def _header(reader: csv.reader, source: str) -> tuple[list[str], int]:
    for line, cells in enumerate(reader, start=1):
        if not cells or not "".join(cells).strip() or cells[0].lstrip().startswith("#"):
            continue
        names = [cell.strip().lower() for cell in cells]
        unknown = [name for name in names if name not in COLUMNS]
        if unknown:
            raise MatmulTableError(source, line, f"unknown column(s) {', '.join(unknown)}; "
                                   f"accepted: {', '.join(COLUMNS)}")
        measures = [name for name in names if name in MEASURES]
        missing = [name for name in ("m", "n", "k", "dtype") if name not in names]
        if missing or len(measures) != 1:
            raise MatmulTableError(source, line, "the header needs m, n, k, dtype and exactly "
                                   f"one of {', '.join(MEASURES)} (got {', '.join(names)})")
        return names, line
    raise MatmulTableError(source, 0, "no header line (m,n,k,dtype,tflops): the table is empty")


def _row(values: dict[str, str], source: str, line: int) -> MatmulRow:
    try:
        dims = {key: int(values.get(key, "1").strip()) for key in ("batch", "m", "n", "k")}
        gemm = Gemm(**dims)
    except ValueError as exc:
        raise MatmulTableError(source, line, f"batch, m, n and k must be positive integers "
                               f"({exc})") from None
    measure = next(name for name in MEASURES if name in values)
    try:
        value = float(values[measure])
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise MatmulTableError(source, line, f"{measure} = {values[measure]!r} must be a "
                               "positive number")
    seconds = {"seconds": value, "tflops": gemm.flops / (value * 1e12),
               "flops_per_s": gemm.flops / value}[measure]
    dtype = values["dtype"].strip().lower()
    if not dtype:
        raise MatmulTableError(source, line, "dtype is empty")
    return MatmulRow(gemm=gemm, dtype=dtype, seconds=seconds)


def parse_matmul_table(text: str, source: str = "<string>") -> MatmulTable:
    """Parse a matmul table (module docstring); ``source`` names it in errors.

    Raises:
        MatmulTableError: no header, unknown or missing column, a bad value, no rows.

    Example:
        >>> table = parse_matmul_table("m,n,k,dtype,seconds\\n1024,1024,1024,bf16,1e-5\\n")
        >>> round(table.rows[0].tflops, 1)
        214.7
    """
    reader = csv.reader(io.StringIO(text))
    names, header_line = _header(reader, source)
    rows = []
    for line, cells in enumerate(reader, start=header_line + 1):
        if not cells or not "".join(cells).strip() or cells[0].lstrip().startswith("#"):
            continue
        if len(cells) != len(names):
            raise MatmulTableError(source, line, f"{len(cells)} cells, the header has "
                                   f"{len(names)}")
        rows.append(_row(dict(zip(names, cells, strict=True)), source, line))
    if not rows:
        raise MatmulTableError(source, 0, "the table has a header but no rows")
    return MatmulTable(name=os.path.basename(source), rows=tuple(rows))


def read_matmul_table(path: str | os.PathLike[str]) -> MatmulTable:
    """Read and parse a matmul table file.

    Raises:
        MatmulTableError: unreadable file, not UTF-8, or a parse error (file and line named).
    """
    source = os.fspath(path)
    try:
        with open(source, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise MatmulTableError(source, 0, f"cannot read the file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MatmulTableError(source, 0, "the file is not UTF-8 text") from None
    return parse_matmul_table(text, source)
