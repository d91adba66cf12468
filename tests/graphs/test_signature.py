"""Shape inference and dimension signatures on tables of hand-written cases."""

from __future__ import annotations

from typing import Any

import pytest

from graphs import AttrError, DType, FactorKind, ShapeError, TensorSpec, get_op, local_attrs

F, INT = DType.F32, DType.INT64
P, C, B = FactorKind.PARALLEL, FactorKind.CONTRACTED, FactorKind.BLOCKED


def bind(kind: str, shapes: list[tuple[int, ...]], dtypes: list[DType] | None = None,
         **attrs: Any):
    opdef = get_op(kind)
    attrs = {**opdef.optional_attrs, **attrs}
    specs = tuple(TensorSpec(s, d) for s, d in zip(shapes, dtypes or [F] * len(shapes),
                                                   strict=True))
    outs = opdef.infer(specs, attrs)
    return outs, opdef.signature(specs, outs, attrs)


def text(sig) -> str:
    def dim(d: tuple[str, ...]) -> str:
        return "1" if not d else d[0] if len(d) == 1 else f"({' '.join(d)})"

    def side(ops) -> str:
        return ", ".join(" ".join(dim(d) for d in op) for op in ops)

    return f"{side(sig.inputs)} -> {side(sig.outputs)}"


RESHAPES = [
    ("merge", (2, 3, 4), [6, 4], "g0_0 g0_1 g1_0 -> (g0_0 g0_1) g1_0", ()),
    ("split", (6, 4), [2, 3, 4], "(g0_0 g0_1) g1_0 -> g0_0 g0_1 g1_0", ()),
    ("size-1-dims", (2, 1, 4), [2, 4, 1], "g0_0 1 g1_0 -> g0_0 g1_0 1", ()),
    ("merge-and-split", (2, 3, 1, 4), [6, 2, 2],
     "g0_0 g0_1 1 (g1_0 g1_1) -> (g0_0 g0_1) g1_0 g1_1", ()),
    ("mixed-blocked", (6, 4), [4, 6], "a0_0 a0_1 -> z0_0 z0_1",
     ("a0_0", "a0_1", "z0_0", "z0_1")),
    ("heads", (2, 5, 12), [2, 5, 3, 4], "g0_0 g1_0 (g2_0 g2_1) -> g0_0 g1_0 g2_0 g2_1", ()),
    ("infer-minus-one", (2, 3, 4), [-1, 4], "g0_0 g0_1 g1_0 -> (g0_0 g0_1) g1_0", ()),
    ("no-common-split", (4, 6), [8, 3], "a0_0 a0_1 -> z0_0 z0_1",
     ("a0_0", "a0_1", "z0_0", "z0_1")),
]


@pytest.mark.parametrize(("in_shape", "target", "expected", "blocked"),
                         [r[1:] for r in RESHAPES], ids=[r[0] for r in RESHAPES])
def test_reshape_groupings(in_shape: tuple[int, ...], target: list[int], expected: str,
                           blocked: tuple[str, ...]) -> None:
    outs, sig = bind("reshape", [in_shape], shape=target)
    assert text(sig) == expected
    assert tuple(f for f, k in zip(sig.factors, sig.kinds, strict=True) if k is B) == blocked
    assert outs[0].numel == TensorSpec(in_shape, F).numel


SIGNATURES = [
    ("matmul", "einsum", [(2, 3, 4), (4, 5)], {"equation": "bsh,hf->bsf"},
     [(2, 3, 5)], "b s h, h f -> b s f", {"h": (C, "sum"), "b": (P, "")}),
    ("bmm", "einsum", [(7, 2, 3), (7, 3, 4)], {"equation": "bij,bjk->bik"},
     [(7, 2, 4)], "b i j, b j k -> b i k", {"j": (C, "sum")}),
    ("broadcast-add", "add", [(4, 1, 8), (3, 8)], {}, [(4, 3, 8)],
     "d0 1 d2, d1 d2 -> d0 d1 d2", {"d1": (P, "")}),
    ("broadcast-both-1", "mul", [(1, 5), (1, 1)], {}, [(1, 5)], "d0 d1, d0 1 -> d0 d1", {}),
    ("scalar-operand", "sub", [(3,), ()], {}, [(3,)], "d0,  -> d0", {}),
    ("sum-keepdim", "sum", [(2, 3, 4)], {"dims": [1], "keepdim": True}, [(2, 1, 4)],
     "d0 d1 d2 -> d0 1 d2", {"d1": (C, "sum")}),
    ("mean", "mean", [(2, 3, 4)], {"dims": [-1, 0]}, [(3,)], "d0 d1 d2 -> d1",
     {"d0": (C, "avg"), "d2": (C, "avg")}),
    ("max", "max", [(2, 3)], {"dims": [1]}, [(2,)], "d0 d1 -> d0", {"d1": (C, "max")}),
    ("softmax", "softmax", [(2, 3, 4)], {}, [(2, 3, 4)], "d0 d1 d2 -> d0 d1 d2",
     {"d2": (B, ""), "d1": (P, "")}),
    ("layer_norm", "layer_norm", [(2, 3, 8), (8,), (8,)], {}, [(2, 3, 8)],
     "d0 d1 h, h, h -> d0 d1 h", {"h": (B, "")}),
    ("rms_norm", "rms_norm", [(2, 8), (8,)], {}, [(2, 8)], "d0 h, h -> d0 h", {"h": (B, "")}),
    ("transpose", "transpose", [(2, 3, 4)], {"perm": [2, 0, 1]}, [(4, 2, 3)],
     "d0 d1 d2 -> d2 d0 d1", {}),
    ("concat", "concat", [(2, 3), (2, 5)], {"dim": 1}, [(2, 8)], "d0 c0, d0 c1 -> d0 c",
     {"c": (B, ""), "c0": (B, ""), "d0": (P, "")}),
    ("slice", "slice", [(6, 4)], {"dim": 0, "start": -4, "stop": 5}, [(3, 4)],
     "c d1 -> o d1", {"c": (B, ""), "o": (B, "")}),
    ("rotary", "rotary", [(2, 5, 3, 8), (5, 4), (5, 4)], {}, [(2, 5, 3, 8)],
     "b s n d, s r, s r -> b s n d", {"s": (P, ""), "d": (B, ""), "r": (B, "")}),
    ("attention-gqa-causal", "attention", [(2, 5, 8, 4), (2, 5, 2, 4), (2, 5, 2, 6)], {},
     [(2, 5, 8, 6)], "b s (hk g) d, b t hk d, b t hk e -> b s (hk g) e",
     {"s": (B, ""), "t": (B, ""), "hk": (P, ""), "g": (P, "")}),
    ("attention-full", "attention", [(2, 5, 2, 4), (2, 7, 2, 4), (2, 7, 2, 4)],
     {"causal": False}, [(2, 5, 2, 4)], "b s (hk g) d, b t hk d, b t hk e -> b s (hk g) e",
     {"s": (P, ""), "d": (B, ""), "e": (B, "")}),
]


@pytest.mark.parametrize(("kind", "shapes", "attrs", "out_shapes", "expected", "kinds"),
                         [c[1:] for c in SIGNATURES], ids=[c[0] for c in SIGNATURES])
def test_signatures(kind: str, shapes: list[tuple[int, ...]], attrs: dict[str, Any],
                    out_shapes: list[tuple[int, ...]], expected: str,
                    kinds: dict[str, tuple[FactorKind, str]]) -> None:
    outs, sig = bind(kind, shapes, **attrs)
    assert [o.shape for o in outs] == out_shapes
    assert text(sig) == expected
    for factor, (kind_, reduction) in kinds.items():
        assert (sig.kind(factor), sig.reduction(factor)) == (kind_, reduction), factor


def test_gqa_group_factor_size() -> None:
    _, sig = bind("attention", [(2, 5, 8, 4), (2, 5, 2, 4), (2, 5, 2, 4)])
    assert (sig.size("hk"), sig.size("g")) == (2, 4)


def test_int_and_special_dtypes() -> None:
    outs, sig = bind("where", [(2, 3), (3,), (2, 1)], [DType.BOOL, F, F])
    assert outs[0] == TensorSpec((2, 3), F) and text(sig) == "d0 d1, d1, d0 1 -> d0 d1"
    outs, sig = bind("embedding", [(2, 3), (10, 4)], [INT, F])
    assert outs[0] == TensorSpec((2, 3, 4), F) and text(sig) == "d0 d1, v h -> d0 d1 h"
    assert sig.kind("v") is B
    outs, sig = bind("cross_entropy", [(2, 3, 10), (2, 3)], [F, INT])
    assert outs[0] == TensorSpec((), DType.F32)
    assert text(sig) == "d0 d1 v, d0 d1 -> "
    assert (sig.kind("d0"), sig.reduction("d0"), sig.kind("v")) == (C, "avg", B)
    outs, _ = bind("cast", [(2,)], dtype="bf16")
    assert outs[0].dtype is DType.BF16
    outs, sig = bind("split", [(4, 6)], dim=-1, sizes=[1, 5])
    assert [o.shape for o in outs] == [(4, 1), (4, 5)] and text(sig) == "d0 c -> d0 c0, d0 c1"


INFER_ERRORS = [
    ("einsum-size", "einsum", [(2, 3), (4, 5)], {"equation": "ij,jk->ik"}, ShapeError, "j"),
    ("einsum-ellipsis", "einsum", [(2, 3)], {"equation": "...i->i"}, AttrError, "ellipsis"),
    ("einsum-repeat", "einsum", [(2, 2)], {"equation": "ii->i"}, AttrError, "distinct"),
    ("broadcast", "add", [(2, 3), (4,)], {}, ShapeError, "broadcast"),
    ("dtype", "mul", [(2,), (2,)], {}, None, None),
    ("reshape", "reshape", [(2, 3)], {"shape": [4, 2]}, ShapeError, "6 elements"),
    ("perm", "transpose", [(2, 3)], {"perm": [0, 0]}, AttrError, "permutation"),
    ("split", "split", [(2, 3)], {"dim": 1, "sizes": [1, 1]}, ShapeError, "sum"),
    ("softmax-dim", "softmax", [(2, 3)], {"dim": 2}, AttrError, "out of range"),
    ("norm-weight", "layer_norm", [(2, 3), (2,)], {}, ShapeError, "weight"),
    ("rotary-odd", "rotary", [(1, 2, 1, 3), (2, 1), (2, 1)], {}, ShapeError, "even"),
    ("gqa", "attention", [(1, 2, 3, 4), (1, 2, 2, 4), (1, 2, 2, 4)], {}, ShapeError,
     "dividing"),
    ("causal-t", "attention", [(1, 4, 1, 4), (1, 2, 1, 4), (1, 2, 1, 4)], {}, ShapeError,
     "t >= s"),
]


@pytest.mark.parametrize(("kind", "shapes", "attrs", "error", "needle"),
                         [c[1:] for c in INFER_ERRORS], ids=[c[0] for c in INFER_ERRORS])
def test_inference_errors(kind: str, shapes: list[tuple[int, ...]], attrs: dict[str, Any],
                          error: type[Exception] | None, needle: str | None) -> None:
    if error is None:
        with pytest.raises(ShapeError, match="dtype"):
            bind(kind, shapes, [F, DType.BF16], **attrs)
        return
    with pytest.raises(error, match=needle):
        bind(kind, shapes, **attrs)


def test_reshape_local_attrs_use_the_local_output_shape() -> None:
    # [6] -> [2, 3]: a shard of 3 elements is [1, 3] (major factor sharded) or [2, 1]
    # (minor factor sharded, strided); only the caller knows which, so it passes the shape.
    opdef = get_op("reshape")
    local_in = (TensorSpec((3,), F),)
    for local_shape in ((1, 3), (2, 1)):
        attrs = local_attrs(opdef, {"shape": [2, 3]}, local_in, (TensorSpec(local_shape, F),))
        assert tuple(attrs["shape"]) == local_shape
    assert local_attrs(get_op("exp"), {"x": 1}, local_in, local_in) == {"x": 1}
