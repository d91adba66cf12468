"""Read nccl-tests output as people paste it into measured (collective, ranks, bytes, µs) tables.

Why: calibrating the collective model (:mod:`costmodel.calibrate`) needs measured times, and
the only measurements most users have are ``all_reduce_perf`` logs copied from a terminal, a
Slurm job or a vendor page. What this accepts (a contract):

- the nccl-tests row layout ``size count type redop [root] time algbw busbw #wrong time algbw
  busbw #wrong`` (out-of-place then in-place, ``doc/PERFORMANCE.md`` of NVIDIA/nccl-tests);
  per size the **smaller** of the two times is kept (both measure the same operation; the
  table says so in :attr:`NcclTable.column`);
- launcher prefixes on every line (``0: `` from ``srun --label``, ``[1,0]<stdout>:`` from
  ``mpirun --tag-output``), ``NCCL INFO``/``NCCL WARN`` log lines (skipped);
- the header ``# nThread …`` and ``#  Rank r Group g Pid p on HOST device d …`` lines: ranks
  (one line each) and nodes (distinct hosts) are read from them; without them the caller says
  ``nodes`` and ``gpus_per_node``; with both they must agree;
- several tables in one file (each ``# nThread`` or column-header line starts a new one);
- the collective from the ``*_perf`` program named in a comment line (``all_reduce_perf``,
  ``all_gather_perf``, ``reduce_scatter_perf``, ``alltoall_perf``, ``sendrecv_perf``, …),
  else from the file name, else from the caller;
- a *busbw-only* series (a Markdown table ``| size label | busbw GB/s |``, as vendor pages
  publish) when the file's comment header maps every size label to bytes
  (``## SIZE LABELS: 1K=1024, 65K=65536, …``). nccl-tests defines ``busbw = algbw × factor``
  and ``algbw = size / time``, so ``time = size × factor / busbw``; those times inherit the
  rounding of the printed busbw (``0.04`` GB/s is ±12.5 %), and :attr:`NcclTable.column`
  says they are derived.

Anything else — no table, an unknown line inside the data, sizes that do not increase,
non-positive times, a non-zero ``#wrong``, busbw/algbw that contradicts the collective and the
rank count, algbw that contradicts size/time — is one :class:`NcclTestsError` naming the file
and line.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field

from costmodel.errors import NcclTestsError
from costmodel.kinds import CollectiveKind
from costmodel.measured import bus_factor

logger = logging.getLogger(__name__)

PROGRAMS: dict[str, CollectiveKind] = {
    "all_reduce": CollectiveKind.ALL_REDUCE, "allreduce": CollectiveKind.ALL_REDUCE,
    "all_gather": CollectiveKind.ALL_GATHER, "allgather": CollectiveKind.ALL_GATHER,
    "reduce_scatter": CollectiveKind.REDUCE_SCATTER,
    "reducescatter": CollectiveKind.REDUCE_SCATTER,
    "alltoall": CollectiveKind.ALL_TO_ALL, "all_to_all": CollectiveKind.ALL_TO_ALL,
    "sendrecv": CollectiveKind.COLLECTIVE_PERMUTE, "broadcast": CollectiveKind.BROADCAST,
    "reduce": CollectiveKind.REDUCE,
}
"""nccl-tests program stems (``<stem>_perf``) and file-name tokens → collective."""

BEST_COLUMN = "min(out-of-place, in-place) time per size"
BUSBW_COLUMN = "in-place busbw only; time = size x bus factor / busbw (derived)"

_PREFIX = re.compile(r"^\s*(?:\d+:\s|\[\d+,\d+\]<std(?:out|err)>:\s?)")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")
_COLUMNS = re.compile(r"^#\s+size\s+count\s+type", re.IGNORECASE)
_PROGRAM = re.compile(r"\b([a-z_]+)_perf\b")
_LABELS = re.compile(r"\b(\d+(?:\.\d+)?[KMGT]?)=(\d+)\b")
_MD_ROW = re.compile(r"^\|\s*([0-9.]+[KMGT]?)\s*\|\s*([0-9.]+)\s*\|$")


@dataclass(frozen=True, slots=True)
class NcclTable:
    """One measured table: ``time_us[k]`` for ``nbytes[k]`` (nccl-tests' size convention).

    ``name`` labels it in reports (file name, ``#2`` for a file's second table); ``line`` is
    the line of its first row; ``column`` says which measurement ``time_us`` holds.
    """

    name: str
    source: str
    line: int
    collective: CollectiveKind
    ranks: int
    nodes: int
    nbytes: tuple[int, ...]
    time_us: tuple[float, ...]
    column: str

    @property
    def gpus_per_node(self) -> int:
        return self.ranks // self.nodes


@dataclass(slots=True)
class _Block:
    """A table being read: its header facts and rows so far."""

    line: int = 0
    hosts: dict[int, str] = field(default_factory=dict)
    program: CollectiveKind | None = None
    rows: list[tuple[int, int, float, float, float]] = field(default_factory=list)
    busbw: list[tuple[int, int, float]] = field(default_factory=list)


def read_nccl_tests(path: str | os.PathLike[str], **given: object) -> tuple[NcclTable, ...]:
    """Read every table of the nccl-tests output file ``path`` (see :func:`parse_nccl_tests`).

    Raises:
        NcclTestsError: unreadable file, or any problem :func:`parse_nccl_tests` reports.
    """
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise NcclTestsError(source, 0, f"cannot read the file: {exc}") from None
    return parse_nccl_tests(text, source, **given)  # type: ignore[arg-type]


def parse_nccl_tests(text: str, source: str = "<string>", *,
                     collective: CollectiveKind | str | None = None, nodes: int | None = None,
                     gpus_per_node: int | None = None) -> tuple[NcclTable, ...]:
    """The tables in ``text``; ``collective``, ``nodes`` and ``gpus_per_node`` fill what the
    text does not say (and must agree with what it does).

    Raises:
        NcclTestsError: naming ``source`` and the line (see the module docstring).

    Example:
        >>> text = '''#  Rank  0 Group  0 Pid 1 on a device  0 [0x0f] A100
        ... #  Rank  1 Group  0 Pid 2 on b device  0 [0x0f] A100
        ... #  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong
        ... 1048576 262144 float sum -1 100.0 10.49 10.49 0 98.00 10.70 10.70 0'''
        >>> table, = parse_nccl_tests(text, "x.txt", collective="all_reduce")
        >>> table.ranks, table.nodes, table.nbytes, table.time_us
        (2, 2, (1048576,), (98.0,))
    """
    wanted = CollectiveKind(collective) if collective is not None else None
    blocks: list[_Block] = []
    labels: dict[str, int] = {}
    current = _Block()
    program: CollectiveKind | None = None
    in_labels = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw, count=1).strip()
        if not line or "NCCL INFO" in line or "NCCL WARN" in line:
            continue
        if line.startswith("#"):
            program = _note_program(line, program)
            pairs = _LABELS.findall(line)
            in_labels = ("SIZE LABELS" in line or in_labels) and bool(pairs)
            labels.update({label: int(size) for label, size in pairs} if in_labels else {})
            current = _header_line(line, number, current, blocks, program, source)
            continue
        if current.program is None:
            current.program = program
        if not _data_line(line, number, current, labels, source) and not labels:
            # a page carrying a busbw-only series has prose and Markdown around it
            raise NcclTestsError(source, number, f"not a line of nccl-tests output: {raw!r}")
    blocks.append(current)
    tables = [t for t in (_finish(b, source, wanted, nodes, gpus_per_node) for b in blocks)
              if t is not None]
    if not tables:
        raise NcclTestsError(source, 0, "no nccl-tests table found (expected rows 'size count "
                                        "type redop root time algbw busbw #wrong …')")
    if len(tables) > 1:
        base = os.path.basename(source)
        tables = [_renamed(t, f"{base}#{k}") for k, t in enumerate(tables, start=1)]
    return tuple(tables)


def _renamed(table: NcclTable, name: str) -> NcclTable:
    return NcclTable(name=name, source=table.source, line=table.line,
                     collective=table.collective, ranks=table.ranks, nodes=table.nodes,
                     nbytes=table.nbytes, time_us=table.time_us, column=table.column)


def _note_program(line: str, program: CollectiveKind | None) -> CollectiveKind | None:
    for stem in _PROGRAM.findall(line.lower()):
        if stem in PROGRAMS:
            return PROGRAMS[stem]
    return program


def _header_line(line: str, number: int, current: _Block, blocks: list[_Block],
                 program: CollectiveKind | None, source: str) -> _Block:
    """Header lines: a new run (``# nThread``, column header) closes the current table."""
    starts_run = line.startswith("# nThread") or _COLUMNS.match(line) is not None
    if starts_run and (current.rows or current.busbw):
        blocks.append(current)
        current = _Block()
    if line.startswith("# nThread"):
        current.hosts = {}
    rank = _RANK.match(line)
    if rank is not None:
        current.hosts[int(rank.group(1))] = rank.group(2)
    if "FAILED" in line and "Out of bounds" in line:
        raise NcclTestsError(source, number, "nccl-tests reports out-of-bounds values "
                                             "(a failed run): its times are not usable")
    if not (current.rows or current.busbw):
        current.program = program
    return current


def _data_line(line: str, number: int, block: _Block, labels: dict[str, int],
               source: str) -> bool:
    """Parse one data line into ``block``; False when it is not a data line at all."""
    markdown = _MD_ROW.match(line)
    if markdown is not None:
        label, value = markdown.groups()
        if label not in labels:
            raise NcclTestsError(source, number, f"busbw-only row: size label {label!r} has no "
                                 "byte count; the header must map it ('## SIZE LABELS: "
                                 f"{label}=BYTES, …')")
        block.line = block.line or number
        block.busbw.append((number, labels[label], _positive(value, number, source, "busbw")))
        return True
    fields = line.split()
    if len(fields) < 10 or not (fields[0].isdigit() and fields[1].isdigit()):
        return False
    size = int(fields[0])
    times, algbws, busbws = [], [], []
    for offset in (-8, -4):
        time, algbw, busbw, wrong = fields[offset:offset + 4 or None]
        times.append(_positive(time, number, source, "time"))
        algbws.append(_number(algbw, number, source, "algbw"))
        busbws.append(_number(busbw, number, source, "busbw"))
        if wrong not in ("0", "N/A") and _number(wrong, number, source, "#wrong") != 0:
            raise NcclTestsError(source, number, f"#wrong = {wrong}: nccl-tests found wrong "
                                 "results on this row, so the run is not trustworthy")
    best = 0 if times[0] <= times[1] else 1
    block.line = block.line or number
    block.rows.append((number, size, times[best], algbws[best], busbws[best]))
    return True


def _number(text: str, number: int, source: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise NcclTestsError(source, number, f"{what} {text!r} is not a number") from None


def _positive(text: str, number: int, source: str, what: str) -> float:
    value = _number(text, number, source, what)
    if not value > 0:
        raise NcclTestsError(source, number, f"{what} = {text} must be positive")
    return value


def _finish(block: _Block, source: str, wanted: CollectiveKind | None, nodes: int | None,
            gpus_per_node: int | None) -> NcclTable | None:
    """Check one block and turn it into a table (None for a header with no rows)."""
    if not block.rows and not block.busbw:
        return None
    kind = wanted or block.program or _kind_from_name(source)
    if kind is None:
        raise NcclTestsError(source, block.line, "cannot tell which collective this table "
                             "measures (no '<name>_perf' line, no collective in the file name): "
                             "name it (all_reduce, all_gather, reduce_scatter, alltoall, "
                             "sendrecv)")
    if wanted is not None and block.program is not None and block.program is not wanted:
        raise NcclTestsError(source, block.line, f"the file says {block.program.value}, but "
                             f"{wanted.value} was asked for")
    ranks, node_count = _ranks_and_nodes(block, source, nodes, gpus_per_node)
    factor = bus_factor(kind, ranks)
    if block.busbw:
        rows = [(number, size, size * factor / (busbw * 1e3)) for number, size, busbw
                in block.busbw]
        column = BUSBW_COLUMN
    else:
        for number, size, time, algbw, busbw in block.rows:
            _check_bandwidths(source, number, size, time, algbw, busbw, kind, ranks, factor)
        rows = [(number, size, time) for number, size, time, _, _ in block.rows]
        column = BEST_COLUMN
    previous = -1
    for number, size, _ in rows:
        if size <= previous:
            raise NcclTestsError(source, number, f"size {size} does not increase (previous "
                                                 f"{previous}): one table per run, please")
        previous = size
    return NcclTable(name=os.path.basename(source), source=source, line=block.line,
                     collective=kind, ranks=ranks, nodes=node_count,
                     nbytes=tuple(size for _, size, _ in rows),
                     time_us=tuple(time for _, _, time in rows), column=column)


def _kind_from_name(source: str) -> CollectiveKind | None:
    tokens = re.split(r"[^a-z_]+", os.path.basename(source).lower().replace("-", "_"))
    stems = [stem for token in tokens for stem in PROGRAMS if stem in token]
    return PROGRAMS[max(stems, key=len)] if stems else None


def _ranks_and_nodes(block: _Block, source: str, nodes: int | None,
                     gpus_per_node: int | None) -> tuple[int, int]:
    given = None
    if nodes is not None or gpus_per_node is not None:
        if nodes is None or gpus_per_node is None or nodes < 1 or gpus_per_node < 1:
            raise NcclTestsError(source, block.line, "give both nodes and gpus per node, "
                                 f"each ≥ 1 (got {nodes} and {gpus_per_node})")
        given = (nodes * gpus_per_node, nodes)
    if block.hosts:
        found = (len(block.hosts), len(set(block.hosts.values())))
        if given is not None and given != found:
            raise NcclTestsError(source, block.line, f"the header lists {found[0]} ranks on "
                                 f"{found[1]} hosts, but {given[0]} ranks on {given[1]} nodes "
                                 "were given")
        if found[0] % found[1]:
            raise NcclTestsError(source, block.line, f"{found[0]} ranks on {found[1]} hosts "
                                 "is not the same number of GPUs per node")
        return found
    if given is None:
        raise NcclTestsError(source, block.line, "the table has no '#  Rank … on HOST device' "
                             "header, so its rank and node counts are unknown: give the number "
                             "of nodes and GPUs per node (--nodes N --gpus-per-node G)")
    return given


def _check_bandwidths(source: str, number: int, size: int, time_us: float, algbw: float,
                      busbw: float, kind: CollectiveKind, ranks: int, factor: float) -> None:
    """algbw = size/time and busbw = algbw × factor, where the printed digits can tell."""
    if algbw < 1.0:  # two decimals: below 1 GB/s the rounding hides the ratio
        return
    if abs(size / (time_us * 1e3) / algbw - 1) > 0.02:
        raise NcclTestsError(source, number, f"algbw {algbw} GB/s is not size/time = "
                             f"{size / (time_us * 1e3):.2f} GB/s: the row is corrupted")
    if abs(busbw / algbw / factor - 1) > 0.02:
        raise NcclTestsError(source, number, f"busbw/algbw = {busbw / algbw:.3f}, but "
                             f"{kind.value} over {ranks} ranks has bus factor {factor:.3f}: "
                             "wrong collective or wrong node/GPU counts for this table")
