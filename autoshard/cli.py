"""The ``autoshard`` command line: thin wrappers over the public API.

Every error the user can cause (bad files, unknown names, impossible meshes, memory too small)
arrives here as one of the packages' exceptions and leaves as one line on stderr with a
non-zero exit: 2 for usage errors, 1 for problems with no feasible plan. Never a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from autoshard.errors import AutoshardError, InfeasibleError, VerificationFailedError
from costmodel import CostModelError
from graphs import GraphError
from solver import SolverError

logger = logging.getLogger(__name__)

USAGE_EXIT, INFEASIBLE_EXIT = 2, 1


def _fail(message: str, code: int) -> None:
    click.echo(f"autoshard: error: {message}", err=True)
    sys.exit(code)


def friendly_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn every known error into one stderr line and the right exit code."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (InfeasibleError, VerificationFailedError) as exc:
            _fail(str(exc), INFEASIBLE_EXIT)
        except (AutoshardError, GraphError, CostModelError, SolverError) as exc:
            _fail(str(exc), USAGE_EXIT)
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        return None

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """autoshard: plan how every tensor of a model is sharded over a device mesh."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")


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
@click.option("--training/--inference", default=False, show_default=True,
              help="Plan a training step (backward + optimizer) or inference.")
@click.option("--optimizer", type=click.Choice(["adamw", "sgd"]), default="adamw",
              show_default=True,
              help="Optimizer of a --training step (AdamW keeps fp32 master weights and "
                   "moments for 16-bit parameters).")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default="none",
              show_default=True,
              help="Activation recomputation of a --training step (Korthikanti et al. 2022).")
@click.option("--reserve", default="0", show_default=True,
              help="Memory per device kept free (CUDA context, fragmentation), e.g. 2GiB.")
@click.option("--batch", type=int, default=None)
@click.option("--seq", type=int, default=None)
@click.option("--layers", type=int, default=None)
@click.option("--hidden", type=int, default=None)
@click.option("--ffn", type=int, default=None)
@click.option("--heads", type=int, default=None)
@click.option("--dtype", default=None, help="Parameter/activation dtype (default bf16).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Write plan.json, costs.csv and reshards.csv into this directory.")
@click.option("--force", is_flag=True, help="Overwrite files already in --out.")
@click.option("--time-limit", type=float, default=None, help="Solver time limit in seconds.")
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
    """Run a shipped benchmark (enumerate, reshard, solver) and write results/NAME.csv."""
    from autoshard.bench.runner import run_benchmark

    for path in run_benchmark(name, out_dir, quick=quick):
        click.echo(f"wrote {path}")


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=1, sort_keys=True))


# Commands defined in their own modules (autoshard/cli_<name>.py), which import this one.
from autoshard.cli_export import export_command  # noqa: E402
from autoshard.cli_sweep import sweep_command  # noqa: E402
from autoshard.cli_verify import verify_command  # noqa: E402

for _command in (export_command, sweep_command, verify_command):
    main.add_command(_command)
