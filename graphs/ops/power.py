"""``pow`` {exponent: float}: ``x ** exponent`` elementwise, for imported programs.

Why a kind: JAX programs square, take square roots and reciprocal square roots (``integer_pow``,
``sqrt``, ``rsqrt``, ``square``) in every hand-written norm; one kind with the exponent as an
attr maps all of them without pattern matching. Signature as the unary elementwise kinds
(every factor PARALLEL). Linear only for exponent 1, so no Partial pass-through. FLOPs: one per
element, like the other elementwise kinds (transcendentals are not weighted more).
VJP: ``dy · exponent · x ** (exponent − 1)`` in ``pow``, ``scale`` and ``mul``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.ir import Op
from graphs.ops._common import numel_flops
from graphs.ops._vjp import GradBuilder, Grads, aligned
from graphs.ops.elementwise import broadcast_signature
from graphs.ops.registry import Attrs, OpDef, Specs, register_op
from graphs.signature import DimSignature


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    return (ins[0],)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    return broadcast_signature(ins, outs)


def _reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = arrays[0]
    exponent = float(attrs["exponent"])
    if exponent.is_integer():   # exact repeated products, as integer_pow computes them
        return (np.power(x, int(exponent)).astype(x.dtype, copy=False),)
    return (np.power(x, exponent).astype(x.dtype, copy=False),)


def pow_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: frozenset[int]) -> Grads:
    """d(x^p) = p·x^(p−1)·dy; for p = 1 the gradient is dy itself."""
    exponent = float(grads.attrs(op)["exponent"])
    if exponent == 1.0:
        return aligned(op, needed, {0: dys[0]})
    if exponent == 2.0:
        slope = grads.value(op.inputs[0])
    else:
        slope = grads.emit("pow", [grads.value(op.inputs[0])], exponent=exponent - 1.0)
    scaled = grads.emit("scale", [slope], factor=exponent)
    return aligned(op, needed, {0: grads.emit("mul", [dys[0], scaled])})


POW = register_op(OpDef(kind="pow", infer=_infer, signature=_signature, reference=_reference,
                        flops=numel_flops(1), num_inputs=1, required_attrs={"exponent": float},
                        vjp=pow_vjp, doc="x ** exponent elementwise (square, sqrt, rsqrt …)."))
