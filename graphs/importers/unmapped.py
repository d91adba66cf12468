"""Which framework ops an imported graph could not map: the ``opaque`` ops and their targets.

Framework-neutral (the torch and JAX importers share it): an imported graph lists its own
unmapped ops (every ``opaque`` op carries the framework's op name in attr ``target``), so the
list survives a JSON round trip and needs no side file.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter

from graphs.opgraph import OpGraph

logger = logging.getLogger(__name__)


def unmapped_ops(graph: OpGraph) -> dict[str, int]:
    """Framework op name → how many ops of the graph are ``opaque`` with that target, sorted.

    Example:
        >>> g = OpGraph()
        >>> x = g.input("x", (4,), "f32")
        >>> y = g.op("opaque", [x], target="aten.cumsum.default", out_shapes=[[4]],
        ...          out_dtypes=["f32"])
        >>> unmapped_ops(g)
        {'aten.cumsum.default': 1}
    """
    counts = Counter(str(op.attrs["target"]) for op in graph.ops if op.kind == "opaque")
    return dict(sorted(counts.items()))


def warn_unmapped(counts: dict[str, int], model: str) -> None:
    """One :class:`UnmappedOpsWarning` naming every unmapped target with its count (nothing
    when none); a warning rather than a log line so Python callers see it once by default."""
    if not counts:
        return
    listed = ", ".join(f"{target} x{count}" for target, count in sorted(counts.items()))
    message = (f'model "{model}": {sum(counts.values())} op(s) have no registered kind and were '
               f"imported as opaque (all-replicate, no reference, no gradient): {listed}")
    logger.info(message)
    warnings.warn(message, UnmappedOpsWarning, stacklevel=3)


class UnmappedOpsWarning(UserWarning):
    """Some framework ops were imported as ``opaque`` (the message names each, counted)."""
