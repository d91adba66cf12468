"""Importers: a model written in a framework → an :class:`~graphs.OpGraph` the planner reads.

Each importer is a thin wrapper here that loads its framework lazily, so ``import graphs`` never
imports torch or jax. Ops the importer cannot map become ``opaque`` ops (see
:mod:`graphs.ops.opaque`); :func:`unmapped_ops` lists them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphs.importers.errors import (
    FrameworkMissingError,
    ImporterError,
    TraceError,
    UnmappedOpsError,
)
from graphs.importers.unmapped import UnmappedOpsWarning, unmapped_ops

if TYPE_CHECKING:
    from graphs.opgraph import OpGraph

__all__ = [
    "FrameworkMissingError", "ImporterError", "TraceError", "UnmappedOpsError",
    "UnmappedOpsWarning", "from_jax", "from_torch", "unmapped_ops",
]


def from_torch(module: Any, example_inputs: Any, *, name: str | None = None,
               strict: bool = False) -> OpGraph:
    """Import a ``torch.nn.Module``; see :func:`graphs.importers.torch_export.from_torch`."""
    from graphs.importers.torch_export import from_torch as _from_torch

    return _from_torch(module, example_inputs, name=name, strict=strict)


def from_jax(fn: Any, *example_args: Any, name: str | None = None, strict: bool = False,
             param_argnums: tuple[int, ...] = (0,)) -> OpGraph:
    """The OpGraph of a JAX function; see :func:`graphs.importers.jax_jaxpr.from_jax`."""
    from graphs.importers.jax_jaxpr import from_jax as _from_jax

    return _from_jax(fn, *example_args, name=name, strict=strict, param_argnums=param_argnums)
