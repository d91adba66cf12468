"""``autoshard import torch MODULE:FACTORY --out graph.json``: a torch.nn.Module as a graph
file, traced with ``torch.export`` on fake tensors (no weights read, nothing computed)."""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from autoshard.cli.common import check_output_file, friendly_errors
from autoshard.cli.factory import (
    FactoryError,
    call_factory,
    echo_unmapped_warnings,
    summary_line,
    write_graph,
)


@click.command("torch")
@click.argument("factory")
@click.option("--out", "out", type=click.Path(path_type=Path), required=True,
              help="Graph JSON to write (autoshard.graph/v1).")
@click.option("--strict", is_flag=True, help="Fail when an aten op has no mapping.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option("--name", default=None, help="Graph name (default: the module's class name).")
@friendly_errors
def torch_command(factory: str, out: Path, strict: bool, force: bool, name: str | None) -> None:
    """Import a torch.nn.Module: FACTORY is MODULE:CALLABLE (MODULE a dotted module path or a
    .py file) returning (module, example_inputs), where example_inputs is a tuple of positional
    inputs or a dict of keyword inputs; everything may live on the meta device."""
    from graphs.importers import from_torch
    from graphs.importers.unmapped import UnmappedOpsWarning

    check_output_file(out, force, "--out")
    try:
        import torch  # noqa: F401 - only to fail early with the install hint
    except ImportError:
        raise FactoryError("torch is not installed; install the torch extra: "
                           "pip install 'autoshard[torch]'") from None
    module, example_inputs = call_factory(factory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnmappedOpsWarning)
        graph = from_torch(module, example_inputs, name=name, strict=strict)
    echo_unmapped_warnings(caught)
    write_graph(graph, out, force)
    click.echo(summary_line(graph, out))
