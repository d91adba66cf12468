"""The ``autoshard`` command line: thin wrappers over the public API.

Every error the user can cause (bad files, unknown names, impossible meshes, memory too small)
arrives here as one of the packages' exceptions and leaves as one line on stderr with a
non-zero exit: 2 for usage errors, 1 for problems with no feasible plan. Never a traceback.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import click

from autoshard.cli_common import friendly_errors, shape_options, training_options
from autoshard.cli_export import export_command
from autoshard.cli_import import import_group
from autoshard.cli_sweep import sweep_command
from autoshard.cli_verify import verify_command
from autoshard.logs import configure_logging

logger = logging.getLogger(__name__)

@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """autoshard: plan how every tensor of a model is sharded over a device mesh."""
    level = logging.WARNING - 10 * min(verbose, 2)
    configure_logging(level)


@main.command("plan")
@click.option("--model", default="gpt2", show_default=True,
              help="A zoo model name (see `autoshard models`) or a graph JSON file.")
@click.option("--mesh", "mesh_text", default="dp=2,tp=4", show_default=True,
              help="Mesh axes major first, e.g. dp=8,tp=8.")
@click.option("--topology", default="dgx-h100", show_default=True,
              help="A hardware preset name or a TOML topology file.")
@click.option("--link", "link_specs", multiple=True, metavar="AXIS=SPEC",
              help="Override one axis's link: tp=nvlink or dp=alpha:5us,bw:25GB/s (repeatable).")
@click.option("--memory", default=None, help="Memory per device, e.g. 80GiB (default: the HBM).")
@training_options("Plan")
@click.option("--reserve", default="0", show_default=True,
              help="Memory per device kept free (CUDA context, fragmentation), e.g. 2GiB.")
@shape_options(dtype_help="Parameter/activation dtype (default bf16).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Write plan.json, costs.csv and reshards.csv into this directory.")
@click.option("--force", is_flag=True, help="Overwrite files already in --out.")
@click.option("--time-limit", type=float, default=None, help="Solver time limit in seconds.")
@click.option("--gap", type=float, default=None,
              help="Relative gap to the proven lower bound at which the solver may stop, e.g. "
                   "1e-3 for 0.1 % (default 1e-6: prove the plan optimal).")
@click.option("--allow-uneven", is_flag=True,
              help="Also shard dims that do not divide (torch.chunk sizes; the largest shard "
                   "is costed). Such layouts are never resharded.")
@click.option("--verify", is_flag=True,
              help="Run the plan on an emulated mesh (NumPy, dims scaled down) and compare with "
                   "the unsharded model; the verdict goes into plan.json; exit 1 on a mismatch.")
@click.option("--quiet", "-q", is_flag=True, help="Print nothing on success.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary.")
@friendly_errors
def plan_command(**options: Any) -> None:
    """Plan a model on a mesh (no arguments: gpt2 on dp=2,tp=4 of dgx-h100)."""
    from autoshard.cli_plan import run_plan

    run_plan(**options)


@main.command("models")
@friendly_errors
def models_command() -> None:
    """List the built-in models with their parameter counts."""
    from graphs import zoo

    for name in zoo.names():
        config = zoo.config(name)
        click.echo(f"{name:<16} {zoo.param_count(name) / 1e9:>9.3f} B params  "
                   f"layers={config.layers} hidden={config.hidden} heads={config.heads}")


@main.command("bench")
@click.argument("name")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("results"),
              show_default=True)
@click.option("--quick", is_flag=True, help="A small, fast version (for smoke tests).")
@friendly_errors
def bench_command(name: str, out_dir: Path, quick: bool) -> None:
    """Run a shipped benchmark (enumerate, reshard, solver, sweep, …) and write results/."""
    from autoshard.bench.runner import run_benchmark

    for path in run_benchmark(name, out_dir, quick=quick):
        click.echo(f"wrote {path}")


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=1, sort_keys=True))


# Commands defined in their own modules (autoshard/cli_<name>.py).
for _command in (export_command, import_group, sweep_command, verify_command):
    main.add_command(_command)
