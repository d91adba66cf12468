"""``autoshard import jax MODULE:FUNCTION --out graph.json``: a JAX program as a graph file.

Contract: ``FUNCTION`` (looked up in the importable ``MODULE``; the current directory is on the
path) takes no arguments and returns ``(fn, example_args)``: a JAX-traceable function and the
tuple of its positional arguments (arrays or ``jax.ShapeDtypeStruct`` pytrees). The first
argument holds the parameters (``--param-argnums`` to change that). ``fn`` may be a
``jax.value_and_grad`` of a loss. The graph is written as ``autoshard.graph/v1`` JSON (never
over an existing file without ``--force``) and one summary line is printed. Unmapped
primitives become ``opaque`` ops with one warning line (``--strict``: an error instead).
Every failure is one stderr line and a non-zero exit.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import click

from autoshard.cli_common import friendly_errors
from autoshard.errors import UsageError

JAX_MISSING = "install the jax extra: pip install 'autoshard[jax]'"


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
    if out_file.exists() and not force:
        raise UsageError(f"{out_file} exists; pass --force to overwrite it")
    if importlib.util.find_spec("jax") is None:
        raise UsageError(JAX_MISSING)
    fn, args = load_target(target)
    from graphs.importers.jax_jaxpr import import_jax

    argnums = _argnums(param_argnums, len(args))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imported = _guarded(target, lambda: import_jax(fn, *args, name=name, strict=strict,
                                                       param_argnums=argnums))
    for warning in caught:
        click.echo(f"autoshard: warning: {warning.message}", err=True)
    graph = imported.graph
    out_file.parent.mkdir(parents=True, exist_ok=True)
    graph.save(out_file)
    kinds = Counter(op.kind for op in graph.ops)
    params = [t for t in graph.tensors.values() if t.role.value == "param"]
    click.echo(f"wrote {out_file}: graph {graph.name}, {len(graph.ops)} ops "
               f"({kinds['einsum']} einsum, {kinds['opaque']} opaque), {len(params)} params "
               f"({sum(t.numel for t in params):,} elements), {len(graph.outputs)} outputs")


def load_target(target: str) -> tuple[Any, tuple[Any, ...]]:
    """Import ``MODULE:FUNCTION``, call it, check it returned ``(fn, example_args)``."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(f'"{target}" is not MODULE:FUNCTION (e.g. mymodel:example)')
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name == "jax":
            raise UsageError(JAX_MISSING) from None
        raise UsageError(f'cannot import module "{module_name}": {exc}') from None
    function = getattr(module, attribute, None)
    if not callable(function):
        raise UsageError(f'module "{module_name}" has no function "{attribute}"')
    result = _guarded(target, function)
    if not (isinstance(result, tuple | list) and len(result) == 2 and callable(result[0])
            and isinstance(result[1], tuple | list)):
        raise UsageError(f"{target}() must return (fn, example_args) with example_args a "
                         f"tuple of positional arguments, got {type(result).__name__}")
    return result[0], tuple(result[1])


def _argnums(text: str, count: int) -> tuple[int, ...]:
    try:
        argnums = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(f'--param-argnums "{text}" is not a comma-separated list of '
                         "integers") from None
    bad = [n for n in argnums if not 0 <= n < count]
    if bad:
        raise UsageError(f"--param-argnums {bad} out of range for {count} example arguments")
    return argnums


def _guarded(target: str, call: Any) -> Any:
    """Run user code; its exceptions become one line naming the target."""
    from graphs import GraphError

    try:
        return call()
    except GraphError:
        raise
    except Exception as exc:  # any failure of user code is reported, not raised
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise UsageError(f"{target}: {type(exc).__name__}: {first}") from None
