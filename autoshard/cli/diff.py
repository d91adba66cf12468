"""``autoshard diff A.json B.json``: what separates two plans of one model on one mesh."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autoshard.cli.common import PlanFileType, check_output_file, friendly_errors
from autoshard.explain import diff_plans
from autoshard.explain.diff_render import diff_text, write_csv
from autoshard.planning.record import Plan


@click.command("diff")
@click.argument("a_path", metavar="A.json", type=PlanFileType())
@click.argument("b_path", metavar="B.json", type=PlanFileType())
@click.option("--csv", "csv_path", type=click.Path(path_type=Path), default=None,
              help="Also write every row (section, item, a, b, delta) to this CSV file.")
@click.option("--force", is_flag=True,
              help="Compare plans of different models, meshes or graphs anyway (tensors "
                   "present in both only), and overwrite --csv if it exists.")
@click.option("--rows", type=click.IntRange(min=0), default=20, show_default=True,
              help="Placement groups and collectives shown per section.")
@friendly_errors
def diff_command(**options: Any) -> None:
    """Compare two plans: placements, step time, memory and collectives, side by side."""
    run_diff(**options)


def run_diff(*, a_path: Path, b_path: Path, csv_path: Path | None, force: bool,
             rows: int) -> None:
    check_output_file(csv_path, force, "--csv", taken=(a_path, b_path))
    a, b = Plan.load(a_path), Plan.load(b_path)
    diff = diff_plans(a, b, force=force, names=(str(a_path), str(b_path)))
    click.echo(diff_text(diff, rows))
    if csv_path is not None:
        write_csv(diff, csv_path)
        click.echo(f"wrote      {csv_path}")
