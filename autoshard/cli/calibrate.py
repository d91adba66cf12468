"""``autoshard calibrate TABLE… --out cluster.toml``: fit the collective model to nccl-tests runs.

Reads nccl-tests output as pasted (:mod:`costmodel.nccl_tests`), fits the per-level
measured-curve parameters of a base topology (:mod:`costmodel.calibrate`) and writes the fitted
topology as TOML (load it with ``autoshard plan --topology cluster.toml``), ``calibration.csv``
(table, collective, ranks, bytes, measured_us, predicted_us, ratio) and ``calibration.png``
(one log-log panel per table) beside it, then prints the summary. ``--check TOPOLOGY`` compares
an existing preset or TOML file with the tables instead of fitting (CSV, plot and summary,
no TOML). Every input is read and fitted before anything is written; existing outputs are never
overwritten without ``--force``; bad input is one stderr line, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autoshard.cli.common import friendly_errors
from autoshard.errors import OutputExistsError, UsageError
from autoshard.sharding.links import resolve_topology
from costmodel import CollectiveKind, dump_topology, read_nccl_tests
from costmodel.calibrate import BOUNDS, Calibration, calibrate, check
from costmodel.calibration_report import (
    calibration_csv,
    calibration_summary,
    write_calibration_plot,
)

CSV_NAME, PLOT_NAME = "calibration.csv", "calibration.png"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv",
               "broadcast", "reduce")
_KIND = {"alltoall": CollectiveKind.ALL_TO_ALL, "sendrecv": CollectiveKind.COLLECTIVE_PERMUTE}


@click.command("calibrate")
@click.argument("tables", nargs=-1, required=True, metavar="TABLE…",
                type=click.Path(path_type=Path))
@click.option("--out", "out_file", type=click.Path(path_type=Path), default=None,
              help="The fitted topology (TOML); calibration.csv and calibration.png are "
                   "written beside it. Required unless --check.")
@click.option("--check", "check_topology", default=None, metavar="TOPOLOGY",
              help="Compare this preset or TOML file with the tables; fit nothing.")
@click.option("--base", default="dgx-h100", show_default=True,
              help="Preset or TOML file to fit: its link rates are kept, its launch, alpha, "
                   "pipeline and bus efficiency per level are refitted.")
@click.option("--name", default=None, help="Name of the fitted topology (default: BASE-"
                                               "calibrated).")
@click.option("--report-dir", type=click.Path(path_type=Path), default=None,
              help="Where calibration.csv and calibration.png go (default: beside --out; "
                   "with --check, the current directory).")
@click.option("--nodes", type=int, default=None,
              help="Nodes of tables without the nccl-tests '#  Rank … on HOST' header.")
@click.option("--gpus-per-node", type=int, default=None,
              help="GPUs per node of tables without that header.")
@click.option("--collective", type=click.Choice(COLLECTIVES), default=None,
              help="The collective, for tables that name none (no '<name>_perf' line).")
@click.option("--force", is_flag=True, help="Overwrite existing outputs.")
@friendly_errors
def calibrate_command(**options: Any) -> None:
    """Fit the collective cost model to nccl-tests tables (or --check a topology).

    Per topology level it fits: launch (s, the floor of any collective spanning the level),
    alpha (s per hop), pipeline (s, the fill that makes bandwidth ramp with size) and bus
    efficiency (fraction of the link rate reached on huge messages). Link rates stay the
    base's.
    """
    run_calibrate(**options)


def run_calibrate(*, tables: tuple[Path, ...], out_file: Path | None,
                  check_topology: str | None, base: str, name: str | None,
                  report_dir: Path | None, nodes: int | None, gpus_per_node: int | None,
                  collective: str | None, force: bool) -> Calibration:
    """Everything ``autoshard calibrate`` does; returns the calibration it wrote."""
    if (out_file is None) == (check_topology is None):
        raise UsageError("give --out FILE.toml to fit, or --check TOPOLOGY to compare "
                         "(one of them)")
    kind = _KIND.get(collective or "", CollectiveKind(collective) if collective else None)
    read = [t for path in tables for t in read_nccl_tests(
        path, collective=kind, nodes=nodes, gpus_per_node=gpus_per_node)]
    directory = report_dir or (out_file.parent if out_file is not None else Path("."))
    outputs = [directory / CSV_NAME, directory / PLOT_NAME]
    outputs += [out_file] if out_file is not None else []
    existing = tuple(str(path) for path in outputs if path.exists())
    if existing and not force:
        raise OutputExistsError(str(directory), existing)
    if check_topology is not None:
        result = check(resolve_topology(check_topology), read)
    else:
        result = calibrate(resolve_topology(base), read, name=name)
    _write(result, directory, out_file)
    click.echo(calibration_summary(result, fitted=out_file is not None), nl=False)
    return result


def _write(result: Calibration, directory: Path, out_file: Path | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if out_file is not None:
        out_file.parent.mkdir(parents=True, exist_ok=True)
        out_file.write_text(_toml_header(result) + dump_topology(result.topology))
        click.echo(f"wrote {out_file}", err=True)
    (directory / CSV_NAME).write_text(calibration_csv(result))
    write_calibration_plot(result, directory / PLOT_NAME)
    for name in (CSV_NAME, PLOT_NAME):
        click.echo(f"wrote {directory / name}", err=True)


def _toml_header(result: Calibration) -> str:
    """Comment lines saying which tables the file was fitted on (TOML ignores them)."""
    lines = ["# written by autoshard calibrate: costmodel's measured-curve parameters fitted",
             "# to these nccl-tests tables (bounds: "
             + ", ".join(f"{key} {low:g}..{high:g}" for key, (low, high) in BOUNDS.items())
             + ")"]
    lines += [f"#   {table.name}: {table.collective.value}, {table.ranks} ranks on "
              f"{table.nodes} node(s), {len(table.nbytes)} sizes" for table in result.tables]
    return "\n".join(lines) + "\n"
