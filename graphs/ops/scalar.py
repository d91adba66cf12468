"""Elementwise kinds with a constant scalar operand: ``pow`` {exponent} and ``shift`` {offset}.

Why they exist: imported models compute with Python scalars (``x.pow(2)``, ``torch.rsqrt(v +
eps)``, GPT-2's ``0.5 * x * (1.0 + tanh(...))``), and a constant that lives in attrs, as
``scale``'s factor does, needs no feed and no producer. ``pow`` also covers ``rsqrt``
(exponent −0.5), ``sqrt`` (0.5) and ``reciprocal`` (−1); ``shift`` is ``x + offset`` (``x −
c`` is offset −c). Every factor is PARALLEL (the signature of the elementwise kinds).

Neither is linear (x + c of a Partial sum adds c once per shard; a power of a sum is not the
sum of powers), so partial_inputs is empty. FLOPs: one per element, as the other elementwise
kinds count. ``shift`` keeps the input dtype (an integer input stays integer).
VJPs: d pow = dy · exponent · x^(exponent − 1); d shift = dy.
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


def _same(ins: Specs, attrs: Attrs) -> Specs:
    return (ins[0],)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    return broadcast_signature(ins, outs)


def _pow(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = arrays[0]
    return (np.power(x, float(attrs["exponent"])).astype(x.dtype, copy=False),)


def _shift(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = arrays[0]
    offset = float(attrs["offset"])
    if np.issubdtype(x.dtype, np.integer):
        return ((x + int(offset)).astype(x.dtype, copy=False),)
    return ((x + offset).astype(x.dtype, copy=False),)


def pow_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: frozenset[int]) -> Grads:
    """dx = dy · p · x^(p−1); for p = 1 the power is skipped, for p = 0 the gradient is 0·dy."""
    exponent = float(grads.attrs(op)["exponent"])
    x = grads.value(op.inputs[0])
    if exponent == 1.0:
        return aligned(op, needed, {0: dys[0]})
    slope = grads.emit("pow", [x], exponent=exponent - 1.0) if exponent != 2.0 else x
    slope = grads.emit("scale", [slope], factor=exponent)
    return aligned(op, needed, {0: grads.emit("mul", [dys[0], slope])})


def shift_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: frozenset[int]) -> Grads:
    return aligned(op, needed, {0: dys[0]})


register_op(OpDef(kind="pow", infer=_same, signature=_signature, reference=_pow,
                  flops=numel_flops(1), num_inputs=1, required_attrs={"exponent": float},
                  vjp=pow_vjp, doc="x ** exponent (a constant); rsqrt is exponent -0.5."))
register_op(OpDef(kind="shift", infer=_same, signature=_signature, reference=_shift,
                  flops=numel_flops(1), num_inputs=1, required_attrs={"offset": float},
                  vjp=shift_vjp, doc="x + offset (a constant)."))
