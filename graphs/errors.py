"""Errors of the graph IR: one root, subclasses named for what went wrong.

Every error carries structured fields (the op, the tensor, the JSON path) so callers can
enrich or reformat them; the message alone is already one clear line for a user.
"""

from __future__ import annotations


class GraphError(Exception):
    """Root of every error raised by :mod:`graphs`."""


class UnknownOpError(GraphError):
    """An op kind that no registration describes."""

    def __init__(self, kind: str, op: str | None = None, suggestions: tuple[str, ...] = ()):
        self.kind, self.op, self.suggestions = kind, op, suggestions
        where = f' (op "{op}")' if op else ""
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f'unknown op kind "{kind}"{where}{hint}')


class ShapeError(GraphError):
    """A shape or dtype disagrees with what shape inference derives."""


class AttrError(GraphError):
    """An op's attributes are missing, unknown or of the wrong type."""


class StructureError(GraphError):
    """Dangling tensors, two producers, cycles: the graph is not a well-formed DAG."""


class SchemaError(GraphError):
    """A graph file does not follow the ``autoshard.graph/v1`` schema; names the JSON path."""

    def __init__(self, path: str, message: str, file: str | None = None):
        self.path, self.file = path, file
        where = f"{file}: " if file else ""
        super().__init__(f"{where}{path}: {message}")


class NotExecutableError(GraphError):
    """An op whose computation is unknown (an ``opaque`` op the importer could not map) was
    asked to run: such a graph can be planned and exported, not evaluated or emulated."""

    def __init__(self, target: str):
        self.target = target
        super().__init__(f'op "{target}" was imported as opaque (its computation is unknown), '
                         "so the graph cannot be evaluated or emulated; map the op or replace "
                         "it in the model to verify the plan")
