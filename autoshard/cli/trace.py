"""``autoshard trace PLAN.json --out trace.json``: a saved plan's step as a Chrome trace, without
re-planning (``autoshard plan --trace`` writes the same file for the plan it makes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autoshard.cli.common import PlanFileType, check_output_file, friendly_errors
from autoshard.errors import UsageError
from autoshard.planning.record import Plan
from autoshard.planning.summary import format_seconds
from autoshard.timeline import Timeline, write_trace
from autoshard.timeline.schedule import DRAWN_MICRO_BATCHES


@click.command("trace")
@click.argument("plan_path", metavar="PLAN.json", type=PlanFileType())
@click.option("--out", "out_path", type=click.Path(path_type=Path), required=True,
              help="The trace file to write (Chrome trace JSON: open it in Perfetto or "
                   "chrome://tracing).")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option("--micro-batches", "drawn_text", default=str(DRAWN_MICRO_BATCHES),
              show_default=True, metavar="N|all",
              help="Micro-batches drawn slice by slice; the alike ones after them are one "
                   "repeat block per track, as long as they run (a 64-micro-batch 70B step "
                   "drawn whole is ~170 MB); all: draw every one.")
@friendly_errors
def trace_command(**options: Any) -> None:
    """Write a plan's predicted step as a timeline: compute, one track per mesh axis."""
    run_trace(**options)


def run_trace(*, plan_path: Path, out_path: Path, force: bool,
              drawn_text: str = str(DRAWN_MICRO_BATCHES)) -> None:
    drawn = parse_drawn(drawn_text)
    check_output_file(out_path, force, "--out")
    timeline = write_trace(Plan.load(plan_path), out_path, drawn)
    click.echo(trace_line(out_path, timeline))


def parse_drawn(text: str) -> int | None:
    """``--micro-batches``: a positive count, or ``all`` (None)."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f'--micro-batches "{text}" must be a positive count or "all"')
    return value


def trace_line(path: Path, timeline: Timeline) -> str:
    """One line saying what was written."""
    meta = timeline.metadata
    m = meta.get("micro_batches", 1)
    tracks = ", ".join(dict.fromkeys(t.thread for t in timeline.tracks))
    processes = len({t.process for t in timeline.tracks})
    if processes > 1:  # a pipeline: the same tracks per stage
        tracks = f"{processes} stages' {tracks}"
    return (f"wrote      {path}  (step {format_seconds(timeline.end_s)}, {m} "
            f"micro-batch{'es' if m != 1 else ''}{_overlap_text(meta)}; "
            f"{len(timeline.slices)} slices on {tracks})")


def _overlap_text(meta: dict) -> str:
    """``, overlap op`` (the step's overlap model), or nothing for a pipelined plan, whose
    timeline is the schedule's and has no such setting."""
    overlap = meta.get("overlap")
    return "" if overlap is None else f", overlap {overlap}"
