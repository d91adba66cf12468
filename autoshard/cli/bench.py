"""``autoshard bench NAME``: run a shipped benchmark and write its CSVs and plots."""

from __future__ import annotations

from pathlib import Path

import click

from autoshard.bench.runner import run_benchmark
from autoshard.cli.common import friendly_errors


@click.command("bench")
@click.argument("name")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("results"),
              show_default=True)
@click.option("--quick", is_flag=True, help="A small, fast version (for smoke tests).")
@friendly_errors
def bench_command(name: str, out_dir: Path, quick: bool) -> None:
    """Run a shipped benchmark (enumerate, reshard, solver, sweep, …) and write results/."""
    for path in run_benchmark(name, out_dir, quick=quick):
        click.echo(f"wrote {path}")
