"""OpGraph: the operator graph every other package plans over, kept on a networkx DAG.

Invariants it promises once :meth:`OpGraph.validate` passes (and :meth:`OpGraph.op` checks them
as each op is built): every tensor has exactly one producer op (graph inputs and parameters
come from the source kinds ``"input"`` and ``"param"``), every op kind is registered, its
attributes are the declared ones with the declared types, and every tensor's shape and dtype
equal what the registry's shape inference derives. Orders are deterministic: ``tensors`` and
``ops`` keep insertion order and :meth:`OpGraph.topo_ops` breaks ties by insertion order.
Non-goals: nothing here knows about meshes or sharding.

Example:
    >>> from graphs import OpGraph, DType
    >>> g = OpGraph(name="mlp")
    >>> x = g.input("x", (8, 16), DType.F32)
    >>> w = g.param("w", (16, 4), DType.F32)
    >>> y = g.op("einsum", [x, w], equation="bh,hf->bf", name="up", outputs=["h"])
    >>> g.mark_output(y)
    >>> g.tensors["h"].shape, [op.name for op in g.topo_ops()]
    ((8, 4), ['x', 'w', 'up'])
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import networkx as nx

from graphs.document import document_of, document_text, records_of
from graphs.errors import AttrError, SchemaError, ShapeError, StructureError
from graphs.ir import DType, Op, Tensor, TensorRole
from graphs.ops.registry import OpDef, TensorSpec, get_op
from graphs.signature import DimSignature

logger = logging.getLogger(__name__)

SOURCE_KINDS = ("input", "param", "state")


class OpGraph:
    """A DAG of ops over named tensors; see the module docstring for its invariants."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self._tensors: dict[str, Tensor] = {}
        self._ops: dict[str, Op] = {}
        self._order: dict[str, int] = {}
        self._producer: dict[str, str] = {}
        self._consumers: dict[str, list[str]] = {}
        self._outputs: list[str] = []
        self._nx = nx.DiGraph()
        self._topo: tuple[Op, ...] | None = None

    # ----------------------------------------------------------------- views
    @property
    def tensors(self) -> Mapping[str, Tensor]:
        """Every tensor by name, in insertion order (read-only view)."""
        return MappingProxyType(self._tensors)

    @property
    def ops(self) -> tuple[Op, ...]:
        """Every op in insertion order."""
        return tuple(self._ops.values())

    @property
    def outputs(self) -> tuple[str, ...]:
        """Tensors marked as graph results, in marking order."""
        return tuple(self._outputs)

    @property
    def nx(self) -> nx.DiGraph:
        """Ops as nodes (op names); an edge producer → consumer carries ``tensor`` (the first
        tensor linking them) and ``tensors`` (all of them, in consumer input order)."""
        return self._nx

    def op_by_name(self, name: str) -> Op:
        try:
            return self._ops[name]
        except KeyError:
            raise StructureError(f'no op named "{name}" in graph "{self.name}"') from None

    def producer(self, tensor: str) -> Op:
        """The op that produces ``tensor``; StructureError when it has none."""
        try:
            return self._ops[self._producer[tensor]]
        except KeyError:
            msg = f'tensor "{tensor}" has no producer in graph "{self.name}"'
            raise StructureError(msg) from None

    def consumers(self, tensor: str) -> tuple[Op, ...]:
        """Ops reading ``tensor``, in insertion order, each once."""
        return tuple(self._ops[n] for n in self._consumers.get(tensor, ()))

    def topo_ops(self) -> tuple[Op, ...]:
        """A topological order, insertion order breaking ties (so it is stable)."""
        if self._topo is None:
            try:
                names = nx.lexicographical_topological_sort(self._nx, key=self._order.__getitem__)
                self._topo = tuple(self._ops[n] for n in names)
            except nx.NetworkXUnfeasible:
                cycle = [edge[0] for edge in nx.find_cycle(self._nx)]
                raise StructureError(f"graph has a cycle through ops {cycle}") from None
        return self._topo

    def opdef(self, op: Op) -> OpDef:
        return get_op(op.kind, op.name)

    def attrs(self, op: Op) -> dict[str, Any]:
        """The op's attrs with the kind's defaults filled in (what the op callables get)."""
        opdef = self.opdef(op)
        return {**opdef.optional_attrs, **op.attrs}

    def specs(self, op: Op) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
        """Input and output shapes/dtypes of ``op`` as the registry callables take them."""
        return self._specs(op.inputs, op.name), self._specs(op.outputs, op.name)

    def signature(self, op: Op) -> DimSignature:
        """The op's dimension signature bound to its tensors' shapes."""
        ins, outs = self.specs(op)
        return self.opdef(op).signature(ins, outs, self.attrs(op))

    def _specs(self, names: Sequence[str], op_name: str) -> tuple[TensorSpec, ...]:
        specs = []
        for name in names:
            tensor = self._tensors.get(name)
            if tensor is None:
                msg = f'op "{op_name}" uses tensor "{name}", which is not defined'
                raise StructureError(msg)
            specs.append(TensorSpec(tensor.shape, tensor.dtype))
        return tuple(specs)

    # --------------------------------------------------------------- building
    def input(self, name: str, shape: Sequence[int], dtype: DType | str) -> str:
        """Add a graph input (source op ``input`` of the same name); returns the tensor name."""
        return self._source("input", name, shape, dtype, TensorRole.INPUT)

    def param(self, name: str, shape: Sequence[int], dtype: DType | str) -> str:
        """Add a parameter (source op ``param`` of the same name); returns the tensor name."""
        return self._source("param", name, shape, dtype, TensorRole.PARAM)

    def state(self, name: str, shape: Sequence[int], dtype: DType | str, *, of: str) -> str:
        """Add optimizer state of parameter ``of`` (source op ``state``, role OPTIMIZER_STATE):
        it persists across steps like a parameter, so the memory model keeps it resident."""
        return self._source("state", name, shape, dtype, TensorRole.OPTIMIZER_STATE, of)

    def set_role(self, tensor: str, role: TensorRole, grad_of: str | None = None) -> None:
        """Give an op-produced tensor its role (a parameter's gradient, a next-step value);
        the memory model and the exporters read roles, so autodiff sets them explicitly."""
        current = self._tensors.get(tensor)
        if current is None:
            raise StructureError(f'cannot set the role of "{tensor}": no such tensor')
        self._tensors[tensor] = Tensor(name=tensor, shape=current.shape, dtype=current.dtype,
                                       role=role, grad_of=grad_of)

    def _source(self, kind: str, name: str, shape: Sequence[int], dtype: DType | str,
                role: TensorRole, grad_of: str | None = None) -> str:
        dtype = dtype if isinstance(dtype, DType) else DType.parse(dtype)
        shape = tuple(int(d) for d in shape)
        self.add_tensor(Tensor(name=name, shape=shape, dtype=dtype, role=role, grad_of=grad_of))
        self.add_op(Op(name=name, kind=kind, inputs=(), outputs=(name,),
                       attrs={"shape": list(shape), "dtype": dtype.value}))
        return name

    def op(self, kind: str, inputs: Sequence[str], *, name: str | None = None,
           outputs: Sequence[str] | None = None, **attrs: Any) -> Any:
        """Add an op, inferring its outputs' shapes; returns the output name (a tuple of names
        when the kind has several outputs). Raises a GraphError naming the op on any fault."""
        opdef = get_op(kind, name)
        name = name if name is not None else self._fresh_name(kind)
        if name in self._ops:
            raise StructureError(f'op name "{name}" is used twice')
        op = Op(name=name, kind=kind, inputs=tuple(inputs), outputs=(), attrs=attrs)
        check_attrs(opdef, op)
        ins = self._specs(op.inputs, name)
        check_arity(opdef, op, len(ins))
        outs = opdef.infer(ins, {**opdef.optional_attrs, **op.attrs})
        if outputs is None:
            outputs = [f"{name}.out"] if len(outs) == 1 else \
                [f"{name}.out{i}" for i in range(len(outs))]
        if len(outputs) != len(outs):
            msg = f'op "{name}" ({kind}) produces {len(outs)} outputs but {len(outputs)} were named'
            raise StructureError(msg)
        taken = [out for out in outputs if out in self._tensors]
        if taken or len(set(outputs)) != len(outputs):
            msg = f'op "{name}" ({kind}): output names {list(outputs)} are already used'
            raise StructureError(msg)
        for out, spec in zip(outputs, outs, strict=True):
            self.add_tensor(Tensor(name=out, shape=spec.shape, dtype=spec.dtype))
        self.add_op(Op(name=name, kind=kind, inputs=op.inputs, outputs=tuple(outputs),
                       attrs=attrs))
        return outputs[0] if opdef.num_outputs == 1 else tuple(outputs)

    def _fresh_name(self, kind: str) -> str:
        index = len(self._ops)
        while f"{kind}_{index}" in self._ops:
            index += 1
        return f"{kind}_{index}"

    def mark_output(self, tensor: str) -> None:
        """Make ``tensor`` a graph result (role OUTPUT)."""
        current = self._tensors.get(tensor)
        if current is None:
            raise StructureError(f'cannot mark "{tensor}" as an output: no such tensor')
        if tensor not in self._outputs:
            self._outputs.append(tensor)
        self._tensors[tensor] = Tensor(name=tensor, shape=current.shape, dtype=current.dtype,
                                       role=TensorRole.OUTPUT, grad_of=current.grad_of)

    def add_tensor(self, tensor: Tensor) -> None:
        """Low-level: declare a tensor (its producer op is added separately)."""
        if tensor.name in self._tensors:
            raise StructureError(f'tensor "{tensor.name}" is defined twice')
        self._tensors[tensor.name] = tensor

    def add_op(self, op: Op) -> None:
        """Low-level: add an op whose output tensors are declared (or inferable now).

        Checks only structure (unique names, one producer per tensor); :meth:`validate`
        checks the rest, so ops may be added before the ops producing their inputs."""
        if op.name in self._ops:
            raise StructureError(f'op name "{op.name}" is used twice')
        for out in op.outputs:
            if out in self._producer:
                first = self._producer[out]
                msg = f'tensor "{out}" has two producers: ops "{first}" and "{op.name}"'
                raise StructureError(msg)
        if any(out not in self._tensors for out in op.outputs):
            self._declare_outputs(op)
        self._ops[op.name] = op
        self._order[op.name] = len(self._order)
        self._topo = None
        self._nx.add_node(op.name)
        for out in op.outputs:
            self._producer[out] = op.name
            for consumer in self._consumers.get(out, ()):
                self._link(op.name, consumer, out)
        for tensor in dict.fromkeys(op.inputs):
            users = self._consumers.setdefault(tensor, [])
            users.append(op.name)
            if tensor in self._producer:
                self._link(self._producer[tensor], op.name, tensor)

    def _declare_outputs(self, op: Op) -> None:
        opdef = get_op(op.kind, op.name)
        outs = opdef.infer(self._specs(op.inputs, op.name), {**opdef.optional_attrs, **op.attrs})
        if len(outs) != len(op.outputs):
            msg = f'op "{op.name}" ({op.kind}) produces {len(outs)} outputs, not {len(op.outputs)}'
            raise StructureError(msg)
        for out, spec in zip(op.outputs, outs, strict=True):
            if out not in self._tensors:
                self.add_tensor(Tensor(name=out, shape=spec.shape, dtype=spec.dtype))

    def _link(self, producer: str, consumer: str, tensor: str) -> None:
        if self._nx.has_edge(producer, consumer):
            data = self._nx.edges[producer, consumer]
            data["tensors"] = (*data["tensors"], tensor)
        else:
            self._nx.add_edge(producer, consumer, tensor=tensor, tensors=(tensor,))

    # ------------------------------------------------------------- validation
    def validate(self) -> None:
        """Re-check the whole graph; raises the first GraphError found, naming the culprit."""
        for op in self._ops.values():
            opdef = get_op(op.kind, op.name)
            check_attrs(opdef, op)
            check_arity(opdef, op, len(op.inputs))
            for tensor in op.inputs:
                if tensor not in self._producer:
                    msg = f'tensor "{tensor}" (input of op "{op.name}") is never produced'
                    raise StructureError(msg)
        for tensor in self._tensors:
            if tensor not in self._producer:
                raise StructureError(f'tensor "{tensor}" is never produced by any op')
        for op in self.topo_ops():
            self._check_inference(op)

    def _check_inference(self, op: Op) -> None:
        opdef = get_op(op.kind, op.name)
        ins, outs = self.specs(op)
        expected = opdef.infer(ins, self.attrs(op))
        if len(expected) != len(outs):
            msg = f'op "{op.name}" ({op.kind}) produces {len(expected)} outputs, not {len(outs)}'
            raise StructureError(msg)
        for tensor, want, got in zip(op.outputs, expected, outs, strict=True):
            if want != got:
                msg = (f'op "{op.name}" ({op.kind}) output "{tensor}": inference gives shape '
                       f"{list(want.shape)} {want.dtype.value} but the tensor is "
                       f"{list(got.shape)} {got.dtype.value}")
                raise ShapeError(msg)

    # -------------------------------------------------------------- equality/IO
    def to_dict(self) -> dict[str, Any]:
        """The ``autoshard.graph/v1`` document of this graph."""
        return document_of(self.name, tuple(self._tensors.values()), self.ops, self._outputs)

    @classmethod
    def from_dict(cls, document: Any) -> OpGraph:
        """Build and validate a graph from an ``autoshard.graph/v1`` document.

        Raises:
            SchemaError: naming the JSON path of the first fault.
        """
        records = records_of(document)
        graph = cls(name=records.name)
        for tensor in records.tensors:
            graph.add_tensor(tensor)
        for index, op in enumerate(records.ops):
            try:
                graph.add_op(op)
            except StructureError as error:
                raise SchemaError(f"ops[{index}]", str(error)) from None
        graph._outputs.extend(records.outputs)
        graph.validate()
        return graph

    def save(self, path: str | Path) -> None:
        """Write the graph as ``autoshard.graph/v1`` JSON (deterministic bytes)."""
        Path(path).write_text(document_text(self.to_dict()), encoding="utf-8")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OpGraph):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OpGraph(name={self.name!r}, ops={len(self._ops)}, tensors={len(self._tensors)})"


def check_arity(opdef: OpDef, op: Op, count: int) -> None:
    if opdef.num_inputs is not None and count != opdef.num_inputs:
        msg = f'op "{op.name}" ({op.kind}) takes {opdef.num_inputs} inputs, got {count}'
        raise ShapeError(msg)


def check_attrs(opdef: OpDef, op: Op) -> None:
    """Missing, unknown or wrongly typed attrs raise AttrError naming the op and the attr."""
    allowed = {**opdef.required_attrs, **opdef.optional_attrs}
    for attr in opdef.required_attrs:
        if attr not in op.attrs:
            msg = f'op "{op.name}" ({op.kind}) is missing attr "{attr}"'
            raise AttrError(msg)
    for attr, value in op.attrs.items():
        if attr not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            msg = f'op "{op.name}" ({op.kind}) has unknown attr "{attr}"; known attrs: {known}'
            raise AttrError(msg)
        if attr in opdef.required_attrs:
            accepted = opdef.required_attrs[attr]
        else:
            default = opdef.optional_attrs[attr]
            accepted = (type(None), int, float) if default is None else type(default)
        if not _type_ok(value, accepted):
            msg = (f'op "{op.name}" ({op.kind}) attr "{attr}" has the wrong type '
                   f"({type(value).__name__}: {value!r}); expected {_type_names(accepted)}")
            raise AttrError(msg)


def _as_tuple(accepted: Any) -> tuple[type, ...]:
    return accepted if isinstance(accepted, tuple) else (accepted,)


def _type_ok(value: Any, accepted: Any) -> bool:
    for kind in _as_tuple(accepted):
        if kind is bool and isinstance(value, bool):
            return True
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            return True
        if kind is list and isinstance(value, list | tuple):
            return all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        if kind not in (bool, int, float, list) and isinstance(value, kind):
            return True
    return False


def _type_names(accepted: Any) -> str:
    names = {list: "list[int]", type(None): "None"}
    return " or ".join(names.get(kind, kind.__name__) for kind in _as_tuple(accepted))
