"""``autoshard bench NAME``: run a shipped benchmark and write its CSVs and plots.

A group with one subcommand per benchmark, made from the benchmark module itself, so that
``autoshard bench NAME --help`` shows that benchmark's own description (its module docstring)
and ``autoshard bench --help`` lists them all. An unknown name is one line (exit 2) naming the
choices, like every other usage error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autoshard.bench.runner import BENCHMARKS, benchmark_module, run_benchmark
from autoshard.cli.common import USAGE_EXIT, fail, friendly_errors
from autoshard.errors import UsageError


def _command(name: str) -> click.Command:
    module = benchmark_module(name)
    text = (module.__doc__ or "").strip()
    summary = text.split("\n\n")[0].replace("\n", " ")
    summary = summary.split(": ", 1)[-1] if summary.startswith("``autoshard bench") else summary

    @click.command(name, help=text, short_help=summary)
    @click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("results"),
                  show_default=True, help="Directory for the CSVs and plots.")
    @click.option("--quick", is_flag=True, help="A small, fast version (for smoke tests).")
    @friendly_errors
    def command(out_dir: Path, quick: bool) -> None:
        for path in run_benchmark(name, out_dir, quick=quick):
            click.echo(f"wrote {path}")

    return command


class _Benchmarks(click.Group):
    """The benchmarks as subcommands, built on demand from :data:`BENCHMARKS`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(BENCHMARKS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return _command(name) if name in BENCHMARKS else None

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] not in BENCHMARKS and not args[0].startswith("-"):
            try:
                benchmark_module(args[0])
            except UsageError as exc:
                fail(str(exc), USAGE_EXIT)
        return super().resolve_command(ctx, args)


@click.group("bench", cls=_Benchmarks)
def bench_command() -> None:
    """Run a shipped benchmark and write its CSVs and plots (default: results/); `autoshard
    bench NAME --help` describes one."""
