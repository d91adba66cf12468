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
    "UnmappedOpsWarning", "from_torch", "unmapped_ops",
]


def from_torch(module: Any, example_inputs: Any, *, name: str | None = None,
               strict: bool = False) -> OpGraph:
    """Import a ``torch.nn.Module``; see :func:`graphs.importers.torch_export.from_torch`."""
    from graphs.importers.torch_export import from_torch as _from_torch

    return _from_torch(module, example_inputs, name=name, strict=strict)
