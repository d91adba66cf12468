"""Matmuls, reductions, normalisation, softmax, embedding and the loss for the torch importer
(the rest of the table is in :mod:`graphs.importers.torch_aten`; conventions there)."""

from __future__ import annotations

from typing import Any

from graphs.importers.torch_aten import LETTERS, _as, _out_dtype, is_node
from graphs.importers.torch_lower import Lowering, Unmapped, arg, shape_of


def _einsum(ctx: Lowering, node: Any, inputs: list[str], equation: str,
            bias: Any = None) -> str:
    dtype, base = _out_dtype(node), ctx.base_name(node)
    inputs = [_as(ctx, base, t, dtype, f"in{i}") for i, t in enumerate(inputs)]
    y = ctx.emit("einsum", inputs, base, equation=equation)
    if bias is None:
        return y
    return ctx.emit("add", [y, _as(ctx, base, ctx.tensor(bias), dtype, "bias")], f"{base}.bias")


def _mm(ctx: Lowering, node: Any) -> str:
    return _einsum(ctx, node, [ctx.tensor(a) for a in node.args[:2]], "ij,jk->ik")


def _bmm(ctx: Lowering, node: Any) -> str:
    return _einsum(ctx, node, [ctx.tensor(a) for a in node.args[:2]], "bij,bjk->bik")


def _addmm(ctx: Lowering, node: Any) -> str:
    if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
        raise Unmapped("addmm with beta or alpha other than 1")
    return _einsum(ctx, node, [ctx.tensor(a) for a in node.args[1:3]], "ij,jk->ik",
                   bias=node.args[0])


def _linear(ctx: Lowering, node: Any) -> str:
    x, weight, bias = node.args[0], node.args[1], arg(node, 2, "bias")
    batch = LETTERS[: len(shape_of(x)) - 1]
    return _einsum(ctx, node, [ctx.tensor(x), ctx.tensor(weight)],
                   f"{batch}i,oi->{batch}o", bias=bias)


def _matmul(ctx: Lowering, node: Any) -> str:
    a, b = node.args[:2]
    ra, rb = len(shape_of(a)), len(shape_of(b))
    if ra == 1 and rb == 1:
        equation = "i,i->"
    elif rb == 1:
        batch = LETTERS[: ra - 2]
        equation = f"{batch}mi,i->{batch}m"
    elif ra == 1:
        batch = LETTERS[: rb - 2]
        equation = f"i,{batch}io->{batch}o"
    else:
        sa, sb = shape_of(a)[:-2], shape_of(b)[:-2]
        width, common = max(len(sa), len(sb)), min(len(sa), len(sb))
        if common and sa[len(sa) - common:] != sb[len(sb) - common:]:
            raise Unmapped("matmul with broadcast batch dims")
        batch = LETTERS[:width]
        equation = f"{batch[width - len(sa):]}mi,{batch[width - len(sb):]}io->{batch}mo"
    return _einsum(ctx, node, [ctx.tensor(a), ctx.tensor(b)], equation)


def _aten_einsum(ctx: Lowering, node: Any) -> str:
    equation = str(node.args[0]).replace(" ", "")
    if "..." in equation or "->" not in equation:
        raise Unmapped("einsum with an ellipsis or an implicit output")
    return _einsum(ctx, node, [ctx.tensor(t) for t in node.args[1]], equation)


def _reduce(kind: str) -> Any:
    def handler(ctx: Lowering, node: Any) -> str:
        base = ctx.base_name(node)
        x = _as(ctx, base, ctx.tensor(node.args[0]), _out_dtype(node), "x")
        rank = len(ctx.graph.tensors[x].shape)
        dims = arg(node, 1, "dim", None)
        dims = list(range(rank)) if dims in (None, []) else (
            [int(dims)] if isinstance(dims, int) else [int(d) % rank for d in dims])
        keep = bool(arg(node, 2, "keepdim", False))
        return ctx.emit(kind, [x], base, dims=dims, keepdim=keep)

    return handler


def _softmax(kind: str) -> Any:
    def handler(ctx: Lowering, node: Any) -> str:
        base = ctx.base_name(node)
        x = _as(ctx, base, ctx.tensor(node.args[0]), _out_dtype(node), "x")
        rank = len(ctx.graph.tensors[x].shape)
        return ctx.emit(kind, [x], base, dim=int(node.args[1]) % rank)

    return handler


def _norm(kind: str) -> Any:
    def handler(ctx: Lowering, node: Any) -> str:
        x, normalized = node.args[0], node.args[1]
        weight = arg(node, 2, "weight")
        bias = arg(node, 3, "bias") if kind == "layer_norm" else None
        eps = arg(node, 4 if kind == "layer_norm" else 3, "eps", None)
        if len(normalized) != 1 or weight is None:
            raise Unmapped(f"{kind} over several dims or without a weight")
        if eps is None:
            import torch

            eps = float(torch.finfo(node.meta["val"].dtype).eps)
        ins = [ctx.tensor(x), ctx.tensor(weight)] + ([ctx.tensor(bias)] if bias is not None
                                                     else [])
        return ctx.emit(kind, ins, ctx.base_name(node), eps=float(eps))

    return handler


def _embedding(ctx: Lowering, node: Any) -> str:
    weight, ids = node.args[:2]
    return ctx.emit("embedding", [ctx.tensor(ids), ctx.tensor(weight)], ctx.base_name(node))


def _cross_entropy(ctx: Lowering, node: Any) -> str:
    logits, target = node.args[:2]
    if (arg(node, 2, "weight") is not None or int(arg(node, 3, "reduction", 1)) != 1
            or float(arg(node, 5, "label_smoothing", 0.0)) != 0.0 or not is_node(target)):
        raise Unmapped("cross_entropy with a class weight, label smoothing or no mean")
    x, y = ctx.tensor(logits), ctx.tensor(target)
    rank = len(ctx.graph.tensors[x].shape)
    if rank != len(ctx.graph.tensors[y].shape) + 1:
        raise Unmapped("cross_entropy with class probabilities as targets")
    base = ctx.base_name(node)
    if rank > 2:      # torch's class dim is 1; ours is last
        perm = [0, *range(2, rank), 1]
        x = ctx.emit("transpose", [x], f"{base}.classes_last", perm=perm)
    loss = ctx.emit("cross_entropy", [x, y], base)
    return _as(ctx, base, loss, _out_dtype(node), "loss")
