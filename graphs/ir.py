"""Frozen records of the operator-graph IR: dtypes, tensor roles, tensors and ops.

These are plain values: an :class:`~graphs.opgraph.OpGraph` owns them and checks that they
fit together (one producer per tensor, shapes agreeing with inference). Nothing here knows
about meshes or sharding.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np


@enum.unique
class DType(enum.Enum):
    """Element types with their storage size.

    Members: BF16, F16, F32, F64 (floating point), F8E4M3 and F8E5M2 (FP8 variants),
    INT32 and INT64 (indices, token ids), BOOL (masks).
    """

    BF16 = "bf16"
    F16 = "f16"
    F32 = "f32"
    F64 = "f64"
    F8E4M3 = "f8e4m3"
    F8E5M2 = "f8e5m2"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"

    def __repr__(self) -> str:
        return f"DType.{self.name}"

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._itemsize  # set once per member below: no Enum.__hash__ per lookup

    @property
    def is_float(self) -> bool:
        return self not in (DType.INT32, DType.INT64, DType.BOOL)

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype the reference implementations compute in (bf16/f8 widen to f32)."""
        return np.dtype(_NUMPY[self])

    @classmethod
    def parse(cls, text: str) -> DType:
        """``"bf16"``, ``"bfloat16"``, ``"float32"`` … → member.

        Raises ValueError naming the choices."""
        key = _ALIASES.get(text.strip().lower(), text.strip().lower())
        try:
            return cls(key)
        except ValueError:
            choices = ", ".join(m.value for m in cls)
            raise ValueError(f'unknown dtype "{text}"; choose one of {choices}') from None


_ITEMSIZE = {
    DType.BF16: 2, DType.F16: 2, DType.F32: 4, DType.F64: 8, DType.F8E4M3: 1, DType.F8E5M2: 1,
    DType.INT32: 4, DType.INT64: 8, DType.BOOL: 1,
}
for _member in DType:  # a 3-axis plan asks ~200 k times; Enum.__hash__ is Python code
    _member._itemsize = _ITEMSIZE[_member]  # type: ignore[attr-defined]
_NUMPY = {
    DType.BF16: "float32", DType.F16: "float16", DType.F32: "float32", DType.F64: "float64",
    DType.F8E4M3: "float32", DType.F8E5M2: "float32", DType.INT32: "int32",
    DType.INT64: "int64", DType.BOOL: "bool",
}
_ALIASES = {
    "bfloat16": "bf16", "float16": "f16", "half": "f16", "float32": "f32", "float": "f32",
    "float64": "f64", "double": "f64", "fp8": "f8e4m3", "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2", "int": "int64", "long": "int64", "i32": "int32", "i64": "int64",
}


@enum.unique
class TensorRole(enum.Enum):
    """What a tensor is for; drives the memory model and which tensors may be Partial.

    Members: INPUT (data fed per step), PARAM (trainable weight), ACTIVATION (intermediate),
    GRAD (gradient of a parameter), OPTIMIZER_STATE (master weights, moments), OUTPUT
    (a graph result, e.g. the loss or logits).
    """

    INPUT = "input"
    PARAM = "param"
    ACTIVATION = "activation"
    GRAD = "grad"
    OPTIMIZER_STATE = "optimizer_state"
    OUTPUT = "output"

    def __repr__(self) -> str:
        return f"TensorRole.{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Tensor:
    """A named tensor value: shape, element type and role. ``grad_of`` ties a gradient or an
    optimizer state to its parameter."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    role: TensorRole = TensorRole.ACTIVATION
    grad_of: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 0 for d in self.shape):
            msg = f'tensor "{self.name}" has a negative dim in shape {list(self.shape)}'
            raise ValueError(msg)

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class Op:
    """One operation: its registered ``kind``, input and output tensor names, and attributes.

    Source ops (kind ``"input"`` / ``"param"``) have no inputs and produce graph inputs and
    parameters, so that every tensor has exactly one producer.
    """

    name: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "attrs", _freeze(dict(self.attrs)))

    def __hash__(self) -> int:
        return hash((self.name, self.kind, self.inputs, self.outputs))
