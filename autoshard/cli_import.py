"""``autoshard import FRAMEWORK …``: turn a user's model into a graph JSON the planner reads.

The group is framework-neutral; each framework is one subcommand (``torch`` here, ``jax`` in
:mod:`autoshard.cli_import_jax`). Every
subcommand loads ``MODULE:FACTORY`` the same way (:func:`load_factory`), writes
``autoshard.graph/v1`` JSON with :func:`graphs.save` (never over an existing file without
``--force``) and prints one summary line: ops, parameters, unmapped ops. Unmapped ops are
reported as one warning line on stderr; with ``--strict`` they are an error.
"""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from autoshard.cli_common import friendly_errors
from autoshard.errors import AutoshardError


class FactoryError(AutoshardError):
    """``MODULE:FACTORY`` does not name an importable callable, or it returned nonsense."""


@click.group("import")
def import_group() -> None:
    """Import a model from a framework as a graph JSON (plan it with `autoshard plan --model`)."""


def load_factory(spec: str) -> Callable[[], Any]:
    """``pkg.mod:make`` or ``path/to/file.py:make`` → the callable ``make``."""
    module_text, sep, attr = spec.rpartition(":")
    if not sep or not module_text or not attr:
        raise FactoryError(f'"{spec}" is not MODULE:FACTORY (e.g. my_models:make or '
                           "models.py:make)")
    if module_text.endswith(".py") or "/" in module_text:
        path = Path(module_text)
        if not path.is_file():
            raise FactoryError(f'"{module_text}" is not a file')
        module_spec = importlib.util.spec_from_file_location(f"_autoshard_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
        _run(lambda: module_spec.loader.exec_module(module), f'"{module_text}"')  # type: ignore[union-attr]
    else:
        module = _run(lambda: importlib.import_module(module_text), f'module "{module_text}"')
    factory = getattr(module, attr, None)
    if factory is None:
        raise FactoryError(f'"{module_text}" has no attribute "{attr}"')
    if not callable(factory):
        raise FactoryError(f'"{spec}" is a {type(factory).__name__}, not a callable factory')
    return factory


def _run(step: Callable[[], Any], what: str) -> Any:
    try:
        return step()
    except ModuleNotFoundError as error:
        raise FactoryError(f"cannot import {what}: no module named {error.name!r}") from None
    except Exception as error:
        raise FactoryError(f"importing {what} failed: {type(error).__name__}: {error}") from None


def call_factory(spec: str) -> tuple[Any, Any]:
    """Call the factory; it must return ``(model, example_inputs)``."""
    factory = load_factory(spec)
    try:
        made = factory()
    except Exception as error:
        raise FactoryError(f'"{spec}" raised {type(error).__name__}: {error}') from None
    if not isinstance(made, tuple) or len(made) != 2:
        raise FactoryError(f'"{spec}" must return (model, example_inputs), got '
                           f"{type(made).__name__}")
    return made


def write_graph(graph: Any, out: Path, force: bool) -> None:
    if out.exists() and not force:
        raise FactoryError(f'"{out}" exists; pass --force to overwrite it')
    from graphs.io import save

    out.parent.mkdir(parents=True, exist_ok=True)
    save(graph, out)


def summary_line(graph: Any, out: Path) -> str:
    from graphs.importers import unmapped_ops

    params = [t for t in graph.tensors.values() if graph.producer(t.name).kind == "param"]
    ops = sum(1 for op in graph.ops if op.kind not in ("param", "input"))
    unmapped = sum(unmapped_ops(graph).values())
    return (f"wrote {out}: {graph.name}, {ops} ops, {len(params)} parameters "
            f"({sum(t.numel for t in params):,} elements), {unmapped} unmapped")


@import_group.command("torch")
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

    if out.exists() and not force:
        raise FactoryError(f'"{out}" exists; pass --force to overwrite it')
    try:
        import torch  # noqa: F401 - only to fail early with the install hint
    except ImportError:
        raise FactoryError("torch is not installed; install the torch extra: "
                           "pip install 'autoshard[torch]'") from None
    module, example_inputs = call_factory(factory)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnmappedOpsWarning)
        graph = from_torch(module, example_inputs, name=name, strict=strict)
    for warning in caught:
        if issubclass(warning.category, UnmappedOpsWarning):
            click.echo(f"autoshard: warning: {warning.message}", err=True)
    write_graph(graph, out, force)
    click.echo(summary_line(graph, out))


def _add_framework_commands() -> None:
    from autoshard.cli_import_jax import jax_command

    import_group.add_command(jax_command)


_add_framework_commands()
