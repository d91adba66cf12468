"""Local-shard property: every op kind's NumPy reference, run on shards that its dimension
signature allows, reassembles to the unsharded result.

For each non-blocked factor f and a piece count k dividing its size, every operand holding f is
cut into k pieces along f (a merged dim ``(a b)`` is viewed as [a, b] first, so a major factor
gives contiguous chunks and a minor factor strided ones), the reference runs per piece, and the
pieces' outputs are compared with the same cut of the global output (parallel f) or combined
with f's reduction (contracted f: sum / avg / max) and compared with the whole output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphs import DType, FactorKind, TensorSpec, get_op, local_attrs
from graphs.signature import DimSignature

Z = dict[str, int]


@dataclass(frozen=True)
class Case:
    kind: str
    specs: Callable[[Z], list[tuple[tuple[int, ...], DType]]]
    attrs: Callable[[Z], dict[str, Any]] = lambda z: {}
    positive: bool = False
    int_high: int | None = None   # integer inputs drawn from [0, int_high) (expert indices)


F, INT, B = DType.F64, DType.INT64, DType.BOOL
E_MOE, K_MOE, C_MOE = 3, 2, 2   # experts, top-k and capacity of the MoE cases

MOE_CASES = [
    Case("moe_topk", lambda z: [((z["a"], z["b"], z["c"] + 1), F)],
         lambda z: {"k": 2, "normalize": True, "scale": 1.5}),
    Case("moe_topk_bwd", lambda z: [((z["a"], z["b"], 4), F), ((z["a"], z["b"], K_MOE), INT),
                                    ((z["a"], z["b"], K_MOE), F)],
         lambda z: {"normalize": True, "scale": 0.5}, int_high=4),
    Case("moe_dispatch", lambda z: [((z["a"], z["b"], z["c"]), F),
                                    ((z["a"], z["b"], K_MOE), INT)],
         lambda z: {"experts": E_MOE, "capacity": C_MOE}, int_high=E_MOE),
    Case("moe_dispatch", lambda z: [((z["a"], z["b"], z["c"]), F),
                                    ((z["a"], z["b"], K_MOE), INT),
                                    ((z["a"], z["b"], K_MOE), F)],
         lambda z: {"experts": E_MOE, "capacity": C_MOE}, int_high=E_MOE),
    Case("moe_combine", lambda z: [((z["a"], E_MOE, C_MOE, z["c"]), F),
                                   ((z["a"], z["b"], K_MOE), INT),
                                   ((z["a"], z["b"], K_MOE), F)], int_high=E_MOE),
    Case("moe_combine", lambda z: [((z["a"], E_MOE, C_MOE, z["c"]), F),
                                   ((z["a"], z["b"], K_MOE), INT)], int_high=E_MOE),
    Case("moe_gate_grad", lambda z: [((z["a"], E_MOE, C_MOE, z["c"]), F),
                                     ((z["a"], z["b"], K_MOE), INT),
                                     ((z["a"], z["b"], z["c"]), F)], int_high=E_MOE),
    Case("swiglu", lambda z: [((z["a"], z["b"], 2 * z["c"]), F)]),
    Case("swiglu_bwd", lambda z: [((z["a"], z["b"], 2 * z["c"]), F),
                                  ((z["a"], z["b"], z["c"]), F)]),
    Case("expert_counts", lambda z: [((z["a"], z["b"], K_MOE), INT)],
         lambda z: {"experts": E_MOE, "dtype": "f64"}, int_high=E_MOE),
]

CASES = [
    Case("einsum", lambda z: [((z["a"], z["b"], z["c"]), F), ((z["c"], z["d"]), F)],
         lambda z: {"equation": "abc,cd->abd"}),
    Case("einsum", lambda z: [((z["a"], z["b"], z["c"]), F), ((z["a"], z["c"], z["d"]), F)],
         lambda z: {"equation": "abc,acd->bd"}),
    Case("einsum", lambda z: [((z["a"],), F), ((z["b"],), F)], lambda z: {"equation": "a,b->ab"}),
    Case("add", lambda z: [((z["a"], 1, z["c"]), F), ((z["b"], z["c"]), F)]),
    Case("sub", lambda z: [((z["a"], z["b"]), F), ((z["b"],), F)]),
    Case("mul", lambda z: [((z["a"], z["b"]), F), ((z["a"], 1), F)]),
    Case("div", lambda z: [((z["a"], z["b"]), F), ((z["a"], z["b"]), F)], positive=True),
    *[Case(kind, lambda z: [((z["a"], z["b"]), F)], positive=kind == "log")
      for kind in ("neg", "exp", "log", "tanh", "gelu", "gelu_erf", "silu", "relu",
                   "sigmoid")],
    Case("cast", lambda z: [((z["a"], z["b"]), F)], lambda z: {"dtype": "f32"}),
    Case("scale", lambda z: [((z["a"], z["b"]), F)], lambda z: {"factor": 0.5}),
    Case("pow", lambda z: [((z["a"], z["b"]), F)], lambda z: {"exponent": -0.5}, positive=True),
    Case("shift", lambda z: [((z["a"], z["b"]), F)], lambda z: {"offset": 1e-6}),
    Case("compare", lambda z: [((z["a"], z["b"]), F), ((z["b"],), F)], lambda z: {"op": "ge"}),
    Case("where", lambda z: [((z["a"], z["b"]), B), ((z["b"],), F), ((z["a"], z["b"]), F)]),
    Case("sum", lambda z: [((z["a"], z["b"], z["c"]), F)], lambda z: {"dims": [0, 2]}),
    Case("mean", lambda z: [((z["a"], z["b"], z["c"]), F)],
         lambda z: {"dims": [-1], "keepdim": True}),
    Case("max", lambda z: [((z["a"], z["b"]), F)], lambda z: {"dims": [1]}),
    Case("softmax", lambda z: [((z["a"], z["b"], z["c"]), F)], lambda z: {"dim": 1}),
    Case("log_softmax", lambda z: [((z["a"], z["b"]), F)]),
    Case("layer_norm", lambda z: [((z["a"], z["b"], z["c"]), F), ((z["c"],), F),
                                  ((z["c"],), F)]),
    Case("rms_norm", lambda z: [((z["a"], z["c"]), F), ((z["c"],), F)]),
    Case("embedding", lambda z: [((z["a"], z["b"]), INT), ((z["c"], z["d"]), F)]),
    Case("cross_entropy", lambda z: [((z["a"], z["b"], z["c"]), F), ((z["a"], z["b"]), INT)]),
    Case("reshape", lambda z: [((z["a"], z["b"], z["c"]), F)],
         lambda z: {"shape": [z["a"] * z["b"], z["c"]]}),
    Case("reshape", lambda z: [((z["a"] * z["b"], 1, z["c"]), F)],
         lambda z: {"shape": [z["a"], z["b"], z["c"]]}),
    Case("reshape", lambda z: [((z["a"], z["b"] * z["c"]), F)],
         lambda z: {"shape": [z["a"] * z["b"], z["c"]]}),
    Case("transpose", lambda z: [((z["a"], z["b"], z["c"]), F)], lambda z: {"perm": [2, 0, 1]}),
    Case("concat", lambda z: [((z["a"], z["b"]), F), ((z["a"], z["c"]), F)],
         lambda z: {"dim": 1}),
    Case("split", lambda z: [((z["a"], z["b"] + z["c"]), F)],
         lambda z: {"dim": 1, "sizes": [z["b"], z["c"]]}),
    Case("slice", lambda z: [((z["a"], z["b"]), F)],
         lambda z: {"dim": 0, "start": 1, "stop": z["a"]}),
    Case("rotary", lambda z: [((z["a"], z["b"], z["c"], 2 * z["d"]), F), ((z["b"], z["d"]), F),
                              ((z["b"], z["d"]), F)]),
    Case("attention", lambda z: [((z["a"], z["b"], z["c"] * z["d"], 4), F),
                                 ((z["a"], z["e"], z["c"], 4), F),
                                 ((z["a"], z["e"], z["c"], 3), F)],
         lambda z: {"causal": False}),
    Case("attention", lambda z: [((z["a"], z["b"], z["c"] * z["d"], 4), F),
                                 ((z["a"], z["b"], z["c"], 4), F),
                                 ((z["a"], z["b"], z["c"], 4), F)],
         lambda z: {"causal": True, "scale": 0.3}),
    Case("sgd_step", lambda z: [((z["a"], z["b"]), F), ((z["a"], z["b"]), F)]),
    Case("adamw_step", lambda z: [((z["a"], z["b"]), F), ((z["a"], z["b"]), F),
                                  *[((z["a"], z["b"]), DType.F32)] * 3], positive=True),
    Case("adamw_step", lambda z: [((z["c"],), DType.F32)] * 4, positive=True),
    *[Case(kind, lambda z: [((z["a"], z["b"]), F), ((z["a"], z["b"]), F)])
      for kind in ("gelu_bwd", "gelu_erf_bwd", "silu_bwd", "relu_bwd", "sigmoid_bwd",
                   "tanh_bwd")],
    Case("pad", lambda z: [((z["a"], z["b"]), F)], lambda z: {"dim": 1, "before": 1, "after": 2}),
    Case("constant_pad", lambda z: [((z["a"], z["b"]), F)],
         lambda z: {"dim": 1, "before": 2, "after": 1, "value": 3.0}),
    Case("broadcast_to", lambda z: [((z["a"], z["c"]), F)],
         lambda z: {"shape": [z["a"], z["b"], z["c"]], "dims": [1]}),
    Case("broadcast_to", lambda z: [((z["a"], 1), F)],
         lambda z: {"shape": [z["a"], z["b"]], "dims": [1]}),
    Case("max_bwd", lambda z: [((z["a"], z["b"]), F), ((z["a"],), F), ((z["a"],), F)],
         lambda z: {"dims": [1]}),
    Case("softmax_bwd", lambda z: [((z["a"], z["b"], z["c"]), F)] * 2, lambda z: {"dim": 1}),
    Case("log_softmax_bwd", lambda z: [((z["a"], z["b"]), F)] * 2),
    *[Case(f"{norm}_bwd_x", lambda z: [((z["a"], z["b"], z["c"]), F), ((z["c"],), F),
                                       ((z["a"], z["b"], z["c"]), F)])
      for norm in ("layer_norm", "rms_norm")],
    *[Case(f"{norm}_bwd_w", lambda z: [((z["a"], z["b"], z["c"]), F)] * 2)
      for norm in ("layer_norm", "rms_norm")],
    Case("cross_entropy_bwd",
         lambda z: [((z["a"], z["b"], z["c"]), F), ((z["a"], z["b"]), INT), ((), F)],
         lambda z: {"count": z["a"] * z["b"]}),
    Case("embedding_bwd", lambda z: [((z["a"], z["b"]), INT), ((z["a"], z["b"], z["d"]), F)],
         lambda z: {"vocab": z["b"] + z["c"]}),
    Case("attention_bwd", lambda z: [((z["a"], z["b"], z["c"] * z["d"], 4), F),
                                     ((z["a"], z["e"], z["c"], 4), F),
                                     ((z["a"], z["e"], z["c"], 3), F),
                                     ((z["a"], z["b"], z["c"] * z["d"], 3), F)],
         lambda z: {"causal": False}),
    Case("attention_bwd", lambda z: [((z["a"], z["b"], z["c"] * z["d"], 4), F),
                                     ((z["a"], z["b"], z["c"], 4), F),
                                     ((z["a"], z["b"], z["c"], 4), F),
                                     ((z["a"], z["b"], z["c"] * z["d"], 4), F)],
         lambda z: {"causal": True, "scale": 0.3}),
    *MOE_CASES,
]
_IDS = [f"{c.kind}-{i}" for i, c in enumerate(CASES)]


def _arrays(case: Case, specs: list[TensorSpec], rng: np.random.Generator,
            attrs: dict[str, Any], z: Z) -> list[np.ndarray]:
    arrays = []
    for spec in specs:
        if spec.dtype is B:
            arrays.append(rng.random(spec.shape) < 0.5)
        elif spec.dtype is INT:
            high = specs[1].shape[0] if case.kind == "embedding" else specs[0].shape[-1]
            high = case.int_high if case.int_high is not None else high
            arrays.append(rng.integers(0, high, size=spec.shape))
        elif case.positive:
            arrays.append(rng.uniform(0.5, 2.0, size=spec.shape))
        else:
            arrays.append(rng.normal(size=spec.shape))
    return arrays


def _cut(array: np.ndarray, operand: tuple[tuple[str, ...], ...], sig: DimSignature,
         factor: str, pieces: int, piece: int) -> np.ndarray:
    """Piece ``piece`` of ``pieces`` of ``array`` along ``factor`` (no-op when absent)."""
    for axis, dim in enumerate(operand):
        if factor in dim:
            sizes = [sig.size(f) for f in dim]
            view = array.reshape((*array.shape[:axis], *sizes, *array.shape[axis + 1:]))
            position = axis + dim.index(factor)
            step = sizes[dim.index(factor)] // pieces
            taken = np.take(view, range(piece * step, (piece + 1) * step), axis=position)
            local = array.shape[axis] // pieces
            return taken.reshape((*array.shape[:axis], local, *array.shape[axis + 1:]))
    return array


_COMBINE = {"sum": np.sum, "avg": np.mean, "max": np.max}


def _check_factor(opdef: Any, sig: DimSignature, arrays: list[np.ndarray],
                  outputs: tuple[np.ndarray, ...], attrs: dict[str, Any], factor: str,
                  pieces: int) -> None:
    results = []
    for piece in range(pieces):
        local_in = [_cut(a, op, sig, factor, pieces, piece)
                    for a, op in zip(arrays, sig.inputs, strict=True)]
        local_out = [_cut(o, op, sig, factor, pieces, piece)
                     for o, op in zip(outputs, sig.outputs, strict=True)]
        specs_in = tuple(TensorSpec(a.shape, F) for a in local_in)
        specs_out = tuple(TensorSpec(o.shape, F) for o in local_out)
        run_attrs = local_attrs(opdef, attrs, specs_in, specs_out)
        got = opdef.reference(local_in, run_attrs)
        if sig.kind(factor) is FactorKind.PARALLEL:
            for g, want in zip(got, local_out, strict=True):
                np.testing.assert_allclose(g, want, rtol=1e-9, atol=1e-9, err_msg=factor)
        results.append(got)
    if sig.kind(factor) is FactorKind.CONTRACTED:
        combine = _COMBINE[sig.reduction(factor)]
        for index, want in enumerate(outputs):
            total = combine(np.stack([r[index] for r in results]), axis=0)
            np.testing.assert_allclose(total, want, rtol=1e-6, atol=1e-9, err_msg=factor)


@pytest.mark.parametrize("case", CASES, ids=_IDS)
@settings(max_examples=6, deadline=None)
@given(sizes=st.fixed_dictionaries({k: st.sampled_from([2, 3, 4, 6]) for k in "abcde"}),
       seed=st.integers(0, 2**16))
def test_reference_agrees_with_signature_on_local_shards(case: Case, sizes: Z,
                                                         seed: int) -> None:
    opdef = get_op(case.kind)
    attrs = {**opdef.optional_attrs, **case.attrs(sizes)}
    specs = [TensorSpec(shape, dtype) for shape, dtype in case.specs(sizes)]
    outs = opdef.infer(tuple(specs), attrs)
    sig = opdef.signature(tuple(specs), outs, attrs)
    arrays = _arrays(case, specs, np.random.default_rng(seed), attrs, sizes)
    outputs = opdef.reference(arrays, attrs)
    assert [o.shape for o in outputs] == [o.shape for o in outs]
    checked = 0
    for factor in sig.shardable:
        for pieces in (2, 3):
            if sig.size(factor) % pieces == 0:
                _check_factor(opdef, sig, arrays, outputs, attrs, factor, pieces)
                checked += 1
    assert checked > 0 or not sig.shardable or all(
        sig.size(f) % 2 and sig.size(f) % 3 for f in sig.shardable)


def test_every_kind_has_a_shard_case() -> None:
    from graphs import op_kinds

    # opaque has no reference to cut into shards; tests/test_graphs_opaque.py checks that its
    # only strategy is all-replicate
    covered = {case.kind for case in CASES} | {"input", "param", "state", "opaque"}
    assert covered == set(op_kinds())
