"""Helpers shared by the op-kind modules: signature strings, dim normalisation, dtype checks.

Signatures are built as strings (``"d0 d1, d1 -> d0 d1"``) so they go through the one cached
parser in :mod:`graphs.signature`. Factor names are positional (``d0``, ``d1`` …) unless the
op's maths gives them a meaning (einsum letters, attention's ``b s hk g d t e``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from graphs.errors import AttrError, ShapeError
from graphs.ir import DType
from graphs.ops.registry import Attrs, Specs, TensorSpec

DimText = str | tuple[str, ...]
"""One dim in a signature: a factor name, ``"1"`` for a factor-less size-1 dim, or a tuple of
factors for a merged dim (major first)."""


def dim_names(rank: int, prefix: str = "d") -> list[str]:
    return [f"{prefix}{i}" for i in range(rank)]


def operand_text(dims: Sequence[DimText]) -> str:
    parts = [d if isinstance(d, str) else (d[0] if len(d) == 1 else f"({' '.join(d)})")
             for d in dims]
    return " ".join(parts)


def signature_text(inputs: Sequence[Sequence[DimText]],
                   outputs: Sequence[Sequence[DimText]]) -> str:
    left = ", ".join(operand_text(op) for op in inputs)
    right = ", ".join(operand_text(op) for op in outputs)
    return f"{left} -> {right}"


def norm_dim(dim: int, rank: int, kind: str, attr: str = "dim") -> int:
    """A possibly negative dim index → 0..rank-1; AttrError when out of range."""
    if not -rank <= dim < rank:
        raise AttrError(f'{kind}: attr "{attr}"={dim} is out of range for rank {rank}')
    return dim % rank


def same_dtype(ins: Specs, kind: str) -> DType:
    dtypes = [t.dtype for t in ins]
    if any(d is not dtypes[0] for d in dtypes):
        names = [d.value for d in dtypes]
        raise ShapeError(f"{kind}: operands must share one dtype, got {names}")
    return dtypes[0]


def need_inputs(ins: Specs, counts: Sequence[int], kind: str) -> None:
    if len(ins) not in counts:
        wanted = " or ".join(str(c) for c in counts)
        raise ShapeError(f"{kind} takes {wanted} inputs, got {len(ins)}")


def need_rank(spec: TensorSpec, rank: int, kind: str, what: str) -> None:
    if len(spec.shape) != rank:
        raise ShapeError(f"{kind}: {what} must have rank {rank}, got shape {list(spec.shape)}")


def need_int(spec: TensorSpec, kind: str, what: str) -> None:
    if spec.dtype not in (DType.INT32, DType.INT64):
        raise ShapeError(f"{kind}: {what} must be int32 or int64, got {spec.dtype.value}")


def numel_flops(per_element: float):
    """FLOPs = ``per_element`` × elements of the first output."""

    def flops(ins: Specs, outs: Specs, attrs: Attrs) -> float:
        return float(per_element * outs[0].numel)

    return flops


def no_reference(arrays: Sequence, attrs: Attrs) -> tuple:
    raise AssertionError("source ops have no computation: their values are given")


def pad_widths(attrs: Attrs, kind: str) -> tuple[int, int]:
    """``(before, after)`` of a padding kind (``pad``, ``constant_pad``), both >= 0."""
    before, after = int(attrs["before"]), int(attrs["after"])
    if before < 0 or after < 0:
        raise AttrError(f"{kind}: before={before} and after={after} must be >= 0")
    return before, after


def infer_padded(kind: str) -> Callable[[Specs, Attrs], Specs]:
    """The output spec of a padding kind: ``before + after`` more along attr ``dim``."""

    def infer(ins: Specs, attrs: Attrs) -> Specs:
        shape = ins[0].shape
        dim = norm_dim(int(attrs["dim"]), len(shape), kind)
        before, after = pad_widths(attrs, kind)
        return (TensorSpec((*shape[:dim], shape[dim] + before + after, *shape[dim + 1:]),
                           ins[0].dtype),)

    return infer


def padded(x: np.ndarray, attrs: Attrs, kind: str, value: float = 0.0) -> np.ndarray:
    """``x`` with ``value`` before and after it along attr ``dim`` (the reference of both)."""
    widths = [(0, 0)] * x.ndim
    widths[int(attrs["dim"]) % x.ndim] = pad_widths(attrs, kind)
    return np.pad(x, widths, constant_values=np.asarray(value).astype(x.dtype))
