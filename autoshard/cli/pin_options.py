"""``--pin``, ``--strategy`` and ``--print-pins`` of ``autoshard plan``: the options that fix
part (or all) of a plan and evaluate it instead of searching for it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from autoshard.planning.named import AUTO, STRATEGIES, pin_set, render_pins
from autoshard.planning.pins import Pins, load_pins
from autoshard.sharding.mesh import Mesh

PIN_HELP = (
    "Fix the layout of some tensors and optimise the rest: a TOML file of [[pin]] rules, "
    'each with tensors = "layers.*.attn.wq" (a glob over tensor names, or a list), '
    'placements = ["R", "S(1)"] (one per mesh axis: R, S(d), P(sum), _S(d,sf), * for free, '
    'S(*) for any shard) or placements = { tp = "S(1)" } (by axis name), and optionally '
    'role = "param" and optional = true; later rules win per axis; gradient_sync = '
    '"deferred" holds gradients whole until the optimizer step (ZeRO-1). A plan.json pins '
    "every tensor to its layout there: the plan is evaluated on this mesh and topology. "
    "Repeatable; applied after --strategy."
)
STRATEGY_HELP = (
    "Evaluate a named hand plan instead of searching (auto): ddp, zero1, zero2, fsdp (ZeRO-3), "
    "megatron (TP on the tensor axis, data parallel on the others), megatron-sp (plus "
    "sequence parallel) or megatron-sp-distopt (plus Megatron's distributed optimizer: "
    "optimizer state sharded over the data axes). Axis roles come from axis names: "
    "dp/data/ddp/batch/replica are replicated data axes, fsdp/zero/shard sharded data axes "
    "(ZeRO and FSDP shard over them, or over every data axis when there are none), "
    "tp/tensor/model/mp the tensor axis; a digit or _suffix keeps the role (dp0, dp_inter)."
)


def pin_options() -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def apply(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed((
            click.option("--pin", "pin_files", multiple=True, metavar="FILE",
                         type=click.Path(path_type=Path), help=PIN_HELP),
            click.option("--strategy", type=click.Choice([AUTO, *STRATEGIES]), default=AUTO,
                         show_default=True, help=STRATEGY_HELP),
            click.option("--print-pins", is_flag=True,
                         help="Print the pins of --strategy and --pin for --mesh as one pin "
                              "file (copy it, edit it, pass it to --pin) and exit."),
        )):
            func = option(func)
        return func

    return apply


def chosen_pins(strategy: str, pin_files: tuple[Path, ...], mesh: Mesh) -> Pins | None:
    """The named strategy's pins, then each --pin file's, in order."""
    given: Pins | None = None
    for path in pin_files:
        pins = load_pins(path)
        given = pins if given is None else given + pins
    return pin_set(strategy, given, mesh)


def show_pins(strategy: str, pin_files: tuple[Path, ...], mesh: Mesh) -> None:
    pins = chosen_pins(strategy, pin_files, mesh)
    if pins is None:
        click.echo("# no pins: --strategy auto searches every layout")
        return
    title = f"pins of {', '.join(pins.sources)}"
    click.echo(render_pins(pins, mesh, title))
