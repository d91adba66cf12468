"""Errors raised by the exporters.

Every exporter refuses what its format cannot say (a strided view layout, a Partial with no
reduce op in the format, a non-divisible dim for JAX, a custom device order in iota form) with
one of these, naming the tensor, the tensor dim and the mesh axis, and saying what to do.
"""

from __future__ import annotations

from autoshard.errors import AutoshardError


class ExportError(AutoshardError):
    """A sharding cannot be written in the requested format.

    Attributes:
        format: the export format that refused (``"hlo"``, ``"shardy"``, ``"jax"``, ...).
        tensor: the tensor's name, or ``""`` when the caller gave none.
        dim: the offending tensor dim, or ``None`` when the whole sharding is the culprit.
        axis: the offending mesh axis, or ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        format: str,
        tensor: str = "",
        dim: int | None = None,
        axis: str | None = None,
    ) -> None:
        super().__init__(message)
        self.format = format
        self.tensor = tensor
        self.dim = dim
        self.axis = axis


class NotExpressibleError(ExportError):
    """The layout exists in DTensor but the format has no way to write it."""


class NotDivisibleExportError(ExportError):
    """A tensor dim is not divisible by its shard count and the format refuses padding."""


class HloParseError(ExportError):
    """An HloSharding or Shardy string could not be parsed."""
