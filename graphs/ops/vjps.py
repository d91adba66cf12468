"""The VJPs of the built-in forward kinds (except ``einsum``, whose VJP lives beside its
equation parser), each written in terms of registered kinds; contract in :mod:`graphs.ops._vjp`.

Each forward module passes its function here as ``vjp=`` in its registration. Conventions:
gradients of broadcast operands are reduced with :func:`~graphs.ops._vjp.unbroadcast`
(``sum`` + ``reshape``); forward tensors are read through ``grads.value`` so activation
recomputation can substitute recomputed copies; a VJP reads the forward *output* where that is
what frameworks save (exp, tanh, sigmoid, softmax, div, attention).
"""

from __future__ import annotations

import math

from graphs.ir import Op
from graphs.ops._vjp import GradBuilder, Grads, add_all, aligned, unbroadcast

Needed = frozenset[int]


def _shape(grads: GradBuilder, tensor: str) -> tuple[int, ...]:
    return grads.spec(tensor).shape


# ------------------------------------------------------------------------ elementwise
def add_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    (dy,) = dys
    return aligned(op, needed, {i: unbroadcast(grads, dy, _shape(grads, op.inputs[i]))
                                for i in needed})


def sub_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    (dy,) = dys
    out: dict[int, str | None] = {}
    if 0 in needed:
        out[0] = unbroadcast(grads, dy, _shape(grads, op.inputs[0]))
    if 1 in needed:
        out[1] = grads.emit("neg", [unbroadcast(grads, dy, _shape(grads, op.inputs[1]))])
    return aligned(op, needed, out)


def mul_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    (dy,) = dys
    out: dict[int, str | None] = {}
    for i in sorted(needed):
        other = grads.value(op.inputs[1 - i])
        out[i] = unbroadcast(grads, grads.emit("mul", [dy, other]), _shape(grads, op.inputs[i]))
    return aligned(op, needed, out)


def div_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    """a/b: da = dy/b, db = −dy·(a/b)/b (reads the output a/b)."""
    (dy,) = dys
    denominator = grads.value(op.inputs[1])
    out: dict[int, str | None] = {}
    if 0 in needed:
        quotient = grads.emit("div", [dy, denominator])
        out[0] = unbroadcast(grads, quotient, _shape(grads, op.inputs[0]))
    if 1 in needed:
        scaled = grads.emit("mul", [dy, grads.value(op.outputs[0])])
        term = unbroadcast(grads, grads.emit("div", [scaled, denominator]),
                           _shape(grads, op.inputs[1]))
        out[1] = grads.emit("neg", [term])
    return aligned(op, needed, out)


def _unary(grads: GradBuilder, op: Op, needed: Needed, result: str) -> Grads:
    return aligned(op, needed, {0: result})


def neg_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    return _unary(grads, op, needed, grads.emit("neg", [dys[0]]))


def exp_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    return _unary(grads, op, needed, grads.emit("mul", [dys[0], grads.value(op.outputs[0])]))


def log_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    return _unary(grads, op, needed, grads.emit("div", [dys[0], grads.value(op.inputs[0])]))


def derivative_vjp(kind: str, reads_output: bool):
    """VJP emitting ``kind(x_or_y, dy)``, one of the activation-derivative kinds."""

    def vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
        saved = grads.value(op.outputs[0] if reads_output else op.inputs[0])
        return _unary(grads, op, needed, grads.emit(kind, [saved, dys[0]]))

    return vjp


def cast_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    dtype = grads.spec(op.inputs[0]).dtype.value
    return _unary(grads, op, needed, grads.emit("cast", [dys[0]], dtype=dtype))


def scale_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    factor = float(grads.attrs(op)["factor"])
    return _unary(grads, op, needed, grads.emit("scale", [dys[0]], factor=factor))


def where_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    """where(c, a, b): da = dy·c, db = dy − dy·c (exact: c is 0 or 1)."""
    (dy,) = dys
    mask = grads.emit("cast", [grads.value(op.inputs[0])], dtype=grads.spec(dy).dtype.value)
    through = grads.emit("mul", [dy, mask])
    out: dict[int, str | None] = {}
    if 1 in needed:
        out[1] = unbroadcast(grads, through, _shape(grads, op.inputs[1]))
    if 2 in needed:
        out[2] = unbroadcast(grads, grads.emit("sub", [dy, through]), _shape(grads, op.inputs[2]))
    return aligned(op, needed, out)


# ------------------------------------------------------------------------- reductions
def _reduced(grads: GradBuilder, op: Op) -> list[int]:
    rank = len(_shape(grads, op.inputs[0]))
    return sorted(int(d) % rank for d in grads.attrs(op)["dims"]) if rank else []


def sum_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    dims, shape = _reduced(grads, op), _shape(grads, op.inputs[0])
    if not dims:
        return _unary(grads, op, needed, dys[0])
    wide = grads.emit("broadcast_to", [dys[0]], shape=list(shape), dims=dims)
    return _unary(grads, op, needed, wide)


def mean_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    dims, shape = _reduced(grads, op), _shape(grads, op.inputs[0])
    count = math.prod(shape[d] for d in dims)
    scaled = grads.emit("scale", [dys[0]], factor=1.0 / count)
    if not dims:
        return _unary(grads, op, needed, scaled)
    return _unary(grads, op, needed,
                  grads.emit("broadcast_to", [scaled], shape=list(shape), dims=dims))


def max_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    attrs = grads.attrs(op)
    x, y = grads.value(op.inputs[0]), grads.value(op.outputs[0])
    return _unary(grads, op, needed, grads.emit("max_bwd", [x, y, dys[0]], dims=_reduced(
        grads, op), keepdim=bool(attrs.get("keepdim", False))))


# ----------------------------------------------------------------------------- layout
def reshape_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    shape = list(_shape(grads, op.inputs[0]))
    return _unary(grads, op, needed, grads.emit("reshape", [dys[0]], shape=shape))


def transpose_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    perm = [int(p) for p in grads.attrs(op)["perm"]]
    inverse = [perm.index(i) for i in range(len(perm))]
    return _unary(grads, op, needed, grads.emit("transpose", [dys[0]], perm=inverse))


def concat_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    """One ``split`` of dy when every piece needs its gradient (one op however many pieces,
    the same op for each: a model's layers feeding one concat stay identical), else a
    ``slice`` per needed piece."""
    rank = len(_shape(grads, op.outputs[0]))
    dim = int(grads.attrs(op)["dim"]) % rank
    sizes = [_shape(grads, tensor)[dim] for tensor in op.inputs]
    if len(op.inputs) > 1 and needed == frozenset(range(len(op.inputs))):
        pieces = grads.emit("split", [dys[0]], dim=dim, sizes=sizes)
        return aligned(op, needed, dict(enumerate(pieces)))
    out: dict[int, str | None] = {}
    start = 0
    for i, tensor in enumerate(op.inputs):
        size = _shape(grads, tensor)[dim]
        if i in needed:
            out[i] = grads.emit("slice", [dys[0]], dim=dim, start=start, stop=start + size)
        start += size
    return aligned(op, needed, out)


def split_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    """concat of the pieces' gradients; pieces without one (not on the loss path) are left
    out by padding the others with zeros instead."""
    rank = len(_shape(grads, op.inputs[0]))
    dim = int(grads.attrs(op)["dim"]) % rank
    if all(dy is not None for dy in dys):
        return _unary(grads, op, needed, grads.emit("concat", list(dys), dim=dim))
    total, start, terms = _shape(grads, op.inputs[0])[dim], 0, []
    for dy, tensor in zip(dys, op.outputs, strict=True):
        size = _shape(grads, tensor)[dim]
        if dy is not None:
            terms.append(grads.emit("pad", [dy], dim=dim, before=start,
                                    after=total - start - size))
        start += size
    return _unary(grads, op, needed, add_all(grads, terms))


def slice_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    attrs, shape = grads.attrs(op), _shape(grads, op.inputs[0])
    dim = int(attrs["dim"]) % len(shape)
    picked = range(*slice(int(attrs["start"]), int(attrs["stop"])).indices(shape[dim]))
    before = picked.start if len(picked) else 0
    after = shape[dim] - before - len(picked)
    return _unary(grads, op, needed, grads.emit("pad", [dys[0]], dim=dim, before=before,
                                                after=after))


def constant_pad_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    """The padded positions are constants: dy on ``x``'s own positions."""
    attrs, shape = grads.attrs(op), _shape(grads, op.inputs[0])
    dim, before = int(attrs["dim"]) % len(shape), int(attrs["before"])
    return _unary(grads, op, needed, grads.emit("slice", [dys[0]], dim=dim, start=before,
                                                stop=before + shape[dim]))


# ------------------------------------------------------------------------ fused kinds
def norm_vjp(kind: str):
    """layer_norm / rms_norm: ``<kind>_bwd_x``, ``<kind>_bwd_w`` and a ``sum`` for the bias."""

    def vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
        (dy,) = dys
        eps = float(grads.attrs(op)["eps"])
        x = grads.value(op.inputs[0])
        out: dict[int, str | None] = {}
        if 0 in needed:
            out[0] = grads.emit(f"{kind}_bwd_x", [x, grads.value(op.inputs[1]), dy], eps=eps)
        if 1 in needed:
            out[1] = grads.emit(f"{kind}_bwd_w", [x, dy], eps=eps)
        if 2 in needed:
            out[2] = unbroadcast(grads, dy, _shape(grads, op.inputs[2]))
        return aligned(op, needed, out)

    return vjp


def softmax_vjp(kind: str):
    def vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
        y, dim = grads.value(op.outputs[0]), int(grads.attrs(op)["dim"])
        return _unary(grads, op, needed, grads.emit(kind, [y, dys[0]], dim=dim))

    return vjp


def cross_entropy_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    logits, targets = (grads.value(t) for t in op.inputs)
    count = math.prod(_shape(grads, op.inputs[1]))
    return _unary(grads, op, needed, grads.emit("cross_entropy_bwd", [logits, targets, dys[0]],
                                                count=count))


def embedding_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    vocab = _shape(grads, op.inputs[1])[0]
    table_grad = grads.emit("embedding_bwd", [grads.value(op.inputs[0]), dys[0]], vocab=vocab)
    return aligned(op, needed, {1: table_grad})


def rotary_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    """The rotation is orthogonal: dx = rotary(dy, cos, −sin). Gradients of cos/sin (when
    they are parameters) by halves: dcos = Σ dy₁x₁ + dy₂x₂, dsin = Σ dy₂x₁ − dy₁x₂."""
    (dy,) = dys
    cos, sin = grads.value(op.inputs[1]), grads.value(op.inputs[2])
    out: dict[int, str | None] = {}
    if 0 in needed:
        out[0] = grads.emit("rotary", [dy, cos, grads.emit("neg", [sin])])
    if needed & {1, 2}:
        x = grads.value(op.inputs[0])
        half = _shape(grads, op.inputs[0])[-1] // 2
        x1, x2, dy1, dy2 = _halves(grads, x, dy, half)

        def dot(a: str, b: str) -> str:
            return grads.emit("einsum", [a, b], equation="bsnr,bsnr->sr")

        if 1 in needed:
            out[1] = grads.emit("add", [dot(dy1, x1), dot(dy2, x2)])
        if 2 in needed:
            out[2] = grads.emit("sub", [dot(dy2, x1), dot(dy1, x2)])
    return aligned(op, needed, out)


def _halves(grads: GradBuilder, x: str, dy: str, half: int) -> tuple[str, str, str, str]:
    def cut(tensor: str, start: int) -> str:
        return grads.emit("slice", [tensor], dim=-1, start=start, stop=start + half)

    return cut(x, 0), cut(x, half), cut(dy, 0), cut(dy, half)


def attention_vjp(grads: GradBuilder, op: Op, dys: Grads, needed: Needed) -> Grads:
    attrs = grads.attrs(op)
    q, k, v = (grads.value(t) for t in op.inputs)
    dq, dk, dv = grads.emit("attention_bwd", [q, k, v, dys[0]],
                            causal=bool(attrs["causal"]), scale=attrs["scale"])
    return aligned(op, needed, {0: dq, 1: dk, 2: dv})
