"""The aten → registered-kind table of the torch importer, one small handler per aten op.

A handler takes the lowering context and an fx node and returns the graph tensor (or tuple of
tensors) that stands for the node's value; raising :class:`Unmapped` makes the node an
``opaque`` op. Conventions:

* matmuls (mm, bmm, addmm, linear, matmul, einsum) → ``einsum`` with an explicit equation;
  a bias → ``add``; ``linear``'s weight is [out, in] as torch stores it (``bi,oi->bo``).
* a Python scalar operand → ``scale`` (×, ÷), ``shift`` (+, −) or ``pow``; ``rsqrt``, ``sqrt``
  and ``reciprocal`` are ``pow`` with exponent −0.5, 0.5, −1.
* views (view, reshape, flatten, unsqueeze, squeeze, select's drop) → ``reshape`` to the shape
  torch recorded; ``expand`` → ``broadcast_to``; aliases, ``contiguous``, ``clone``,
  ``dropout`` (not modelled) and same-dtype ``to`` produce no op at all.
* tensors of different dtypes meeting in arithmetic are ``cast`` to the result's dtype first
  (torch's type promotion, read from the recorded result).
* ``cross_entropy_loss`` → ``cross_entropy`` (mean over targets; ``ignore_index`` targets are
  assumed absent, a class weight or label smoothing is unmapped).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graphs.importers.torch_lower import Lowering, Unmapped, arg, dtype_of, shape_of, val_of

Handler = Callable[[Lowering, Any], Any]
LETTERS = "abcdefghjklmnpqrtuvwxyz"


def is_node(value: Any) -> bool:
    return hasattr(value, "op") and hasattr(value, "meta")


def _out_dtype(node: Any) -> str:
    return dtype_of(val_of(node).dtype, node.name).value


def _as(ctx: Lowering, base: str, tensor: str, dtype: str, what: str) -> str:
    """``tensor`` cast to ``dtype`` (op ``<base>.<what>_cast``) unless it already is."""
    if ctx.graph.tensors[tensor].dtype.value == dtype:
        return tensor
    return ctx.emit("cast", [tensor], f"{base}.{what}_cast", dtype=dtype)


# ----------------------------------------------------------------------- elementwise
def _binary(kind: str) -> Handler:
    def handler(ctx: Lowering, node: Any) -> str:
        a, b = node.args[0], node.args[1]
        alpha = node.kwargs.get("alpha", 1)
        dtype, base = _out_dtype(node), ctx.base_name(node)
        if is_node(a) and is_node(b):
            x = _as(ctx, base, ctx.tensor(a), dtype, "a")
            y = _as(ctx, base, ctx.tensor(b), dtype, "b")
            if alpha != 1:
                y = ctx.emit("scale", [y], f"{base}.alpha", factor=float(alpha))
            return ctx.emit(kind, [x, y], base)
        if is_node(a):
            return _with_scalar(ctx, base, kind, ctx.tensor(a), float(b) * float(alpha), dtype)
        return _scalar_first(ctx, base, kind, float(a), ctx.tensor(b), float(alpha), dtype)

    return handler


def _with_scalar(ctx: Lowering, base: str, kind: str, x: str, c: float, dtype: str) -> str:
    x = _as(ctx, base, x, dtype, "x")
    if kind in ("add", "sub"):
        return ctx.emit("shift", [x], base, offset=c if kind == "add" else -c)
    if kind == "mul":
        return ctx.emit("scale", [x], base, factor=c)
    if c == 0:
        raise Unmapped("division by the constant 0")
    return ctx.emit("scale", [x], base, factor=1.0 / c)


def _scalar_first(ctx: Lowering, base: str, kind: str, c: float, x: str, alpha: float,
                  dtype: str) -> str:
    x = _as(ctx, base, x, dtype, "x")
    if kind == "add":
        return ctx.emit("shift", [ctx.emit("scale", [x], f"{base}.alpha", factor=alpha)
                                  if alpha != 1 else x], base, offset=c)
    if kind == "sub":      # c − alpha·x
        return ctx.emit("shift", [ctx.emit("scale", [x], f"{base}.neg", factor=-alpha)], base,
                        offset=c)
    if kind == "mul":
        return ctx.emit("scale", [x], base, factor=c)
    return ctx.emit("scale", [ctx.emit("pow", [x], f"{base}.inv", exponent=-1.0)], base, factor=c)


def _rsub(ctx: Lowering, node: Any) -> str:
    alpha = float(node.kwargs.get("alpha", 1))
    other = node.args[1]
    if is_node(other):
        raise Unmapped("rsub of two tensors")
    base = ctx.base_name(node)
    x = _as(ctx, base, ctx.tensor(node.args[0]), _out_dtype(node), "x")
    return ctx.emit("shift", [ctx.emit("scale", [x], f"{base}.neg", factor=-alpha)], base,
                    offset=float(other))


def _unary(kind: str) -> Handler:
    def handler(ctx: Lowering, node: Any) -> str:
        return ctx.emit(kind, [ctx.tensor(node.args[0])], ctx.base_name(node))

    return handler


def _gelu(ctx: Lowering, node: Any) -> str:
    """``approximate="tanh"`` → ``gelu``; the default, exact GELU → ``gelu_erf``."""
    approximate = node.kwargs.get("approximate", arg(node, 1, "approximate", "none"))
    return _unary("gelu" if approximate == "tanh" else "gelu_erf")(ctx, node)


def _power(exponent: float | None) -> Handler:
    def handler(ctx: Lowering, node: Any) -> str:
        value = exponent if exponent is not None else node.args[1]
        if is_node(value):
            raise Unmapped("pow with a tensor exponent")
        base = ctx.base_name(node)
        x = _as(ctx, base, ctx.tensor(node.args[0]), _out_dtype(node), "x")
        if float(value) == 1.0:
            return x
        return ctx.emit("pow", [x], base, exponent=float(value))

    return handler


def _where(ctx: Lowering, node: Any) -> str:
    cond, a, b = node.args[:3]
    if not (is_node(a) and is_node(b)):
        raise Unmapped("where with a scalar branch")
    dtype, base = _out_dtype(node), ctx.base_name(node)
    ins = [ctx.tensor(cond), _as(ctx, base, ctx.tensor(a), dtype, "a"),
           _as(ctx, base, ctx.tensor(b), dtype, "b")]
    return ctx.emit("where", ins, base)


# ----------------------------------------------------------------------- no-ops, casts
def _identity(ctx: Lowering, node: Any) -> str:
    return ctx.tensor(node.args[0])


def _to(ctx: Lowering, node: Any) -> str:
    x = ctx.tensor(node.args[0])
    dtype = _out_dtype(node)
    if ctx.graph.tensors[x].dtype.value == dtype:
        return x
    return ctx.emit("cast", [x], ctx.base_name(node, "cast"), dtype=dtype)


# ------------------------------------------------------------------------------ layout
def _view(ctx: Lowering, node: Any) -> str:
    x = ctx.tensor(node.args[0])
    shape = shape_of(node)
    if ctx.graph.tensors[x].shape == shape:
        return x
    return ctx.emit("reshape", [x], ctx.base_name(node), shape=list(shape))


def _transpose(ctx: Lowering, node: Any) -> str:
    x = ctx.tensor(node.args[0])
    rank = len(ctx.graph.tensors[x].shape)
    target = str(node.target)
    if "permute" in target:
        perm = [int(p) % rank for p in node.args[1]]
    else:
        perm = list(range(rank))
        if rank >= 2:
            i, j = ((0, 1) if ".t." in f"{target}." or target.endswith(".t")
                    else (int(node.args[1]) % rank, int(node.args[2]) % rank))
            perm[i], perm[j] = perm[j], perm[i]
    if perm == sorted(perm):
        return x
    return ctx.emit("transpose", [x], ctx.base_name(node), perm=perm)


def _expand(ctx: Lowering, node: Any) -> str:
    x = ctx.tensor(node.args[0])
    src, out = ctx.graph.tensors[x].shape, shape_of(node)
    if src == out:
        return x
    base = ctx.base_name(node)
    if len(src) < len(out):
        src = (1,) * (len(out) - len(src)) + src
        x = ctx.emit("reshape", [x], f"{base}.rank", shape=list(src))
    dims = [i for i, (a, b) in enumerate(zip(src, out, strict=True)) if a != b]
    return ctx.emit("broadcast_to", [x], base, shape=list(out), dims=dims)


def _cat(ctx: Lowering, node: Any) -> str:
    pieces = [ctx.tensor(p) for p in node.args[0]]
    if len(pieces) == 1:
        return pieces[0]
    return ctx.emit("concat", pieces, ctx.base_name(node), dim=int(arg(node, 1, "dim", 0)))


def _split(ctx: Lowering, node: Any) -> tuple[str, ...]:
    x = ctx.tensor(node.args[0])
    dim = int(arg(node, 2, "dim", 0)) % len(ctx.graph.tensors[x].shape)
    sizes = [int(v.shape[dim]) for v in val_of(node)]
    if len(sizes) == 1:
        return (x,)
    out = ctx.emit("split", [x], ctx.base_name(node), dim=dim, sizes=sizes)
    return tuple(out)


def _slice(ctx: Lowering, node: Any) -> str:
    x = ctx.tensor(node.args[0])
    shape = ctx.graph.tensors[x].shape
    dim = int(arg(node, 1, "dim", 0)) % len(shape)
    if int(arg(node, 4, "step", 1)) != 1:
        raise Unmapped("slice with a step")
    start, stop, _ = slice(arg(node, 2, "start"), arg(node, 3, "end")).indices(shape[dim])
    if (start, stop) == (0, shape[dim]):
        return x
    return ctx.emit("slice", [x], ctx.base_name(node), dim=dim, start=start, stop=max(start, stop))


def _pad(ctx: Lowering, node: Any) -> str:
    """``F.pad`` / ``aten.constant_pad_nd`` in constant mode: one ``constant_pad`` per padded
    dim (the pad list names the last dim first: left, right, then the dim before it). Hugging
    Face's causal-LM loss pads the labels this way (one ``-100`` after the last token)."""
    mode = str(arg(node, 2, "mode", "constant")) if str(node.target).startswith("aten.pad") \
        else "constant"
    if mode != "constant":
        raise Unmapped(f"pad in mode {mode}")
    widths = [int(w) for w in arg(node, 1, "pad")]
    value = arg(node, 3 if str(node.target).startswith("aten.pad") else 2, "value", None)
    value = 0.0 if value is None else float(value)
    if any(w < 0 for w in widths):
        raise Unmapped("pad with negative widths (cropping)")
    x, base = ctx.tensor(node.args[0]), ctx.base_name(node)
    rank = len(ctx.graph.tensors[x].shape)
    padded = [(rank - 1 - i, widths[2 * i], widths[2 * i + 1]) for i in range(len(widths) // 2)
              if widths[2 * i] or widths[2 * i + 1]]
    for k, (dim, before, after) in enumerate(padded):
        name = base if k == len(padded) - 1 else f"{base}.dim{dim}"
        x = ctx.emit("constant_pad", [x], name, dim=dim, before=before, after=after,
                     value=value)
    return x


def _select(ctx: Lowering, node: Any) -> str:
    x = ctx.tensor(node.args[0])
    shape = ctx.graph.tensors[x].shape
    dim, index = int(node.args[1]) % len(shape), int(node.args[2]) % shape[int(node.args[1])]
    base = ctx.base_name(node)
    piece = ctx.emit("slice", [x], f"{base}.slice", dim=dim, start=index, stop=index + 1)
    return ctx.emit("reshape", [piece], base, shape=list(shape_of(node)))


def _getitem(ctx: Lowering, node: Any) -> str:
    source = ctx.values.get(node.args[0].name)
    if not isinstance(source, tuple):
        raise Unmapped("getitem of a value that is not a lowered tuple")
    return source[int(node.args[1])]
