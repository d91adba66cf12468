"""The staging area in which :mod:`graphs.autodiff` builds backward ops before they enter a graph.

Why stage instead of adding ops directly: the final name of a gradient (``grad/<tensor>``) is
only known once every contribution to it has been summed, and an :class:`~graphs.OpGraph` is
append-only. Staged ops are plain records whose output tensors may be renamed until something
reads them; :meth:`Stage.materialise` then adds them in order (so the graph re-checks every
shape). The stage is also the :class:`~graphs.ops._vjp.GradBuilder` the VJPs see.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphs.ir import Op
from graphs.opgraph import OpGraph
from graphs.ops.registry import TensorSpec, get_op


@dataclass(slots=True, kw_only=True)
class StagedOp:
    """An op waiting to be added: its outputs may still be renamed."""

    name: str
    kind: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)


class Stage:
    """Backward ops under construction, plus the forward graph they read."""

    def __init__(self, forward: OpGraph, extra: Mapping[str, TensorSpec]) -> None:
        self.forward = forward
        self.ops: list[StagedOp] = []
        self.specs: dict[str, TensorSpec] = dict(extra)
        self.producer: dict[str, StagedOp] = {}
        self.consumed: set[str] = set()
        self.aliases: dict[str, str] = {}
        self.reads: set[str] = set()
        self._prefix = ""
        self._count = 0

    # ------------------------------------------------------------ GradBuilder protocol
    def begin(self, prefix: str, aliases: Mapping[str, str] | None = None) -> None:
        """Start the ops of one VJP: names ``prefix``, ``prefix.1``, …; forward tensors read
        through ``aliases`` (recomputed copies)."""
        self._prefix, self._count = prefix, 0
        self.aliases = dict(aliases or {})
        self.reads = set()

    def emit(self, kind: str, inputs: Sequence[str], **attrs: Any) -> Any:
        name = self._prefix if self._count == 0 else f"{self._prefix}.{self._count}"
        self._count += 1
        return self.add(name, kind, inputs, attrs)

    def value(self, tensor: str) -> str:
        self.reads.add(tensor)
        return self.aliases.get(tensor, tensor)

    def spec(self, tensor: str) -> TensorSpec:
        if tensor in self.specs:
            return self.specs[tensor]
        found = self.forward.tensors[tensor]
        return TensorSpec(found.shape, found.dtype)

    def attrs(self, op: Op) -> dict[str, Any]:
        return self.forward.attrs(op)

    # ----------------------------------------------------------------------- staging
    def add(self, name: str, kind: str, inputs: Sequence[str], attrs: Mapping[str, Any],
            outputs: Sequence[str] | None = None) -> Any:
        """Stage one op (shapes inferred now, so a faulty VJP fails where it emits)."""
        opdef = get_op(kind, name)
        specs = opdef.infer(tuple(self.spec(t) for t in inputs),
                            {**opdef.optional_attrs, **attrs})
        if outputs is None:
            outputs = [f"{name}.out"] if len(specs) == 1 else \
                [f"{name}.out{i}" for i in range(len(specs))]
        staged = StagedOp(name=name, kind=kind, inputs=list(inputs), outputs=list(outputs),
                          attrs=dict(attrs))
        self.ops.append(staged)
        self.consumed.update(inputs)
        for out, spec in zip(outputs, specs, strict=True):
            self.specs[out] = spec
            self.producer[out] = staged
        return outputs[0] if opdef.num_outputs == 1 else tuple(outputs)

    def renameable(self, tensor: str) -> bool:
        """A staged tensor that nothing reads yet may still take another name."""
        return tensor in self.producer and tensor not in self.consumed

    def rename(self, tensor: str, new: str) -> None:
        if not self.renameable(tensor) or new in self.specs or new in self.forward.tensors:
            raise AssertionError(f'autodiff: cannot rename "{tensor}" to "{new}"')
        staged = self.producer.pop(tensor)
        staged.outputs[staged.outputs.index(tensor)] = new
        self.producer[new] = staged
        self.specs[new] = self.specs.pop(tensor)

    def materialise(self, graph: OpGraph) -> None:
        """Append every staged op to ``graph`` in staging order."""
        for staged in self.ops:
            graph.op(staged.kind, staged.inputs, name=staged.name, outputs=staged.outputs,
                     **staged.attrs)
