"""The op registry: each op kind is declared once, with everything the planner needs to know.

An :class:`OpDef` bundles shape inference, FLOPs and bytes moved, a NumPy reference
implementation, the dimension signature (from which sharding strategies are *derived*), the
inputs in which the op is linear (for Partial pass-through), and a slot for the VJP that the
training-graph work fills. Registration returns the record so tests can call its parts.

Contract of the callables (``ins``/``outs`` are tuples of :class:`TensorSpec`):

* ``infer(ins, attrs) -> outs``: raises ShapeError/AttrError naming the problem.
* ``signature(ins, outs, attrs) -> DimSignature``: see :mod:`graphs.signature`.
* ``reference(arrays, attrs) -> tuple[np.ndarray, ...]``: pure NumPy, any float dtype; it must
  also be correct on *local shards* whenever the signature says the sharding is legal
  (that is what makes the derived strategies provably right).
* ``flops(ins, outs, attrs) -> float`` and ``bytes_moved(ins, outs, attrs) -> float``.
* ``partial_inputs``: sets of input indices S such that if exactly the inputs in S are
  Partial(sum) (the rest not Partial), the output is Partial(sum): ``add`` has ``{0, 1}``
  (P + P = P), ``mul`` and ``einsum`` have ``{0}`` and ``{1}`` (linear in each operand),
  ``neg``/``reshape``/``sum`` have ``{0}``.
* ``local_attrs(attrs, local_ins, local_outs) -> attrs`` (optional): the attrs to run the
  reference with on local shards, for kinds whose attrs name global sizes the local data
  cannot recover (``reshape``'s target shape: a split (a b) → a, b sharded on a or on b gives
  the same local data but different local shapes). None means the attrs are used unchanged;
  :func:`local_attrs` applies the rule.
* ``kernel(ins, outs, attrs) -> GemmShape | AttentionShape | None`` (optional): the kernel
  the op runs on these (local) shapes, for cost models that price GEMMs and flash attention by
  shape (:mod:`graphs.ops.kernel_shape`); None, or no hook, means "not one of those".
* ``updates`` (optimizer steps): ``updates[j]`` is the input that output ``j`` overwrites in
  place (the next step's parameter, master weights, moments). The memory model does not count
  such outputs twice, and the planner prices keeping the updated value in the layout its
  source op stores, so a plan is a fixed point from one step to the next.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphs.errors import UnknownOpError
from graphs.ir import DType
from graphs.signature import DimSignature


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape and dtype of an operand, what shape inference works on."""

    shape: tuple[int, ...]
    dtype: DType

    @property
    def numel(self) -> int:
        return int(math.prod(self.shape))  # exact (np.prod was 10x slower on a few dims)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


Specs = tuple[TensorSpec, ...]
Attrs = Mapping[str, Any]


def default_bytes_moved(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    """Read every input once and write every output once."""
    return float(sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs))


@dataclass(frozen=True, slots=True, kw_only=True)
class OpDef:
    """Everything known about one op kind. ``num_inputs`` None means variadic.
    ``required_attrs`` maps attr name → accepted Python type(s); ``optional_attrs`` maps
    attr name → default value."""

    kind: str
    infer: Callable[[Specs, Attrs], Specs]
    signature: Callable[[Specs, Specs, Attrs], DimSignature]
    reference: Callable[[Sequence[np.ndarray], Attrs], tuple[np.ndarray, ...]]
    flops: Callable[[Specs, Specs, Attrs], float]
    bytes_moved: Callable[[Specs, Specs, Attrs], float] = default_bytes_moved
    partial_inputs: tuple[frozenset[int], ...] = ()
    num_inputs: int | None = None
    num_outputs: int | None = 1
    required_attrs: Mapping[str, Any] = None  # type: ignore[assignment]
    optional_attrs: Mapping[str, Any] = None  # type: ignore[assignment]
    vjp: Callable[..., Any] | None = None
    doc: str = ""
    local_attrs: Callable[[Attrs, Specs, Specs], Attrs] | None = None
    updates: tuple[int, ...] = ()
    kernel: Callable[[Specs, Specs, Attrs], Any] | None = None

    def __post_init__(self) -> None:
        if self.required_attrs is None:
            object.__setattr__(self, "required_attrs", {})
        if self.optional_attrs is None:
            object.__setattr__(self, "optional_attrs", {})


def local_attrs(opdef: OpDef, attrs: Attrs, local_ins: Specs, local_outs: Specs) -> Attrs:
    """Attrs for running ``opdef.reference`` on local shards of the given local shapes."""
    if opdef.local_attrs is None:
        return attrs
    return opdef.local_attrs(attrs, local_ins, local_outs)


_REGISTRY: dict[str, OpDef] = {}


def register_op(opdef: OpDef) -> OpDef:
    """Add an op kind; registering a kind twice is a programming error."""
    if opdef.kind in _REGISTRY:
        raise AssertionError(f'op kind "{opdef.kind}" is registered twice')
    _REGISTRY[opdef.kind] = opdef
    return opdef


def get_op(kind: str, op_name: str | None = None) -> OpDef:
    """The registration of ``kind``; UnknownOpError lists close matches."""
    try:
        return _REGISTRY[kind]
    except KeyError:
        close = tuple(difflib.get_close_matches(kind, sorted(_REGISTRY), n=3, cutoff=0.5))
        raise UnknownOpError(kind, op_name, close) from None


def op_kinds() -> tuple[str, ...]:
    """Every registered kind, sorted."""
    return tuple(sorted(_REGISTRY))

