"""Reverse-mode autodiff over the operator-graph IR: forward graph in, forward + backward out.

Why it exists: a planner that sees only the forward pass cannot price gradient
synchronisation or find FSDP. :func:`backward_graph` appends the backward pass, built from
each op kind's registered VJP (contract in :mod:`graphs.ops._vjp`), so backward ops are
ordinary registered ops with dimension signatures that the planner shards like any other.

Promises: the forward ops are kept unchanged (names, tensors, insertion order) and the
backward ops follow them, so ``topo_ops()`` is the sequential schedule "forward, then backward
in reverse forward order" (the memory model reads liveness off it); gradients exist only for
parameters and what leads to them (never for token ids, targets, rope tables or the first
activation); every parameter gradient is ``grad/<param>`` with role GRAD and ``grad_of``;
gradients keep the dtype of what they differentiate; everything is deterministic.
Non-goals: higher-order derivatives, in-place ops, gradients of the optimizer step kinds.

Example:
    >>> from graphs import OpGraph
    >>> g = OpGraph(name="tiny")
    >>> x = g.input("x", (4, 3), "f64")
    >>> w = g.param("w", (3, 2), "f64")
    >>> y = g.op("einsum", [x, w], equation="bh,hf->bf", name="mm", outputs=["y"])
    >>> g.mark_output(g.op("sum", [y], dims=[0, 1], name="loss", outputs=["loss"]))
    >>> full = backward_graph(g)
    >>> [op.name for op in full.topo_ops()][-3:], full.tensors["grad/w"].grad_of
    (['grad/loss', 'bwd/loss', 'bwd/mm'], 'w')
"""

from __future__ import annotations

import difflib
import enum
import logging
from dataclasses import dataclass

from graphs.autodiff_recompute import RECOMPUTE_PREFIX, Recompute, RecomputePlan, plan_recompute
from graphs.autodiff_stage import Stage
from graphs.errors import GraphError
from graphs.ir import Op, TensorRole
from graphs.opgraph import SOURCE_KINDS, OpGraph
from graphs.ops.registry import TensorSpec, get_op

logger = logging.getLogger(__name__)

GRAD_PREFIX = "grad/"
BACKWARD_PREFIX = "bwd/"
OPTIMIZER_PREFIX = "opt/"

__all__ = [
    "AutodiffError", "NoGradientError", "NotDifferentiableError", "Phase", "Recompute",
    "UnknownLossError", "backward_graph", "grad_name", "phase_of",
]


@enum.unique
class Phase(enum.Enum):
    """Where an op runs in a training step, read from its name: FORWARD (no prefix),
    RECOMPUTE (``recompute/``), BACKWARD (``bwd/``), OPTIMIZER (``opt/``)."""

    FORWARD = "forward"
    RECOMPUTE = "recompute"
    BACKWARD = "backward"
    OPTIMIZER = "optimizer"

    def __repr__(self) -> str:
        return f"Phase.{self.name}"


def phase_of(op_name: str) -> Phase:
    """The phase of an op from its name prefix.

    Example:
        >>> phase_of("bwd/layers.0.mlp.up"), phase_of("layers.0.mlp.up")
        (Phase.BACKWARD, Phase.FORWARD)
    """
    for prefix, phase in ((BACKWARD_PREFIX, Phase.BACKWARD), (RECOMPUTE_PREFIX, Phase.RECOMPUTE),
                          (OPTIMIZER_PREFIX, Phase.OPTIMIZER)):
        if op_name.startswith(prefix):
            return phase
    return Phase.FORWARD


def grad_name(tensor: str) -> str:
    """The name of the gradient of ``tensor``: ``"grad/" + tensor``."""
    return GRAD_PREFIX + tensor


class AutodiffError(GraphError):
    """Root of the errors of :func:`backward_graph`; ``graph`` names the forward graph."""

    def __init__(self, message: str, *, graph: str) -> None:
        self.graph = graph
        super().__init__(message)


class UnknownLossError(AutodiffError):
    """The loss tensor is missing, ambiguous or not floating point."""

    def __init__(self, message: str, *, graph: str, loss: str | None) -> None:
        self.loss = loss
        super().__init__(message, graph=graph)


class NoGradientError(AutodiffError):
    """No parameter influences the loss, so there is nothing to differentiate."""

    def __init__(self, message: str, *, graph: str, loss: str) -> None:
        self.loss = loss
        super().__init__(message, graph=graph)


class NotDifferentiableError(AutodiffError):
    """An op on the path from a parameter to the loss has a kind without a VJP."""

    def __init__(self, message: str, *, graph: str, op: str, kind: str) -> None:
        self.op, self.kind = op, kind
        super().__init__(message, graph=graph)


@dataclass(frozen=True, slots=True, kw_only=True)
class Flow:
    """Which ops the backward visits: ``active`` maps op name → input indices that need a
    gradient; ``params`` lists the parameters that get one, in forward order."""

    active: dict[str, frozenset[int]]
    params: tuple[str, ...]


def backward_graph(forward: OpGraph, *, loss: str | None = None,
                   recompute: str = "none") -> OpGraph:
    """A new graph (same name): ``forward``'s ops unchanged, then the backward ops.

    The seed cotangent is a graph input ``grad/<loss>`` of the loss's shape and dtype: for a
    scalar loss it holds 1.0 at run time; for a non-scalar output (the zoo's ``mlp`` and
    ``transformer`` have no loss) it is the incoming gradient, like torch's
    ``y.backward(dy)``. Backward ops are named ``bwd/<forward op>`` (``.1``, ``.2`` … when a
    VJP emits several; summing the contributions of a tensor with several consumers is part
    of the consumer's backward); recompute ops ``recompute/<forward op>``; activation
    gradients ``grad/<tensor>`` (role ACTIVATION) unless one gradient is shared by several
    tensors (``add`` passes its gradient through unchanged). Parameters that do not influence
    the loss get no gradient; parameter gradients are not marked as outputs (the optimizer
    step consumes them).

    Args:
        forward: the forward graph; not modified.
        loss: the tensor to differentiate; default the graph's single marked output.
        recompute: "none", "selective", "selective-op" or "full" (see
            :mod:`graphs.autodiff_recompute`).

    Returns:
        The forward-plus-backward graph.

    Raises:
        UnknownLossError: no such tensor, several outputs and no ``loss``, or an integer loss.
        NoGradientError: no parameter reaches the loss.
        NotDifferentiableError: a kind without a VJP lies between a parameter and the loss.
        AutodiffError: an unknown ``recompute`` mode.
    """
    mode = _recompute_mode(forward, recompute)
    loss = _loss_tensor(forward, loss)
    flow = analyse(forward, loss)
    reads: dict[str, frozenset[str]] = {}
    if mode is not Recompute.NONE:
        _reverse_pass(forward, loss, flow, RecomputePlan(), reads)
    stage = _reverse_pass(forward, loss, flow, plan_recompute(forward, reads, mode), {})
    return _assemble(forward, loss, flow, stage)


def _recompute_mode(forward: OpGraph, recompute: str) -> Recompute:
    try:
        return Recompute(str(recompute).strip().lower())
    except ValueError:
        choices = ", ".join(m.value for m in Recompute)
        msg = f'unknown recompute mode "{recompute}"; choose one of {choices}'
        raise AutodiffError(msg, graph=forward.name) from None


def _loss_tensor(forward: OpGraph, loss: str | None) -> str:
    if loss is None:
        if len(forward.outputs) != 1:
            msg = (f'graph "{forward.name}" has outputs {list(forward.outputs)}; pass loss= '
                   "to say which tensor to differentiate")
            raise UnknownLossError(msg, graph=forward.name, loss=None)
        loss = forward.outputs[0]
    tensor = forward.tensors.get(loss)
    if tensor is None:
        close = difflib.get_close_matches(loss, list(forward.tensors), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        msg = f'loss "{loss}" is not a tensor of graph "{forward.name}"{hint}'
        raise UnknownLossError(msg, graph=forward.name, loss=loss)
    if not tensor.dtype.is_float:
        msg = f'loss "{loss}" is {tensor.dtype.value}; only floating-point tensors have gradients'
        raise UnknownLossError(msg, graph=forward.name, loss=loss)
    return loss


def analyse(forward: OpGraph, loss: str) -> Flow:
    """Which ops lie on a path parameter → loss, and which of their inputs need gradients."""
    order = forward.topo_ops()
    requires: set[str] = set()
    for op in order:
        if op.kind == "param" or (op.kind not in SOURCE_KINDS
                                  and any(t in requires for t in op.inputs)):
            requires.update(t for t in op.outputs if forward.tensors[t].dtype.is_float)
    reaches = {loss}
    for op in reversed(order):
        if op.kind not in SOURCE_KINDS and any(t in reaches for t in op.outputs):
            reaches.update(op.inputs)
    wanted = requires & reaches
    active: dict[str, frozenset[int]] = {}
    for op in order:
        needed = frozenset(i for i, t in enumerate(op.inputs) if t in wanted)
        if op.kind not in SOURCE_KINDS and needed and any(t in wanted for t in op.outputs):
            active[op.name] = needed
            _check_vjp(forward, op)
    params = tuple(op.name for op in order if op.kind == "param" and op.name in wanted)
    if not params:
        msg = (f'no parameter of graph "{forward.name}" influences "{loss}"; '
               "nothing to differentiate")
        raise NoGradientError(msg, graph=forward.name, loss=loss)
    return Flow(active=active, params=params)


def _check_vjp(forward: OpGraph, op: Op) -> None:
    if get_op(op.kind, op.name).vjp is None:
        msg = (f'op "{op.name}" (kind {op.kind}) lies between a parameter and the loss but its '
               "kind has no VJP; register one (vjp=) or keep it off the loss path")
        raise NotDifferentiableError(msg, graph=forward.name, op=op.name, kind=op.kind)


class _Gradients:
    """Running gradient per tensor: contributions summed as they arrive (eagerly, so a
    summand dies right away), named ``grad/<tensor>`` when complete."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.current: dict[str, str] = {}
        self.final: set[str] = set()

    def contribute(self, tensor: str, grad: str) -> None:
        want, got = self.stage.spec(tensor), self.stage.spec(grad)
        if want != got:
            raise AssertionError(f'autodiff: gradient "{grad}" of "{tensor}" is {got}, '
                                 f"expected {want}")
        previous = self.current.get(tensor)
        self.current[tensor] = grad if previous is None else \
            self.stage.emit("add", [previous, grad])

    def finish(self, tensor: str) -> str | None:
        grad = self.current.get(tensor)
        if grad is None or grad in self.final:
            return grad
        name = grad_name(tensor)
        shared = sum(1 for g in self.current.values() if g == grad) > 1
        if not shared and self.stage.renameable(grad) and name not in self.stage.specs \
                and name not in self.stage.forward.tensors:
            self.stage.rename(grad, name)
            self.current[tensor] = grad = name
        self.final.add(grad)
        return grad

    def finish_param(self, param: str) -> None:
        grad = self.finish(param)
        if grad is None or grad == grad_name(param):
            return
        self.stage.begin(BACKWARD_PREFIX + param)
        dtype = self.stage.spec(param).dtype.value
        copy = self.stage.emit("cast", [grad], dtype=dtype)   # a copy: same dtype
        self.stage.rename(copy, grad_name(param))
        self.current[param] = grad_name(param)


def _reverse_pass(forward: OpGraph, loss: str, flow: Flow, plan: RecomputePlan,
                  reads: dict[str, frozenset[str]]) -> Stage:
    """Visit forward ops in reverse order, calling each active op's VJP; ``reads`` collects
    the forward tensors each VJP read (for the recompute plan)."""
    spec = forward.tensors[loss]
    stage = Stage(forward, {grad_name(loss): TensorSpec(spec.shape, spec.dtype)})
    grads = _Gradients(stage)
    grads.current[loss] = grad_name(loss)
    params = set(flow.params)
    for op in reversed(forward.topo_ops()):
        if op.name in params:
            grads.finish_param(op.name)
        needed = flow.active.get(op.name)
        if needed is None:
            continue
        dys = tuple(grads.finish(t) for t in op.outputs)
        if all(dy is None for dy in dys):
            continue
        plan.before_backward_of(stage, op.name)
        stage.begin(BACKWARD_PREFIX + op.name, plan.aliases_for(op.name))
        result = get_op(op.kind, op.name).vjp(stage, op, dys, needed)  # type: ignore[misc]
        reads[op.name] = frozenset(stage.reads)
        for index in sorted(needed):
            if result[index] is not None:
                grads.contribute(op.inputs[index], result[index])
    return stage


def _assemble(forward: OpGraph, loss: str, flow: Flow, stage: Stage) -> OpGraph:
    graph = OpGraph(name=forward.name)
    for tensor in forward.tensors.values():
        graph.add_tensor(tensor)
    for op in forward.ops:
        graph.add_op(op)
    for output in forward.outputs:
        graph.mark_output(output)
    seed = forward.tensors[loss]
    graph.input(grad_name(loss), seed.shape, seed.dtype)
    stage.materialise(graph)
    for param in flow.params:
        graph.set_role(grad_name(param), TensorRole.GRAD, grad_of=param)
    logger.debug("backward of %s: %d forward ops, %d backward ops, %d parameter gradients",
                 forward.name, len(forward.ops), len(stage.ops), len(flow.params))
    return graph
