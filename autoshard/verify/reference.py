"""The unsharded side of the emulator: random inputs and the reference program in float64.

Why a module of its own: the truth every sharded value is compared with must not depend on
anything sharded. Inputs are drawn once per tensor from a seed derived from the tensor's name
(so a scaled-down graph and a mutated plan see the same numbers for the same tensors); floats
are computed in float64 whatever the graph's dtype says (bf16 rounding would hide real
errors behind tolerance); integer inputs are valid ids for every op that reads them (an
embedding's table rows, a loss's vocab); optimizer state is non-negative (AdamW's second
moment goes under a square root).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from graphs import Op, OpGraph, TensorRole, get_op

SOURCE_KINDS = ("input", "param", "state")


SCALE_FLOOR = 1e-4
"""Errors are relative to a value's largest magnitude, but never to less than this: a value
that is mathematically zero (the gradient of an attention key bias) comes out as rounding
noise of the terms that cancel, and is compared in absolute terms."""


@dataclass(frozen=True, slots=True)
class Error:
    """How far a value is from the truth: max absolute error, and that error relative to the
    largest magnitude of the true value (floored at :data:`SCALE_FLOOR`), so one near-zero
    element does not dominate."""

    abs_err: float
    rel_err: float

    def within(self, rtol: float) -> bool:
        return self.rel_err <= rtol


def tensor_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def source_value(graph: OpGraph, op: Op, seed: int) -> np.ndarray:
    """A random value for the tensor a source op produces (see the module docstring)."""
    tensor = graph.tensors[op.outputs[0]]
    rng = np.random.default_rng(tensor_seed(seed, tensor.name))
    shape = tensor.shape
    if tensor.dtype.value == "bool":
        return rng.random(shape) < 0.5
    if not tensor.dtype.is_float:
        return rng.integers(0, id_bound(graph, tensor.name), size=shape, dtype=np.int64)
    if tensor.role is TensorRole.OPTIMIZER_STATE:
        return rng.uniform(0.0, 0.01, size=shape)
    if tensor.role is TensorRole.PARAM and len(shape) == 1:
        return 1.0 + 0.1 * rng.standard_normal(shape)
    if tensor.role is TensorRole.PARAM and len(shape) >= 2:
        return rng.standard_normal(shape) / np.sqrt(max(shape[0], 1))
    return rng.standard_normal(shape)


def id_bound(graph: OpGraph, name: str) -> int:
    """The exclusive upper bound of valid ids in integer tensor ``name``: the smallest table
    (embedding rows, loss vocab) any consumer indexes with it; 2 when none does."""
    bounds = []
    for consumer in graph.consumers(name):
        for index, tensor in enumerate(consumer.inputs):
            if tensor != name:
                continue
            if consumer.kind == "embedding" and index == 0:
                bounds.append(graph.tensors[consumer.inputs[1]].shape[0])
            elif consumer.kind == "cross_entropy" and index == 1:
                bounds.append(graph.tensors[consumer.inputs[0]].shape[-1])
    return max(1, min(bounds)) if bounds else 2


def as_float64(array: np.ndarray) -> np.ndarray:
    """Floats (including 16- and 8-bit ones) become float64; ints and bools stay."""
    array = np.asarray(array)
    if array.dtype.kind in "iub":
        return array
    return array.astype(np.float64, copy=False)


def run_reference(graph: OpGraph, op: Op, values: Mapping[str, np.ndarray]
                  ) -> tuple[np.ndarray, ...]:
    """The op's NumPy reference on the unsharded inputs, outputs in float64."""
    outputs = get_op(op.kind, op.name).reference([values[t] for t in op.inputs],
                                                 graph.attrs(op))
    return tuple(as_float64(o) for o in outputs)


def reference_values(graph: OpGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """Every tensor's unsharded value: the random sources of :func:`source_value` and each
    op's reference (floats in float64), in topological order. For checks that feed a whole
    plan's tensors to something else (the exported scripts); the emulator keeps only what is
    live.

    Example:
        >>> from graphs import zoo
        >>> graph = zoo.build("mlp", layers=1, hidden=4, ffn=8, batch=2, seq=2)
        >>> values = reference_values(graph)
        >>> len(values) == len(graph.tensors), values["layers.0.mlp.up.out"].shape
        (True, (2, 2, 8))
    """
    values: dict[str, np.ndarray] = {}
    for op in graph.topo_ops():
        if op.kind in SOURCE_KINDS:
            values[op.outputs[0]] = source_value(graph, op, seed)
        else:
            values.update(zip(op.outputs, run_reference(graph, op, values), strict=True))
    return values


def compare(got: np.ndarray, want: np.ndarray) -> Error:
    """The error of ``got`` against the truth ``want`` (same shape required by the caller);
    NaN or infinity where the truth is finite is an infinite error."""
    got64 = np.asarray(got, dtype=np.float64)
    want64 = np.asarray(want, dtype=np.float64)
    if got64.size == 0:
        return Error(0.0, 0.0)
    abs_err = float(np.max(np.abs(got64 - want64)))
    if not math.isfinite(abs_err):
        same = np.array_equal(got64, want64, equal_nan=True)
        return Error(0.0, 0.0) if same else Error(math.inf, math.inf)
    scale = max(float(np.max(np.abs(want64))), SCALE_FLOOR)
    return Error(abs_err, abs_err / scale)
