"""How each JAX primitive becomes registered op kinds: one small rule per primitive family.

A rule gets the builder, the equation and its inputs (graph :class:`Value` s or folded
:class:`Const` s) and returns one item per equation output. Mappings worth knowing:

* ``dot_general`` → ``einsum`` with a letter equation (batch dims, lhs free, rhs free — JAX's
  output order); a ``preferred_element_type`` wider than the inputs becomes a ``cast`` after it.
* ``mul``/``div`` by a uniform constant → ``scale``; ``max(x, 0)`` → ``relu``;
  ``max(x, -inf)`` (``jax.nn.softmax``'s guard) and ``stop_gradient`` → the input itself
  (forward semantics; our own autodiff would then differentiate through the max, which changes
  nothing for a softmax).
* ``integer_pow``/``square``/``sqrt``/``rsqrt`` → ``pow``; comparisons → ``compare``;
  ``select_n`` with two cases → ``where``; ``logistic`` → ``sigmoid``; ``add_any`` → ``add``.
* ``reshape``/``squeeze`` → ``reshape``; ``broadcast_in_dim`` → ``reshape`` when no element is
  repeated, else ``broadcast_to`` (after a ``reshape`` when it also inserts size-1 dims);
  ``slice`` → one ``slice`` per cut dim (unit strides only); ``concatenate`` → ``concat``;
  ``split`` → ``split``; ``convert_element_type`` → ``cast`` (nothing when only weak typing
  changes); ``reduce_sum``/``reduce_max`` → ``sum``/``max``.
* Anything else → ``opaque`` (all-replicate, no reference, no VJP), counted as unmapped.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable
from typing import Any

import numpy as np

from graphs.importers.jax_build import Builder, Const, Value, dtype_of

Item = Value | Const
Rule = Callable[[Builder, Any, list[Item]], list[Item]]

UNARY = {"neg": "neg", "exp": "exp", "log": "log", "tanh": "tanh", "logistic": "sigmoid"}
BINARY = {"add": "add", "add_any": "add", "sub": "sub", "mul": "mul", "div": "div"}
POWERS = {"sqrt": 0.5, "rsqrt": -0.5, "square": 2.0}
COMPARE = ("lt", "le", "gt", "ge", "eq", "ne")
IDENTITY = ("stop_gradient", "copy", "copy_p", "optimization_barrier", "sharding_constraint",
            "reduce_precision")


def _unary(kind: str) -> Rule:
    return lambda b, eqn, ins: [b.emit(kind, [b.operand(ins[0])])[0]]


def _pow(exponent: float | None) -> Rule:
    def rule(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
        value = float(eqn.params["y"]) if exponent is None else exponent
        return [b.emit("pow", [b.operand(ins[0])], exponent=value)[0]]

    return rule


def _out_shape(eqn: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in eqn.outvars[0].aval.shape)


def _binary_operands(b: Builder, eqn: Any, ins: list[Item]) -> list[Value]:
    """Both operands as tensors; a uniform constant stays a scalar when the other operand
    already has the output's shape (NumPy broadcasting does the rest)."""
    shape, out = _out_shape(eqn), []
    for k, item in enumerate(ins):
        other = ins[1 - k]
        if isinstance(item, Const) and item.uniform and isinstance(other, Value) \
                and other.shape == shape:
            out.append(b.scalar(item))
        else:
            out.append(b.operand(item))
    return out


def _scalar_factor(ins: list[Item], eqn: Any, index: int) -> float | None:
    """The uniform constant at ``ins[index]`` when the other operand is the full tensor."""
    item, other = ins[index], ins[1 - index]
    if isinstance(item, Const) and item.uniform and isinstance(other, Value) \
            and other.shape == _out_shape(eqn) and np.issubdtype(item.value.dtype, np.floating):
        return float(item.scalar)
    return None


def _binary(kind: str) -> Rule:
    def rule(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
        if kind == "mul":
            for index in (0, 1):
                factor = _scalar_factor(ins, eqn, index)
                if factor is not None:
                    return [b.emit("scale", [ins[1 - index]], factor=factor)[0]]
        if kind == "div":
            factor = _scalar_factor(ins, eqn, 1)
            if factor is not None and factor != 0.0:
                return [b.emit("scale", [ins[0]], factor=1.0 / factor)[0]]
        return [b.emit(kind, _binary_operands(b, eqn, ins))[0]]

    return rule


def _max(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    for index in (0, 1):
        item, other = ins[index], ins[1 - index]
        if isinstance(item, Const) and item.uniform and isinstance(other, Value) \
                and other.shape == _out_shape(eqn):
            if item.scalar == -math.inf:
                return [other]
            if item.scalar == 0:
                return [b.emit("relu", [other])[0]]
    return opaque(b, eqn, ins)


def _compare(op: str) -> Rule:
    return lambda b, eqn, ins: [b.emit("compare", _binary_operands(b, eqn, ins), op=op)[0]]


def _pow_binary(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    exponent = ins[1]
    if isinstance(exponent, Const) and exponent.uniform and isinstance(ins[0], Value):
        return [b.emit("pow", [ins[0]], exponent=float(exponent.scalar))[0]]
    return opaque(b, eqn, ins)


def _select_n(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    predicate, *cases = ins
    if len(cases) != 2 or np.dtype(eqn.invars[0].aval.dtype) != np.bool_:
        return opaque(b, eqn, ins)
    shape = _out_shape(eqn)
    tensors = [b.operand(predicate)]
    for case in (cases[1], cases[0]):   # select_n(p, false, true) = where(p, true, false)
        if isinstance(case, Const) and case.uniform:
            tensors.append(b.scalar(case))
        else:
            tensors.append(b.operand(case))
    (out,) = b.emit("where", tensors)
    if out.shape != shape:
        (out,) = b.emit("broadcast_to", [out], shape=list(shape),
                        dims=[d for d, n in enumerate(shape) if out.shape[d] != n])
    return [out]


def _dot_general(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    lhs, rhs = (b.operand(x) for x in ins)
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    letters = iter(string.ascii_lowercase)
    left = [""] * len(lhs.shape)
    right = [""] * len(rhs.shape)
    for i, j in zip(lb, rb, strict=True):
        left[int(i)] = right[int(j)] = next(letters)
    for i, j in zip(lc, rc, strict=True):
        left[int(i)] = right[int(j)] = next(letters)
    for term in (left, right):
        for k, letter in enumerate(term):
            term[k] = letter or next(letters)
    batch = [left[int(i)] for i in lb]
    free_l = [c for k, c in enumerate(left) if k not in {int(i) for i in (*lb, *lc)}]
    free_r = [c for k, c in enumerate(right) if k not in {int(j) for j in (*rb, *rc)}]
    equation = f"{''.join(left)},{''.join(right)}->{''.join(batch + free_l + free_r)}"
    if lhs.dtype is not rhs.dtype:
        target = dtype_of(eqn.outvars[0].aval.dtype).value
        lhs, rhs = (b.emit("cast", [x], dtype=target)[0] if x.dtype.value != target else x
                    for x in (lhs, rhs))
    (out,) = b.emit("einsum", [lhs, rhs], equation=equation)
    return [_cast_to(b, out, eqn.outvars[0].aval.dtype)]


def _cast_to(b: Builder, value: Value, dtype: Any) -> Value:
    target = dtype_of(dtype)
    return value if value.dtype is target else b.emit("cast", [value], dtype=target.value)[0]


def _convert(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    return [_cast_to(b, b.operand(ins[0]), eqn.params["new_dtype"])]


def _reshape(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    if eqn.params.get("dimensions") is not None:
        return opaque(b, eqn, ins)
    value = b.operand(ins[0])
    shape = _out_shape(eqn)
    return [value if value.shape == shape else b.emit("reshape", [value], shape=list(shape))[0]]


def _broadcast_in_dim(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    value = b.operand(ins[0])
    shape = _out_shape(eqn)
    kept = [int(d) for d in eqn.params["broadcast_dimensions"]]
    if math.prod(value.shape) == math.prod(shape):
        return [value if value.shape == shape else
                b.emit("reshape", [value], shape=list(shape))[0]]
    stretched = [d for k, d in enumerate(kept) if value.shape[k] != shape[d]]
    new = [d for d in range(len(shape)) if d not in kept]
    if not stretched:                      # only new dims: broadcast_to adds them directly
        return [b.emit("broadcast_to", [value], shape=list(shape), dims=new)[0]]
    ones = [1 if d in new else value.shape[kept.index(d)] for d in range(len(shape))]
    if list(value.shape) != ones:
        value = b.emit("reshape", [value], shape=ones)[0]
    dims = [d for d in range(len(shape)) if ones[d] != shape[d]]
    return [b.emit("broadcast_to", [value], shape=list(shape), dims=dims)[0]]


def _transpose(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    perm = [int(p) for p in eqn.params["permutation"]]
    value = b.operand(ins[0])
    if perm == sorted(perm):
        return [value]
    return [b.emit("transpose", [value], perm=perm)[0]]


def _reduce(kind: str) -> Rule:
    def rule(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
        dims = [int(a) for a in eqn.params["axes"]]
        value = b.operand(ins[0])
        return [value if not dims else b.emit(kind, [value], dims=dims)[0]]

    return rule


def _slice(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    strides = eqn.params.get("strides")
    if strides is not None and any(int(s) != 1 for s in strides):
        return opaque(b, eqn, ins)
    value = b.operand(ins[0])
    starts, limits = eqn.params["start_indices"], eqn.params["limit_indices"]
    for dim, (start, stop) in enumerate(zip(starts, limits, strict=True)):
        if int(start) != 0 or int(stop) != value.shape[dim]:
            value = b.emit("slice", [value], dim=dim, start=int(start), stop=int(stop))[0]
    return [value]


def _concatenate(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    return [b.emit("concat", [b.operand(x) for x in ins],
                   dim=int(eqn.params["dimension"]))[0]]


def _split(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    sizes = [int(s) for s in eqn.params["sizes"]]
    return list(b.emit("split", [b.operand(ins[0])], dim=int(eqn.params["axis"]), sizes=sizes))


def _identity(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    return list(ins[: len(eqn.outvars)])


def opaque(b: Builder, eqn: Any, ins: list[Item]) -> list[Item]:
    """Keep an unmapped equation as an ``opaque`` op with JAX's output shapes and dtypes."""
    shapes = [[int(d) for d in v.aval.shape] for v in eqn.outvars]
    dtypes = [dtype_of(v.aval.dtype).value for v in eqn.outvars]
    return list(b.emit("opaque", [b.operand(x) for x in ins], target=eqn.primitive.name,
                       out_shapes=shapes, out_dtypes=dtypes))


RULES: dict[str, Rule] = {
    **{p: _unary(k) for p, k in UNARY.items()},
    **{p: _binary(k) for p, k in BINARY.items()},
    **{p: _pow(e) for p, e in POWERS.items()},
    **{p: _compare(p) for p in COMPARE},
    **dict.fromkeys(IDENTITY, _identity),
    "integer_pow": _pow(None), "pow": _pow_binary, "max": _max, "select_n": _select_n,
    "dot_general": _dot_general, "convert_element_type": _convert, "reshape": _reshape,
    "squeeze": _reshape, "broadcast_in_dim": _broadcast_in_dim, "transpose": _transpose,
    "reduce_sum": _reduce("sum"), "reduce_max": _reduce("max"), "slice": _slice,
    "concatenate": _concatenate, "split": _split,
}
