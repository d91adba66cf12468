"""Errors of the importers: one subtree of :class:`graphs.GraphError`, named for what went wrong.

Each carries structured fields (the framework, the op counts, the module) and its message is
already one clear line for a user, so the CLI prints it as is.
"""

from __future__ import annotations

from collections.abc import Mapping

from graphs.errors import GraphError


class ImporterError(GraphError):
    """Root of every error an importer raises."""


class FrameworkMissingError(ImporterError):
    """The framework an importer needs is not installed; names the extra to install."""

    def __init__(self, framework: str, extra: str) -> None:
        self.framework, self.extra = framework, extra
        super().__init__(f"{framework} is not installed; install the {extra} extra: "
                         f"pip install 'autoshard[{extra}]'")


class TraceError(ImporterError):
    """The framework could not trace the model (or the model does not fit the importer)."""

    def __init__(self, message: str, *, model: str | None = None) -> None:
        self.model = model
        super().__init__(message)


class UnmappedOpsError(ImporterError):
    """``strict=True`` and some framework ops have no registered kind; names every one with
    its count."""

    def __init__(self, counts: Mapping[str, int], *, model: str) -> None:
        self.counts, self.model = dict(sorted(counts.items())), model
        listed = ", ".join(f"{target} x{count}" for target, count in self.counts.items())
        total = sum(self.counts.values())
        super().__init__(f'model "{model}" has {total} unmapped op(s): {listed}; drop '
                         "--strict to import them as opaque (all-replicate) ops")
