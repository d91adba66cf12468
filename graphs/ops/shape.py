"""Layout kinds: ``reshape``, ``transpose``, ``concat``, ``split``, ``slice``.

``reshape`` {shape} (one -1 allowed) groups input and output dims into the smallest runs with
equal products, ignoring size-1 dims (they are the factor-less ``"1"``). A run that is one dim
on both sides keeps one factor; a pure split (one → many) or merge (many → one) maps factors
exactly, e.g. [b, s, h] → [b·s, h] is ``"g0_0 g0_1 g1 -> (g0_0 g0_1) g1"`` in
:func:`reshape_signature`'s naming; any other run (say [6, 4] → [4, 6]) gets distinct BLOCKED
factors on each side. Worked grouping of [2, 3, 1, 4] → [6, 2, 2]:

    in dims   2 3 | 1 | 4      groups: (2 3)→(6) merge, (4)→(2 2) split, size-1 dim "1"
    out dims  6   |   | 2 2

Its local-shard reference needs the local output shape (see ``local_attrs`` in the registry).
``concat`` {dim}, ``split`` {dim, sizes} and ``slice`` {dim, start, stop} keep their dim
BLOCKED (a distinct factor per operand), every other dim parallel and shared.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from graphs.errors import AttrError, ShapeError
from graphs.ops import vjps
from graphs.ops._common import (
    DimText,
    dim_names,
    infer_padded,
    norm_dim,
    padded,
    same_dtype,
    signature_text,
)
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature


def _zero(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return 0.0


def resolve_shape(numel: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The target shape with its one ``-1`` filled in; ShapeError when sizes disagree."""
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise AttrError(f"reshape: shape {shape} may hold one -1 and no other negative size")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or numel % known:
            raise ShapeError(f"reshape: cannot infer -1 in {shape} for {numel} elements")
        shape[shape.index(-1)] = numel // known
    if math.prod(shape) != numel:
        raise ShapeError(f"reshape: {numel} elements do not fit shape {shape}")
    return tuple(shape)


def _infer_reshape(ins: Specs, attrs: Attrs) -> Specs:
    return (TensorSpec(resolve_shape(ins[0].numel, attrs["shape"]), ins[0].dtype),)


def reshape_groups(in_shape: Sequence[int], out_shape: Sequence[int]
                   ) -> list[tuple[list[int], list[int]]]:
    """Minimal runs of (input dims, output dims) with equal products, size-1 dims left out."""
    ins = [i for i, d in enumerate(in_shape) if d != 1]
    outs = [j for j, d in enumerate(out_shape) if d != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(ins) and j < len(outs):
        group_in, group_out = [ins[i]], [outs[j]]
        p_in, p_out = in_shape[ins[i]], out_shape[outs[j]]
        while p_in != p_out:
            if p_in < p_out:
                i += 1
                group_in.append(ins[i])
                p_in *= in_shape[ins[i]]
            else:
                j += 1
                group_out.append(outs[j])
                p_out *= out_shape[outs[j]]
        groups.append((group_in, group_out))
        i, j = i + 1, j + 1
    return groups


def reshape_signature_text(in_shape: Sequence[int], out_shape: Sequence[int]
                           ) -> tuple[str, list[str]]:
    """The signature string and its blocked factors for a reshape between two shapes."""
    if 0 in in_shape:
        names_in, names_out = dim_names(len(in_shape), "a"), dim_names(len(out_shape), "z")
        return signature_text([names_in], [names_out]), names_in + names_out
    in_dims: list[DimText] = ["1"] * len(in_shape)
    out_dims: list[DimText] = ["1"] * len(out_shape)
    blocked: list[str] = []
    for k, (group_in, group_out) in enumerate(reshape_groups(in_shape, out_shape)):
        if len(group_in) == 1 or len(group_out) == 1:
            # one → many splits the input dim, many → one merges into the output dim
            whole, parts = (in_dims, out_dims) if len(group_in) == 1 else (out_dims, in_dims)
            one, many = (group_in, group_out) if len(group_in) == 1 else (group_out, group_in)
            factors = tuple(f"g{k}_{n}" for n in range(len(many)))
            whole[one[0]] = factors
            for dim, factor in zip(many, factors, strict=True):
                parts[dim] = factor
            continue
        for n, dim in enumerate(group_in):
            in_dims[dim] = f"a{k}_{n}"
            blocked.append(f"a{k}_{n}")
        for n, dim in enumerate(group_out):
            out_dims[dim] = f"z{k}_{n}"
            blocked.append(f"z{k}_{n}")
    return signature_text([in_dims], [out_dims]), blocked


def _signature_reshape(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    text, blocked = reshape_signature_text(ins[0].shape, outs[0].shape)
    return bind_signature(text, [ins[0].shape], [outs[0].shape], blocked=blocked)


def _reshape(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (np.reshape(arrays[0], tuple(attrs["shape"])),)


def _local_reshape(attrs: Attrs, local_ins: Specs, local_outs: Specs) -> Attrs:
    return {**attrs, "shape": list(local_outs[0].shape)}


register_op(OpDef(kind="reshape", infer=_infer_reshape, signature=_signature_reshape,
                  reference=_reshape, flops=_zero, partial_inputs=(frozenset({0}),),
                  num_inputs=1, required_attrs={"shape": list}, local_attrs=_local_reshape,
                  vjp=vjps.reshape_vjp,
                  doc="Row-major reshape/view; see the module docstring for its signature."))


def _perm(attrs: Attrs, rank: int) -> tuple[int, ...]:
    perm = tuple(int(p) for p in attrs["perm"])
    if sorted(perm) != list(range(rank)):
        raise AttrError(f"transpose: perm {list(perm)} is not a permutation of 0..{rank - 1}")
    return perm


def _infer_transpose(ins: Specs, attrs: Attrs) -> Specs:
    perm = _perm(attrs, len(ins[0].shape))
    return (TensorSpec(tuple(ins[0].shape[p] for p in perm), ins[0].dtype),)


def _signature_transpose(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = dim_names(len(ins[0].shape))
    perm = _perm(attrs, len(names))
    text = signature_text([names], [[names[p] for p in perm]])
    return bind_signature(text, [ins[0].shape], [outs[0].shape])


def _transpose(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (np.transpose(arrays[0], tuple(attrs["perm"])),)


register_op(OpDef(kind="transpose", infer=_infer_transpose, signature=_signature_transpose,
                  reference=_transpose, flops=_zero, partial_inputs=(frozenset({0}),),
                  num_inputs=1, required_attrs={"perm": list}, vjp=vjps.transpose_vjp,
                  doc="Permute dims: output dim i is input dim perm[i]."))


def _with_dim(rank: int, dim: int, name: str) -> list[DimText]:
    names: list[DimText] = list(dim_names(rank))
    names[dim] = name
    return names


def _infer_concat(ins: Specs, attrs: Attrs) -> Specs:
    if not ins:
        raise ShapeError("concat needs at least one input")
    rank = len(ins[0].shape)
    dim = norm_dim(int(attrs["dim"]), rank, "concat")
    rest = [s.shape[:dim] + s.shape[dim + 1:] for s in ins]
    if any(len(s.shape) != rank for s in ins) or any(r != rest[0] for r in rest):
        msg = f"concat on dim {dim}: shapes {[list(s.shape) for s in ins]} differ elsewhere"
        raise ShapeError(msg)
    size = sum(s.shape[dim] for s in ins)
    shape = (*ins[0].shape[:dim], size, *ins[0].shape[dim + 1:])
    return (TensorSpec(shape, same_dtype(ins, "concat")),)


def _signature_concat(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    rank = len(outs[0].shape)
    dim = norm_dim(int(attrs["dim"]), rank, "concat")
    operands = [_with_dim(rank, dim, f"c{i}") for i in range(len(ins))]
    blocked = [f"c{i}" for i in range(len(ins))] + ["c"]
    text = signature_text(operands, [_with_dim(rank, dim, "c")])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=blocked)


def _concat(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (np.concatenate(list(arrays), axis=int(attrs["dim"])),)


register_op(OpDef(kind="concat", infer=_infer_concat, signature=_signature_concat,
                  reference=_concat, flops=_zero, num_inputs=None,
                  required_attrs={"dim": int}, vjp=vjps.concat_vjp,
                  doc="Concatenate along attr dim (variadic)."))


def _infer_split(ins: Specs, attrs: Attrs) -> Specs:
    shape = ins[0].shape
    dim = norm_dim(int(attrs["dim"]), len(shape), "split")
    sizes = [int(s) for s in attrs["sizes"]]
    if not sizes or any(s < 0 for s in sizes) or sum(sizes) != shape[dim]:
        raise ShapeError(f"split: sizes {sizes} do not sum to dim {dim} of shape {list(shape)}")
    return tuple(TensorSpec((*shape[:dim], s, *shape[dim + 1:]), ins[0].dtype) for s in sizes)


def _signature_split(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    rank = len(ins[0].shape)
    dim = norm_dim(int(attrs["dim"]), rank, "split")
    outputs = [_with_dim(rank, dim, f"c{i}") for i in range(len(outs))]
    blocked = ["c"] + [f"c{i}" for i in range(len(outs))]
    text = signature_text([_with_dim(rank, dim, "c")], outputs)
    return bind_signature(text, [ins[0].shape], [t.shape for t in outs], blocked=blocked)


def _split(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    cuts = np.cumsum([int(s) for s in attrs["sizes"]])[:-1]
    return tuple(np.split(arrays[0], cuts, axis=int(attrs["dim"])))


register_op(OpDef(kind="split", infer=_infer_split, signature=_signature_split,
                  reference=_split, flops=_zero, partial_inputs=(frozenset({0}),),
                  num_inputs=1, num_outputs=None, required_attrs={"dim": int, "sizes": list},
                  vjp=vjps.split_vjp,
                  doc="Split along attr dim into pieces of attr sizes; several outputs."))


def _slice_range(attrs: Attrs, size: int) -> range:
    return range(*slice(int(attrs["start"]), int(attrs["stop"])).indices(size))


def _infer_slice(ins: Specs, attrs: Attrs) -> Specs:
    shape = ins[0].shape
    dim = norm_dim(int(attrs["dim"]), len(shape), "slice")
    length = len(_slice_range(attrs, shape[dim]))
    return (TensorSpec((*shape[:dim], length, *shape[dim + 1:]), ins[0].dtype),)


def _signature_slice(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    rank = len(ins[0].shape)
    dim = norm_dim(int(attrs["dim"]), rank, "slice")
    text = signature_text([_with_dim(rank, dim, "c")], [_with_dim(rank, dim, "o")])
    return bind_signature(text, [ins[0].shape], [outs[0].shape], blocked=["c", "o"])


def _slice(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = arrays[0]
    dim = int(attrs["dim"]) % x.ndim
    index = [slice(None)] * x.ndim
    index[dim] = slice(int(attrs["start"]), int(attrs["stop"]))
    return (x[tuple(index)],)


register_op(OpDef(kind="slice", infer=_infer_slice, signature=_signature_slice,
                  reference=_slice, flops=_zero, partial_inputs=(frozenset({0}),),
                  num_inputs=1, required_attrs={"dim": int, "start": int, "stop": int},
                  vjp=vjps.slice_vjp,
                  doc="x[start:stop] along attr dim (Python slice rules, step 1)."))


def _constant_pad(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (padded(arrays[0], attrs, "constant_pad", attrs["value"]),)


# ``value`` around ``x``: not linear in ``x`` unless the value is 0 (a pending sum padded with
# ``value`` on every device would sum to devices × value), so no partial input, unlike the
# zero ``pad`` the VJPs emit; the padded dim is blocked, as ``slice``'s
register_op(OpDef(kind="constant_pad", infer=infer_padded("constant_pad"),
                  signature=_signature_slice, reference=_constant_pad, flops=_zero, num_inputs=1,
                  required_attrs={"dim": int, "before": int, "after": int,
                                  "value": (int, float)},
                  vjp=vjps.constant_pad_vjp,
                  doc="x with attr value added before and after it along attr dim "
                      "(torch.nn.functional.pad, mode constant)."))
