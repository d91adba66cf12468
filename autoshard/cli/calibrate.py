"""``autoshard calibrate TABLE… [--matmul CSV…] --out cluster.toml``: fit the collective model to
nccl-tests runs and the GEMM kernel model to matmul benchmark tables.

Reads nccl-tests output as pasted (:mod:`costmodel.nccl_tests`), fits the per-level
measured-curve parameters of a base topology (:mod:`costmodel.calibrate`) and writes the fitted
topology as TOML (load it with ``autoshard plan --topology cluster.toml``), ``calibration.csv``
(table, collective, ranks, bytes, measured_us, predicted_us, ratio) and ``calibration.png``
(one log-log panel per table) beside it, then prints the summary. ``--check TOPOLOGY`` compares
an existing preset or TOML file with the tables instead of fitting (CSV, plot and summary,
no TOML). ``--matmul TABLE`` (repeatable; format in :mod:`costmodel.matmul_table`) adds the
GEMM terms of ``[device.kernels]`` (:mod:`autoshard.cli.calibrate_gemm`): fitted on the
collective fit's result (or on the base when no nccl-tests table is given), reported in
``calibration-gemm.csv``. Every input is read and fitted before anything is written; existing
outputs are never overwritten without ``--force``; bad input is one stderr line, exit 2.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from autoshard.cli.calibrate_gemm import (
    GEMM_CSV_NAME,
    check_gemm_tables,
    fit_gemm,
    gemm_toml_header,
    read_matmul_tables,
)
from autoshard.cli.common import friendly_errors
from autoshard.errors import OutputExistsError, UsageError
from autoshard.sharding.links import resolve_topology
from costmodel import (
    CollectiveKind,
    GemmCalibration,
    MatmulTable,
    NcclTable,
    Topology,
    dump_topology,
    read_nccl_tests,
)
from costmodel.calibrate import BOUNDS, Calibration, calibrate, check
from costmodel.calibration_levels import LevelSource, kept_indices, level_origins
from costmodel.calibration_report import (
    calibration_csv,
    calibration_summary,
    write_calibration_plot,
)
from costmodel.gemm_report import gemm_csv, gemm_summary

CSV_NAME, PLOT_NAME = "calibration.csv", "calibration.png"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv",
               "broadcast", "reduce")
DEFAULT_BASE = "dgx-h100"
_KIND = {"alltoall": CollectiveKind.ALL_TO_ALL, "sendrecv": CollectiveKind.COLLECTIVE_PERMUTE}


@dataclass(frozen=True, slots=True)
class CalibrateResult:
    """What ``autoshard calibrate`` computed: the (fitted or checked) topology and the
    collective and GEMM reports (None for a half given no tables)."""

    topology: Topology
    collectives: Calibration | None
    gemm: GemmCalibration | None


@click.command("calibrate")
@click.argument("tables", nargs=-1, metavar="[TABLE]…", type=click.Path(path_type=Path))
@click.option("--matmul", "matmul_tables", multiple=True, type=click.Path(path_type=Path),
              metavar="CSV", help="A matmul benchmark table (m,n,k,dtype and one of tflops, "
                                  "flops_per_s, seconds; optional batch): fits the GEMM "
                                  "terms of [device.kernels]. Repeatable.")
@click.option("--out", "out_file", type=click.Path(path_type=Path), default=None,
              help="The fitted topology (TOML); calibration.csv and calibration.png are "
                   "written beside it. Required unless --check.")
@click.option("--check", "check_topology", default=None, metavar="TOPOLOGY",
              help="Compare this preset or TOML file with the tables; fit nothing.")
@click.option("--base", default=None,
              help="Preset or TOML file to fit: its link rates are kept, its launch, alpha, "
                   "pipeline and bus efficiency are refitted on each level the tables "
                   "determine and kept on the others (with --matmul: its SM count, tile and "
                   "peaks are kept, its GEMM ceiling, small-K cost and kernel launch "
                   f"refitted). Default {DEFAULT_BASE}, but required when only multi-node "
                   "tables are given: they cannot determine the node level, which is then "
                   "kept from the base.")
@click.option("--name", default=None, help="Name of the fitted topology (default: BASE-"
                                               "calibrated).")
@click.option("--report-dir", type=click.Path(path_type=Path), default=None,
              help="Where calibration.csv, calibration.png and calibration-gemm.csv go "
                   "(default: beside --out; with --check, the current directory).")
@click.option("--nodes", type=int, default=None,
              help="Nodes of tables without the nccl-tests '#  Rank … on HOST' header.")
@click.option("--gpus-per-node", type=int, default=None,
              help="GPUs per node of tables without that header.")
@click.option("--collective", type=click.Choice(COLLECTIVES), default=None,
              help="The collective, for tables that name none (no '<name>_perf' line).")
@click.option("--force", is_flag=True, help="Overwrite existing outputs.")
@friendly_errors
def calibrate_command(**options: Any) -> None:
    """Fit the collective cost model to nccl-tests tables and/or the GEMM kernel model to
    matmul tables (--matmul), or --check a topology against them.

    Per topology level the tables determine it fits: launch (s, the floor of any collective
    spanning the level), alpha (s per hop), pipeline (s, the fill that makes bandwidth ramp with
    size) and bus efficiency (fraction of the link rate reached on huge messages). Link rates
    stay the base's. A single-node table determines the node level, a multi-node table the
    network level given the node level; with multi-node tables only, the node level is kept from
    --base. From matmul tables: the GEMM ceiling (fraction of peak), the small-K cost (K
    elements per tile) and the per-kernel launch.
    """
    run_calibrate(**options)


def run_calibrate(*, tables: tuple[Path, ...], matmul_tables: tuple[Path, ...] = (),
                  out_file: Path | None, check_topology: str | None, base: str | None,
                  name: str | None, report_dir: Path | None, nodes: int | None,
                  gpus_per_node: int | None, collective: str | None, force: bool
                  ) -> CalibrateResult:
    """Everything ``autoshard calibrate`` does; returns what it wrote."""
    if (out_file is None) == (check_topology is None):
        raise UsageError("give --out FILE.toml to fit, or --check TOPOLOGY to compare "
                         "(one of them)")
    if not tables and not matmul_tables:
        raise UsageError("give nccl-tests tables (TABLE…) and/or matmul tables (--matmul "
                         "CSV) to fit or check")
    kind = _KIND.get(collective or "", CollectiveKind(collective) if collective else None)
    read = [t for path in tables for t in read_nccl_tests(
        path, collective=kind, nodes=nodes, gpus_per_node=gpus_per_node)]
    if check_topology is None:
        _require_base_for_kept_levels(base, read)
    matmul = read_matmul_tables(matmul_tables)
    directory = report_dir or (out_file.parent if out_file is not None else Path("."))
    outputs = [directory / CSV_NAME, directory / PLOT_NAME] if read else []
    outputs += [directory / GEMM_CSV_NAME] if matmul else []
    outputs += [out_file] if out_file is not None else []
    existing = tuple(str(path) for path in outputs if path.exists())
    if existing and not force:
        raise OutputExistsError(str(directory), existing)
    if check_topology is not None:
        result = _check(resolve_topology(check_topology), read, matmul)
    else:
        result = _fit(resolve_topology(base or DEFAULT_BASE), read, matmul, name)
    _write(result, matmul, directory, out_file)
    if result.collectives is not None:
        click.echo(calibration_summary(result.collectives, fitted=out_file is not None),
                   nl=False)
    if result.gemm is not None:
        click.echo(gemm_summary(result.gemm), nl=False)
    return result


def _require_base_for_kept_levels(base: str | None, read: list[NcclTable]) -> None:
    """Refuse to keep a level the tables cannot determine from a base the user did not name:
    the default's NVLink numbers would silently stand for the user's cluster."""
    if base is not None or not read:
        return
    default = resolve_topology(DEFAULT_BASE)
    kept = kept_indices(level_origins(read, len(default.levels)))
    if kept:
        level = default.levels[kept[0]].name
        names = ", ".join(table.name for table in read)
        message = (f"{names}: multi-node tables only, which cannot tell the {level} level "
                   f"(NVLink) apart from the network; give a single-node table too, or "
                   f"--base PRESET|FILE.toml to keep the {level} level from")
        raise UsageError(message)


def _check(topology: Topology, read: list[NcclTable], matmul: tuple[MatmulTable, ...]
           ) -> CalibrateResult:
    return CalibrateResult(topology=topology,
                           collectives=check(topology, read) if read else None,
                           gemm=check_gemm_tables(topology, matmul) if matmul else None)


def _fit(base: Topology, read: list[NcclTable], matmul: tuple[MatmulTable, ...],
         name: str | None) -> CalibrateResult:
    collectives = calibrate(base, read, name=name) if read else None
    topology = collectives.topology if collectives is not None else dataclasses.replace(
        base, name=name or f"{base.name}-calibrated")
    gemm = None
    if matmul:
        topology, gemm = fit_gemm(topology, matmul)
    return CalibrateResult(topology=topology, collectives=collectives, gemm=gemm)


def _write(result: CalibrateResult, matmul: tuple[MatmulTable, ...], directory: Path,
           out_file: Path | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        header = _toml_header(result.collectives) if result.collectives is not None else ""
        header += gemm_toml_header(matmul) if matmul else ""
        out_file.write_text(header + dump_topology(result.topology))
        click.echo(f"wrote {out_file}", err=True)
    written = []
    if result.collectives is not None:
        (directory / CSV_NAME).write_text(calibration_csv(result.collectives))
        write_calibration_plot(result.collectives, directory / PLOT_NAME)
        written += [CSV_NAME, PLOT_NAME]
    if result.gemm is not None:
        (directory / GEMM_CSV_NAME).write_text(gemm_csv(result.gemm))
        written.append(GEMM_CSV_NAME)
    for name in written:
        click.echo(f"wrote {directory / name}", err=True)


def _toml_header(result: Calibration) -> str:
    """Comment lines saying which tables the file was fitted on (TOML ignores them)."""
    lines = ["# written by autoshard calibrate: costmodel's measured-curve parameters fitted",
             "# to these nccl-tests tables (bounds: "
             + ", ".join(f"{key} {low:g}..{high:g}" for key, (low, high) in BOUNDS.items())
             + ")"]
    lines += [f"#   {table.name}: {table.collective.value}, {table.ranks} ranks on "
              f"{table.nodes} node(s), {len(table.nbytes)} sizes" for table in result.tables]
    levels = result.topology.levels
    said = {LevelSource.FITTED: "fitted",
            LevelSource.KEPT: f"kept from {result.base} (the tables cannot determine it)",
            LevelSource.UNSPANNED: f"kept from {result.base} (no table crosses it)"}
    lines += [f"# level {levels[origin.index].name}: {said[origin.source]}"
              for origin in result.origins]
    return "\n".join(lines) + "\n"
