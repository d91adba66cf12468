"""``autoshard import jax MODULE:FUNCTION --out graph.json``: a JAX program as a graph file.

Contract: ``FUNCTION`` (``MODULE`` a dotted module path or a .py file, loaded as for ``import
torch``) takes no arguments and returns ``(fn, example_args)``: a JAX-traceable function and the
tuple of its positional arguments (arrays or ``jax.ShapeDtypeStruct`` pytrees). The first
argument holds the parameters (``--param-argnums`` to change that). ``fn`` may be a
``jax.value_and_grad`` of a loss. The graph is written as ``autoshard.graph/v1`` JSON (never
over an existing file without ``--force``) and one summary line is printed. Unmapped
primitives become ``opaque`` ops with one warning line (``--strict``: an error instead).
Every failure is one stderr line and a non-zero exit.
"""

from __future__ import annotations

import importlib.util
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


@click.command("jax")
@click.argument("target", metavar="MODULE:FUNCTION")
@click.option("--out", "out_file", type=click.Path(path_type=Path), required=True,
              help="The graph JSON file to write.")
@click.option("--strict", is_flag=True, help="Fail on primitives with no mapping.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option("--name", default=None, help="Graph name (default: the function's name).")
@click.option("--param-argnums", default="0", show_default=True,
              help="Comma-separated positions of the arguments that hold parameters.")
@friendly_errors
def jax_command(target: str, out_file: Path, strict: bool, force: bool, name: str | None,
                param_argnums: str) -> None:
    """Import a JAX function: FUNCTION() returns (fn, example_args)."""
    from graphs.importers import from_jax
    from graphs.importers.unmapped import UnmappedOpsWarning

    check_output_file(out_file, force, "--out")
    if importlib.util.find_spec("jax") is None:
        raise FactoryError("jax is not installed; install the jax extra: "
                           "pip install 'autoshard[jax]'")
    fn, args = call_factory(target)
    if not callable(fn) or not isinstance(args, tuple | list):
        raise FactoryError(f'"{target}" must return (fn, example_args) with example_args a '
                           "tuple of positional arguments")
    argnums = _argnums(param_argnums, len(args))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnmappedOpsWarning)
        graph = from_jax(fn, *args, name=name, strict=strict, param_argnums=argnums)
    echo_unmapped_warnings(caught)
    write_graph(graph, out_file, force)
    click.echo(summary_line(graph, out_file))


def _argnums(text: str, count: int) -> tuple[int, ...]:
    try:
        argnums = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise FactoryError(f'--param-argnums "{text}" is not a comma-separated list of '
                           "integers") from None
    bad = [n for n in argnums if not 0 <= n < count]
    if bad:
        raise FactoryError(f"--param-argnums {bad} out of range for {count} example arguments")
    return argnums
