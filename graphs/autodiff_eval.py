"""Run a whole graph with the ops' NumPy references: the oracle for gradient checks.

Why it exists: a backward graph is only right if executing it gives the derivatives finite
differences measure, and that needs an interpreter for whole graphs (forward, recompute,
backward alike). It executes ops in ``topo_ops()`` order; source tensors come from ``feeds``.
Non-goals: speed, sharding (``autoshard`` emulates meshes), mixed-precision rounding.

Example:
    >>> import numpy as np
    >>> from graphs import OpGraph
    >>> g = OpGraph()
    >>> x = g.input("x", (2,), "f64")
    >>> y = g.op("exp", [x], name="e", outputs=["y"])
    >>> evaluate(g, {"x": np.zeros(2)})["y"].tolist()
    [1.0, 1.0]
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from graphs.errors import StructureError
from graphs.opgraph import SOURCE_KINDS, OpGraph
from graphs.ops.registry import get_op


def evaluate(graph: OpGraph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor's value.

    Args:
        graph: any graph whose non-source kinds have references.
        feeds: a value for every source tensor (inputs, parameters, optimizer state).

    Returns:
        Tensor name → array, feeds included.

    Raises:
        StructureError: a source tensor has no feed (names it).
    """
    values = {name: np.asarray(value) for name, value in feeds.items()}
    for op in graph.topo_ops():
        if op.kind in SOURCE_KINDS:
            if op.outputs[0] not in values:
                msg = f'evaluate: no value fed for source tensor "{op.outputs[0]}" ({op.kind})'
                raise StructureError(msg)
            continue
        arrays = [values[t] for t in op.inputs]
        results = get_op(op.kind, op.name).reference(arrays, graph.attrs(op))
        values.update(zip(op.outputs, results, strict=True))
    return values
