"""The contract between :mod:`graphs.autodiff` and the op kinds' VJPs, plus shared helpers.

Why it exists: every op kind declares its vector-Jacobian product once, in its ``OpDef``
(``vjp=``), in terms of other *registered* ops, so the backward graph is an ordinary
operator graph that the planner shards like the forward one. A VJP is::

    vjp(grads: GradBuilder, op: Op, grad_outputs: tuple[str | None, ...],
        needed: frozenset[int]) -> tuple[str | None, ...]

* ``grads`` emits backward ops (named ``bwd/<op>``, ``bwd/<op>.1`` …) and maps a forward tensor
  to the copy the backward reads (``grads.value(t)``: the tensor itself, or its recomputed copy
  under activation recomputation). VJPs read forward tensors ONLY through ``value``.
* ``grad_outputs[j]`` is the gradient tensor of output ``j`` (same shape and dtype), or None
  when that output does not influence the loss (only multi-output kinds see None).
* ``needed`` holds the input indices whose gradients are wanted; the result is aligned with
  ``op.inputs``: a tensor of that input's shape and dtype for each needed index, None elsewhere.
  A VJP emits nothing for inputs that are not needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from graphs.ir import Op
from graphs.ops.registry import TensorSpec

Grads = tuple[str | None, ...]


class GradBuilder(Protocol):
    """What a VJP may do: emit ops, read forward tensors, look up shapes and attrs."""

    def emit(self, kind: str, inputs: Sequence[str], **attrs: Any) -> Any:
        """Add one backward op; returns its output name (a tuple for multi-output kinds)."""

    def value(self, tensor: str) -> str:
        """The name under which the backward reads forward tensor ``tensor``."""

    def spec(self, tensor: str) -> TensorSpec:
        """Shape and dtype of any tensor (forward or backward)."""

    def attrs(self, op: Op) -> dict[str, Any]:
        """``op``'s attrs with its kind's defaults filled in."""


def aligned(op: Op, needed: frozenset[int], grads: dict[int, str | None]) -> Grads:
    """A result tuple aligned with ``op.inputs`` holding ``grads`` for the needed indices."""
    return tuple(grads.get(i) if i in needed else None for i in range(len(op.inputs)))


def unbroadcast(grads: GradBuilder, dy: str, shape: tuple[int, ...]) -> str:
    """Reduce ``dy`` (of the broadcast result shape) to an operand of ``shape``: ``sum`` over
    the dims the operand lacks or stretched from 1, then ``reshape`` back to the 1s.

    Example: operand [1, 8] of a [4, 3, 8] result → sum dims [0, 1] → [8] → reshape [1, 8].
    """
    out_shape = grads.spec(dy).shape
    offset = len(out_shape) - len(shape)
    dims = list(range(offset))
    dims += [offset + k for k, size in enumerate(shape) if size == 1 and out_shape[offset + k] != 1]
    if not dims:
        return dy
    summed = grads.emit("sum", [dy], dims=dims)
    if grads.spec(summed).shape == tuple(shape):
        return summed
    return grads.emit("reshape", [summed], shape=list(shape))


def add_all(grads: GradBuilder, terms: Sequence[str]) -> str:
    """Left-to-right sum of gradient contributions (deterministic order)."""
    total = terms[0]
    for term in terms[1:]:
        total = grads.emit("add", [total, term])
    return total
