"""Load a user's ``MODULE:FACTORY``, write the graph it yields, and say what was written.

What every ``autoshard import FRAMEWORK`` subcommand shares: ``MODULE`` is a dotted module path
or a .py file, ``FACTORY`` a callable returning ``(model, example_inputs)``; the graph goes to
``autoshard.graph/v1`` JSON (never over an existing file without ``--force``), one summary line
is printed, and unmapped ops are reported as one warning line each run.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from autoshard.errors import AutoshardError
from graphs.io import save


class FactoryError(AutoshardError):
    """``MODULE:FACTORY`` does not name an importable callable, or it returned nonsense."""


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

    out.parent.mkdir(parents=True, exist_ok=True)
    save(graph, out)


def summary_line(graph: Any, out: Path) -> str:
    from graphs.importers import unmapped_ops

    params = [t for t in graph.tensors.values() if graph.producer(t.name).kind == "param"]
    ops = sum(1 for op in graph.ops if op.kind not in ("param", "input"))
    unmapped = sum(unmapped_ops(graph).values())
    return (f"wrote {out}: {graph.name}, {ops} ops, {len(params)} parameters "
            f"({sum(t.numel for t in params):,} elements), {unmapped} unmapped")


def echo_unmapped_warnings(caught: list[Any]) -> None:
    """One stderr line per unmapped-ops warning the importer raised."""
    from graphs.importers.unmapped import UnmappedOpsWarning

    for warning in caught:
        if issubclass(warning.category, UnmappedOpsWarning):
            click.echo(f"autoshard: warning: {warning.message}", err=True)
