"""``autoshard trace PLAN.json --out trace.json``: a saved plan's step as a Chrome trace, without
re-planning (``autoshard plan --trace`` writes the same file for the plan it makes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autoshard.cli.common import friendly_errors
from autoshard.errors import OutputFileExistsError, UsageError
from autoshard.planning.record import Plan
from autoshard.planning.summary import format_seconds
from autoshard.timeline import Timeline, write_trace


@click.command("trace")
@click.argument("plan_path", metavar="PLAN.json", type=click.Path(path_type=Path))
@click.option("--out", "out_path", type=click.Path(path_type=Path), required=True,
              help="The trace file to write (Chrome trace JSON: open it in Perfetto or "
                   "chrome://tracing).")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@friendly_errors
def trace_command(**options: Any) -> None:
    """Write a plan's predicted step as a timeline: compute, one track per mesh axis."""
    run_trace(**options)


def run_trace(*, plan_path: Path, out_path: Path, force: bool) -> None:
    check_trace_path(out_path, force, "--out")
    timeline = write_trace(Plan.load(plan_path), out_path)
    click.echo(trace_line(out_path, timeline))


def check_trace_path(path: Path | None, force: bool, option: str) -> None:
    """Everything that would stop the trace from being written, found before any work: a
    directory where the file goes, a file where one of its parent directories goes, or an
    existing file without ``--force``."""
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f'{option} "{path}" is a directory; pass a file name')
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise UsageError(f'{option} "{path}": "{parent}" is a file, not a directory')
            break
    if path.exists() and not force:
        raise OutputFileExistsError(str(path), option)


def trace_line(path: Path, timeline: Timeline) -> str:
    """One line saying what was written."""
    meta = timeline.metadata
    m = meta.get("micro_batches", 1)
    tracks = ", ".join(t.thread for t in timeline.tracks)
    return (f"wrote      {path}  (step {format_seconds(timeline.end_s)}, {m} "
            f"micro-batch{'es' if m != 1 else ''}, overlap {meta.get('overlap')}; "
            f"{len(timeline.slices)} slices on {tracks})")
