"""What moving a tensor between two ops' strategies costs: one reshard matrix per use.

Matrices are cached by the two ops' structures within a run, so a model's identical layers
share the same read-only arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autoshard.planning.node_costs import SOURCE_KINDS, structure_key
from autoshard.reshard.find import reshard_cost_matrix
from autoshard.sharding.links import MeshLinks
from autoshard.strategies.derive import Strategy
from graphs import Op, OpGraph, get_op

Edge = tuple[int, int, np.ndarray, tuple[str, int, int]]
"""(producer index, consumer index, cost matrix, (tensor, producer output, consumer input))."""


def edge_matrices(graph: OpGraph, ops: list[Op], strategies: list[tuple[Strategy, ...]],
                  links: MeshLinks, hbm_bw: float | None) -> list[Edge]:
    """One matrix per (producer output → consumer input) use, in a stable order."""
    index = {op.name: i for i, op in enumerate(ops)}
    produced_by: dict[str, tuple[int, int]] = {}
    for i, op in enumerate(ops):
        for j, name in enumerate(op.outputs):
            produced_by[name] = (i, j)
    # within one run an op's strategies follow from its structure: key matrices by the two
    # structures (small ints), not by the tuples of shardings (slow to hash)
    structures: dict[tuple[Any, ...], int] = {}
    kind = [structures.setdefault(structure_key(graph, op), len(structures)) for op in ops]
    cache: dict[tuple[Any, ...], np.ndarray] = {}
    edges: list[Edge] = []
    for v, op in enumerate(ops):
        for i, name in enumerate(op.inputs):
            u, j = produced_by[name]
            tensor = graph.tensors[name]
            key = (kind[u], j, kind[v], i)
            matrix = cache.get(key)
            if matrix is None:
                srcs = tuple(s.outputs[j] for s in strategies[u])
                dsts = tuple(s.inputs[i] for s in strategies[v])
                matrix = reshard_cost_matrix(srcs, dsts, tensor.shape, tensor.dtype.itemsize,
                                             links, hbm_bw)
                matrix.setflags(write=False)  # shared by every edge of this structure
                cache[key] = matrix
            edges.append((u, v, matrix, (name, j, i)))
    del index
    return edges


NEXT_STEP = "<next step>"


def next_step_edges(graph: OpGraph, ops: list[Op], strategies: list[tuple[Strategy, ...]],
                    links: MeshLinks, hbm_bw: float | None) -> list[Edge]:
    """Edges from each in-place output of an optimizer step back to the source op that stores
    the value it overwrites: the updated parameter (or moment) must be in its stored layout
    when the next step starts. ZeRO-1/2's all-gather of updated parameters is this reshard.
    The edge's (tensor, output, input) names the updated tensor and the step's output index;
    the input index is -1 (the target is the source op's stored output)."""
    index = {op.name: i for i, op in enumerate(ops)}
    cache: dict[tuple[Any, ...], np.ndarray] = {}
    edges: list[Edge] = []
    for u, op in enumerate(ops):
        for j, k in enumerate(get_op(op.kind).updates[: len(op.outputs)]):
            source = graph.producer(op.inputs[k])
            if source.kind not in SOURCE_KINDS:
                continue
            v = index[source.name]
            tensor = graph.tensors[op.outputs[j]]
            key = (structure_key(graph, op), j, structure_key(graph, source))
            matrix = cache.get(key)
            if matrix is None:
                srcs = tuple(s.outputs[j] for s in strategies[u])
                dsts = tuple(s.outputs[0] for s in strategies[v])
                matrix = reshard_cost_matrix(srcs, dsts, tensor.shape, tensor.dtype.itemsize,
                                             links, hbm_bw)
                matrix.setflags(write=False)  # shared by every layer's copy of this update
                cache[key] = matrix
            edges.append((u, v, matrix, (tensor.name, j, -1)))
    return edges
