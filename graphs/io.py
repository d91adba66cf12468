"""``autoshard.graph/v1`` JSON files: the file format graphs are exchanged in.

Promises: an exact round trip (``to_dict(from_dict(d)) == d`` for every valid document, and
re-saving a loaded file gives the same bytes: insertion order is kept, ``indent=1``, a final
newline); every schema fault names its JSON path (``ops[3].inputs[1]: tensor "h7" is not
defined``); malformed JSON names line and column. The document's schema lives in
:mod:`graphs.document`; this module reads and writes text and files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graphs.document import FORMAT, document_text
from graphs.errors import SchemaError
from graphs.opgraph import OpGraph

__all__ = ["FORMAT", "dump", "dumps", "graph_from_dict", "graph_to_dict", "load", "loads",
           "save"]


def graph_to_dict(graph: OpGraph) -> dict[str, Any]:
    """The ``autoshard.graph/v1`` document of ``graph``."""
    return graph.to_dict()


def graph_from_dict(document: Any) -> OpGraph:
    """Check the document's schema (errors name the JSON path), build, then validate."""
    return OpGraph.from_dict(document)


def dumps(graph: OpGraph) -> str:
    """The JSON text of ``graph`` (deterministic)."""
    return document_text(graph.to_dict())


def save(graph: OpGraph, path: str | Path) -> None:
    """Write ``graph`` to ``path`` as ``autoshard.graph/v1`` JSON."""
    graph.save(path)


dump = save


def loads(text: str, file: str | None = None) -> OpGraph:
    """Parse and validate a graph from JSON text; SchemaError with line/column when malformed."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        msg = f"malformed JSON at line {error.lineno} column {error.colno}: {error.msg}"
        raise SchemaError("$", msg, file) from None
    try:
        return graph_from_dict(document)
    except SchemaError as error:
        raise SchemaError(error.path, str(error).split(": ", 1)[1], file) from None


def load(path: str | Path) -> OpGraph:
    """Read a graph file (``autoshard.graph/v1``), checked against the schema and validated.

    Example:
        >>> import tempfile, os
        >>> from graphs import OpGraph, DType
        >>> g = OpGraph(name="tiny")
        >>> g.mark_output(g.op("exp", [g.input("x", (2,), DType.F32)], name="e"))
        >>> path = os.path.join(tempfile.mkdtemp(), "g.json")
        >>> g.save(path)
        >>> load(path) == g
        True
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise SchemaError("$", f"cannot read graph file: {error.strerror}", str(path)) from None
    except UnicodeDecodeError as error:  # a binary file, or text in another encoding
        raise SchemaError("$", f"not UTF-8 text (byte {error.start}): a graph file is "
                          "autoshard.graph/v1 JSON", str(path)) from None
    return loads(text, str(path))
