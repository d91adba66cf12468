"""Append one optimizer step per parameter to a graph that holds parameter gradients.

Why here and not in the planner: the optimizer's state is graph data like any other tensor
(source ops of kind ``state``, role OPTIMIZER_STATE, ``grad_of`` the parameter), so the memory
model, the strategy search and the exporters treat it uniformly, and a plan shards each
parameter's master copy and moments exactly as it shards the step op that reads them.

Naming: for parameter ``p`` the step op is ``opt/p``; its state tensors ``opt/p.m``,
``opt/p.v`` and (mixed precision) ``opt/p.master``; its outputs ``p.next``, ``opt/p.m.next``,
``opt/p.v.next`` and ``opt/p.master.next``, marked as graph outputs (the next step's values).
"""

from __future__ import annotations

import enum
from typing import Any

from graphs.errors import StructureError
from graphs.ir import DType, TensorRole
from graphs.opgraph import OpGraph
from graphs.ops.optimizer import STATE_DTYPE

OPTIMIZER_PREFIX = "opt/"
NEXT_SUFFIX = ".next"


@enum.unique
class Optimizer(enum.Enum):
    """SGD (no state) or AdamW (two fp32 moments, plus fp32 master weights for 16-bit params)."""

    SGD = "sgd"
    ADAMW = "adamw"

    @classmethod
    def parse(cls, text: str | Optimizer) -> Optimizer:
        if isinstance(text, Optimizer):
            return text
        try:
            return cls(text.strip().lower())
        except ValueError:
            choices = ", ".join(m.value for m in cls)
            raise StructureError(f'unknown optimizer "{text}"; choose one of {choices}') from None


def parameter_gradients(graph: OpGraph) -> list[tuple[str, str]]:
    """(parameter, gradient tensor) pairs in graph order."""
    return [(t.grad_of, t.name) for t in graph.tensors.values()
            if t.role is TensorRole.GRAD and t.grad_of is not None]


def append_optimizer(graph: OpGraph, optimizer: str | Optimizer = Optimizer.ADAMW, *,
                     master_weights: bool | None = None, **hyper: Any) -> OpGraph:
    """Add a step op (and its state sources) for every parameter gradient of ``graph``.

    Args:
        graph: a graph with GRAD tensors tied to their parameters; modified in place.
        optimizer: "sgd" or "adamw".
        master_weights: keep an fp32 master copy (AdamW only); default: when the parameter
            is 16-bit (bf16/f16), as mixed-precision training does.
        **hyper: step attrs (lr, beta1, beta2, eps, weight_decay, step).

    Returns:
        ``graph``, for chaining.
    """
    kind = Optimizer.parse(optimizer)
    pairs = parameter_gradients(graph)
    if not pairs:
        raise StructureError(f'graph "{graph.name}" has no parameter gradients to optimize; '
                             "build it with graphs.autodiff.backward_graph first")
    for param, grad in pairs:
        if kind is Optimizer.SGD:
            _sgd(graph, param, grad, hyper)
        else:
            _adamw(graph, param, grad, master_weights, hyper)
    return graph


def _sgd(graph: OpGraph, param: str, grad: str, hyper: dict[str, Any]) -> None:
    attrs = {k: v for k, v in hyper.items() if k == "lr"}
    graph.op("sgd_step", [param, grad], name=OPTIMIZER_PREFIX + param,
             outputs=[param + NEXT_SUFFIX], **attrs)
    _mark_next(graph, param, [param + NEXT_SUFFIX])


def _adamw(graph: OpGraph, param: str, grad: str, master_weights: bool | None,
           hyper: dict[str, Any]) -> None:
    tensor = graph.tensors[param]
    if master_weights is None:
        master_weights = tensor.dtype in (DType.BF16, DType.F16)
    prefix = OPTIMIZER_PREFIX + param
    states = [graph.state(f"{prefix}.{what}", tensor.shape, STATE_DTYPE, of=param)
              for what in ("m", "v", *(("master",) if master_weights else ()))]
    outputs = [param + NEXT_SUFFIX, *(state + NEXT_SUFFIX for state in states)]
    graph.op("adamw_step", [param, grad, *states], name=prefix, outputs=outputs, **hyper)
    _mark_next(graph, param, outputs)


def _mark_next(graph: OpGraph, param: str, outputs: list[str]) -> None:
    for name in outputs:
        graph.mark_output(name)
        graph.set_role(name, TensorRole.OUTPUT, grad_of=param)
