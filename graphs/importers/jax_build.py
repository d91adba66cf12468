"""The graph under construction while a jaxpr is walked: values, folded constants, pending ops.

Why a separate builder: mapping rules (:mod:`graphs.importers.jax_rules`) only say which kinds
to emit; this module owns everything that must be the same for every rule — shape inference
through the registry (and a check that it agrees with JAX's avals), constant folding, layer
inference and naming (:mod:`graphs.importers.jax_names`), dead-code removal, and the final
:class:`~graphs.OpGraph`. Ops are collected first and added to the graph only after dead ones
(JAX leaves unused residuals in ``grad`` jaxprs) are dropped, so names have no gaps.

Constants: an equation whose inputs are all constants is evaluated at import time with JAX
(``iota``, masks, ``jnp.ones``); the result stays a :class:`Const` until an op needs it as an
operand. Then a uniform constant becomes a scalar graph input (``const.N``, broadcast by the
consumer or by ``broadcast_to``) and any other constant a full-size graph input; the values
are kept in :attr:`Builder.constants` so the graph can still be evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphs.errors import ShapeError
from graphs.importers.jax_names import Namer, op_base
from graphs.importers.jaxpr_walk import Context
from graphs.ir import DType, TensorRole
from graphs.opgraph import OpGraph
from graphs.ops.registry import TensorSpec, get_op


def dtype_of(value: Any) -> DType:
    """Our DType of a NumPy/JAX dtype; ShapeError names dtypes we have no member for."""
    name = np.dtype(value).name
    try:
        return DType.parse(name)
    except ValueError:
        raise ShapeError(f"jax import: dtype {name} has no autoshard equivalent") from None


@dataclass(eq=False, slots=True)
class Value:
    """A tensor of the graph being built (an op output, a source or a materialised const)."""

    id: int
    shape: tuple[int, ...]
    dtype: DType
    layer: str | None = None
    rank: int = -1
    source: str | None = None      # "param", "input", "const" for source tensors
    name: str | None = None        # fixed names (sources, renamed outputs)
    grad_of: str | None = None

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype)


@dataclass(frozen=True, slots=True)
class Const:
    """A value known at import time (folded); becomes a graph input only when used."""

    value: np.ndarray

    @property
    def uniform(self) -> bool:
        flat = self.value.reshape(-1)
        return flat.size > 0 and bool(np.all(flat == flat[0]))

    @property
    def scalar(self) -> Any:
        return self.value.reshape(-1)[0].item()


@dataclass(slots=True)
class Pending:
    base: str
    kind: str
    inputs: list[Value]
    outputs: list[Value]
    attrs: dict[str, Any]


@dataclass(slots=True)
class _EqnState:
    primitive: str = ""
    context: Context = field(default_factory=Context)
    layer: str | None = None
    rank: int = -1


class Builder:
    """Collects values and ops for one import; see the module docstring."""

    def __init__(self) -> None:
        self.values: list[Value] = []
        self.pending: list[Pending] = []
        self.constants: dict[int, np.ndarray] = {}
        self._scalars: dict[tuple[str, Any], Value] = {}
        self._eqn = _EqnState()
        self.sites: dict[int, tuple[int, ...]] = {}

    # ---- values --------------------------------------------------------------------------
    def new_value(self, spec: TensorSpec, **fields: Any) -> Value:
        value = Value(id=len(self.values), shape=tuple(spec.shape), dtype=spec.dtype, **fields)
        self.values.append(value)
        return value

    def source(self, kind: str, name: str, shape: tuple[int, ...], dtype: DType,
               layer: str | None = None, rank: int = -1) -> Value:
        return self.new_value(TensorSpec(shape, dtype), source=kind, name=name, layer=layer,
                              rank=rank)

    def operand(self, item: Value | Const) -> Value:
        """``item`` as a graph tensor of its full shape (materialising a constant)."""
        if isinstance(item, Value):
            return item
        if not item.uniform:
            value = self.new_value(TensorSpec(item.value.shape, dtype_of(item.value.dtype)),
                                   source="const")
            self.constants[value.id] = np.array(item.value)
            return value
        scalar = self.scalar(item)
        if not item.value.shape:
            return scalar
        shape = list(item.value.shape)
        return self.emit("broadcast_to", [scalar], shape=shape, dims=list(range(len(shape))))[0]

    def scalar(self, item: Const) -> Value:
        """A uniform constant as one shared scalar graph input."""
        dtype = dtype_of(item.value.dtype)
        key = (dtype.value, repr(item.scalar))
        if key not in self._scalars:
            value = self.new_value(TensorSpec((), dtype), source="const")
            self.constants[value.id] = np.asarray(item.scalar, dtype=item.value.dtype)
            self._scalars[key] = value
        return self._scalars[key]

    # ---- ops -----------------------------------------------------------------------------
    def begin(self, primitive: str, context: Context, inputs: list[Value | Const]) -> None:
        """Set the equation that the next ``emit`` calls belong to (naming, layer)."""
        values = [v for v in inputs if isinstance(v, Value)]
        params = [v for v in values if v.source == "param"]
        if params:
            layer, rank = params[0].layer, params[0].rank
        else:
            ranked = [v for v in values if v.layer is not None]
            pick = (min if context.backward else max)
            best = pick(ranked, key=lambda v: v.rank) if ranked else None
            layer, rank = (best.layer, best.rank) if best else (None, -1)
        self._eqn = _EqnState(primitive, context, layer, rank)

    def emit(self, kind: str, inputs: list[Value], **attrs: Any) -> list[Value]:
        """Add one op of ``kind``; its outputs' shapes come from the registry's inference."""
        opdef = get_op(kind)
        specs = opdef.infer(tuple(v.spec for v in inputs), {**opdef.optional_attrs, **attrs})
        state = self._eqn
        outputs = [self.new_value(spec, layer=state.layer, rank=state.rank) for spec in specs]
        base = op_base(state.context.scopes, state.layer, state.primitive,
                       state.context.backward)
        self.pending.append(Pending(base, kind, list(inputs), outputs, dict(attrs)))
        return outputs

    def check(self, value: Value, aval: Any, eqn: Any) -> None:
        """Our inferred shape/dtype must equal JAX's; anything else is an importer bug."""
        shape, dtype = tuple(int(d) for d in aval.shape), dtype_of(aval.dtype)
        if value.shape != shape or value.dtype is not dtype:
            msg = (f"jax import: {eqn.primitive.name} gave {list(value.shape)} "
                   f"{value.dtype.value}, jax says {list(shape)} {dtype.value}: {eqn}")
            raise AssertionError(msg)

    # ---- assembly ------------------------------------------------------------------------
    def live_ops(self, outputs: list[Value]) -> list[Pending]:
        """Pending ops that some output depends on, in program order."""
        live = {v.id for v in outputs}
        kept: list[Pending] = []
        for op in reversed(self.pending):
            if any(v.id in live for v in op.outputs):
                kept.append(op)
                live.update(v.id for v in op.inputs)
        return kept[::-1]

    def assemble(self, name: str, sources: list[Value], outputs: list[Value]) -> OpGraph:
        """The graph: parameters and inputs, used constants, live ops, marked outputs."""
        ops = self.live_ops(outputs)
        used = {v.id for op in ops for v in op.inputs} | {v.id for v in outputs}
        graph = OpGraph(name=name)
        for value in sources:
            add = graph.param if value.source == "param" else graph.input
            add(value.name, value.shape, value.dtype)
        taken = [v.name for v in sources] + [v.name for v in outputs if v.name]
        consts = Namer(taken)
        for value in self.values:
            if value.source == "const" and value.id in used:
                value.name = consts("const")
                graph.input(value.name, value.shape, value.dtype)
        namer = Namer(taken)
        for op in ops:
            op_name = namer(op.base)
            for index, out in enumerate(op.outputs):
                if out.name is None:
                    out.name = f"{op_name}.out" if len(op.outputs) == 1 else \
                        f"{op_name}.out{index}"
            graph.op(op.kind, [v.name for v in op.inputs], name=op_name,
                     outputs=[v.name for v in op.outputs], **op.attrs)
        for value in outputs:
            if value.grad_of is not None:
                graph.set_role(value.name, TensorRole.ACTIVATION, grad_of=value.grad_of)
            graph.mark_output(value.name)
        return graph
