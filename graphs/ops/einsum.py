"""``einsum``: every contraction (matmul, linear, bmm, outer products) as one op kind.

Attr ``equation`` in NumPy notation with single-letter dims and an explicit ``->``
(``"bsh,hf->bsf"``); no ellipsis, no letter twice in one operand. Each letter becomes a
factor; letters missing from the output are CONTRACTED with reduction "sum", so sharding
them leaves the output Partial(sum). The op is linear in each operand separately.
FLOPs: 2·∏(all factor sizes) when something is contracted (a multiply and an add per
term), ∏(all factor sizes) otherwise (one multiply per output element).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from graphs.errors import AttrError, ShapeError
from graphs.ir import Op
from graphs.ops._common import same_dtype, signature_text
from graphs.ops._vjp import GradBuilder, Grads, aligned
from graphs.ops.kernel_shape import GemmShape, einsum_gemm
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature

MAX_OPERANDS = 8


@functools.lru_cache(maxsize=1024)
def parse_equation(equation: str) -> tuple[tuple[str, ...], str]:
    """Split an equation into operand terms and the output term; cached.

    Raises AttrError on ellipsis, a repeated letter in one operand, or an output letter that
    no input has.

    Example:
        >>> parse_equation("bsh,hf->bsf")
        (('bsh', 'hf'), 'bsf')
    """
    text = equation.replace(" ", "")
    if text.count("->") != 1 or "." in text:
        raise AttrError(f'einsum equation "{equation}" needs one "->" and no ellipsis')
    left, right = text.split("->")
    operands = tuple(left.split(","))
    for term in (*operands, right):
        if not all(c.isalpha() and c.isascii() for c in term) or len(set(term)) != len(term):
            msg = (f'einsum equation "{equation}": operand "{term}" must be distinct single '
                   f"letters")
            raise AttrError(msg)
    missing = sorted(set(right) - set("".join(operands)))
    if missing:
        raise AttrError(f'einsum equation "{equation}": output letters {missing} are in no input')
    return operands, right


def _sizes(ins: Specs, attrs: Attrs) -> tuple[tuple[str, ...], str, dict[str, int]]:
    operands, right = parse_equation(attrs["equation"])
    if len(operands) != len(ins):
        msg = f'einsum equation "{attrs["equation"]}" has {len(operands)} operands, got {len(ins)}'
        raise ShapeError(msg)
    sizes: dict[str, int] = {}
    for term, spec in zip(operands, ins, strict=True):
        if len(term) != len(spec.shape):
            msg = f'einsum operand "{term}" does not match shape {list(spec.shape)}'
            raise ShapeError(msg)
        for letter, size in zip(term, spec.shape, strict=True):
            if sizes.setdefault(letter, size) != size:
                msg = (f'einsum "{attrs["equation"]}": letter "{letter}" has sizes '
                       f"{sizes[letter]} and {size}")
                raise ShapeError(msg)
    return operands, right, sizes


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    _, right, sizes = _sizes(ins, attrs)
    return (TensorSpec(tuple(sizes[c] for c in right), same_dtype(ins, "einsum")),)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    operands, right = parse_equation(attrs["equation"])
    text = signature_text([list(t) for t in operands], [list(right)])
    return bind_signature(text, [t.shape for t in ins], [t.shape for t in outs])


def _reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    operands, right = parse_equation(attrs["equation"])
    return (np.einsum(f"{','.join(operands)}->{right}", *arrays),)


def _flops(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    _operands, right, sizes = _sizes(ins, attrs)
    total = float(math.prod(sizes.values()))
    return 2.0 * total if set(sizes) - set(right) else total


def _kernel(ins: Specs, outs: Specs, attrs: Attrs) -> GemmShape | None:
    operands, right, sizes = _sizes(ins, attrs)
    return einsum_gemm(operands, right, sizes)


def einsum_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: frozenset[int]) -> Grads:
    """Operand i's gradient is the einsum of dy with the other operands, in operand order with
    dy in slot i (``bsh,hf->bsf`` gives ``bsf,hf->bsh`` and ``bsh,bsf->hf``). Letters only
    operand i holds (summed away in the forward) are absent from that einsum and restored
    with ``broadcast_to``.
    """
    operands, right = parse_equation(grads.attrs(op)["equation"])
    out: dict[int, str | None] = {}
    for i in sorted(needed):
        terms = [*operands[:i], right, *operands[i + 1:]]
        inputs = [grads.value(t) for t in op.inputs]
        inputs[i] = dys[0]
        available = set("".join(terms))
        keep = "".join(c for c in operands[i] if c in available)
        if len(terms) == 1 and keep == right:
            grad = inputs[0]
        else:
            grad = grads.emit("einsum", inputs, equation=f"{','.join(terms)}->{keep}")
        if keep != operands[i]:
            shape = list(grads.spec(op.inputs[i]).shape)
            dims = [k for k, c in enumerate(operands[i]) if c not in available]
            grad = grads.emit("broadcast_to", [grad], shape=shape, dims=dims)
        out[i] = grad
    return aligned(op, needed, out)


EINSUM = register_op(OpDef(
    kind="einsum", infer=_infer, signature=_signature, reference=_reference, flops=_flops,
    vjp=einsum_vjp, kernel=_kernel,
    partial_inputs=tuple(frozenset({i}) for i in range(MAX_OPERANDS)),
    required_attrs={"equation": str},
    doc="NumPy einsum; partial_inputs lists {i} for every operand slot up to 8 (indices past "
        "the op's input count never apply)."))
