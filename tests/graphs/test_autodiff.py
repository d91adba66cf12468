"""Every differentiable op kind's VJP against central finite differences (float64 NumPy).

For each case: parameters feed one op, each float output is weighted by a fixed random input
and summed to a scalar loss, :func:`graphs.autodiff.backward_graph` builds the backward pass,
:func:`graphs.autodiff_eval.evaluate` runs it, and every parameter gradient entry is compared
with (L(p + ε) − L(p − ε)) / 2ε computed by re-running the *forward* graph only. Kinds whose
forward rounds to f32 (cast, cross_entropy) are differentiated through an independent
float64 formula instead. A hypothesis test does the same on random chains of ops with
reused intermediates (so gradients of several consumers are summed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphs import DType, OpGraph, get_op, op_kinds
from graphs.autodiff import backward_graph, grad_name
from graphs.autodiff_eval import evaluate
from graphs.opgraph import SOURCE_KINDS

F = "f64"
EPS = 1e-6
MAX_ENTRIES = 48   # finite-difference entries checked per parameter (all when fewer)


@dataclass(frozen=True)
class Case:
    """``operands``: (shape, how) per input, how ∈ param | positive | input | int:<high> |
    bool; ``exact``: float64 forward used for the finite differences instead of the
    reference (for kinds that round to f32)."""

    kind: str
    operands: list[tuple[tuple[int, ...], str]]
    attrs: dict[str, Any] = field(default_factory=dict)
    exact: Callable[..., tuple[np.ndarray, ...]] | None = None
    id: str = ""


def _ce64(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, ...]:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return (-np.take_along_axis(logp, targets[..., None], axis=-1).mean(),)


P, POS = "param", "positive"
CASES = [
    Case("einsum", [((2, 3, 4), P), ((4, 5), P)], {"equation": "abc,cd->abd"}, id="matmul"),
    Case("einsum", [((2, 3, 4), P), ((2, 4, 5), P)], {"equation": "abc,acd->bd"}, id="batch"),
    Case("einsum", [((3,), P), ((4,), P)], {"equation": "a,b->ab"}, id="outer"),
    Case("einsum", [((3, 4), P)], {"equation": "ab->a"}, id="rowsum"),
    Case("einsum", [((3, 4), P)], {"equation": "ab->ba"}, id="transpose"),
    Case("einsum", [((2, 3, 4), P), ((3, 5), P)], {"equation": "abc,bd->d"}, id="summed"),
    Case("add", [((2, 1, 4), P), ((3, 4), P)]),
    Case("sub", [((2, 3), P), ((3,), P)]),
    Case("mul", [((2, 3), P), ((2, 1), P)]),
    Case("div", [((2, 3), P), ((1, 3), POS)]),
    *[Case(kind, [((3, 4), POS if kind == "log" else P)])
      for kind in ("neg", "exp", "log", "tanh", "gelu", "gelu_erf", "silu", "relu",
                   "sigmoid")],
    Case("cast", [((3, 4), P)], {"dtype": "f32"}, exact=lambda x: (x,)),
    Case("scale", [((3, 4), P)], {"factor": -0.75}),
    Case("where", [((3, 4), "bool"), ((4,), P), ((3, 4), P)]),
    Case("pow", [((3, 4), POS)], {"exponent": -0.5}, id="rsqrt"),
    Case("pow", [((3, 4), P)], {"exponent": 2.0}, id="square"),
    Case("pow", [((3, 4), P)], {"exponent": 3.0}, id="cube"),
    Case("shift", [((3, 4), P)], {"offset": 1e-6}),
    Case("broadcast_to", [((2, 1, 3), P)], {"shape": [2, 4, 3], "dims": [1]}, id="keepdim"),
    Case("broadcast_to", [((3,), P)], {"shape": [2, 3], "dims": [0]}, id="new-dim"),
    Case("sum", [((2, 3, 4), P)], {"dims": [0, 2]}),
    Case("sum", [((2, 3), P)], {"dims": [1], "keepdim": True}, id="keepdim"),
    Case("mean", [((2, 3, 4), P)], {"dims": [-1], "keepdim": True}),
    Case("mean", [((2, 3), P)], {"dims": [0, 1]}, id="all"),
    Case("max", [((3, 5), P)], {"dims": [1]}),
    Case("softmax", [((2, 3, 4), P)], {"dim": 1}),
    Case("log_softmax", [((3, 5), P)]),
    Case("layer_norm", [((2, 3, 6), P), ((6,), P), ((6,), P)]),
    Case("layer_norm", [((4, 6), P), ((6,), P)], id="nobias"),
    Case("rms_norm", [((2, 3, 6), P), ((6,), P)]),
    Case("embedding", [((2, 3), "int:7"), ((7, 4), P)]),
    Case("cross_entropy", [((2, 3, 7), P), ((2, 3), "int:7")], exact=_ce64),
    Case("reshape", [((2, 3, 4), P)], {"shape": [6, 4]}),
    Case("reshape", [((6, 1, 4), P)], {"shape": [2, 3, 4]}, id="split"),
    Case("transpose", [((2, 3, 4), P)], {"perm": [2, 0, 1]}),
    Case("concat", [((2, 3), P), ((2, 4), P)], {"dim": 1}),
    Case("split", [((2, 7), P)], {"dim": 1, "sizes": [3, 4]}),
    Case("slice", [((5, 3), P)], {"dim": 0, "start": 1, "stop": 4}),
    Case("slice", [((5, 3), P)], {"dim": -1, "start": -2, "stop": 9}, id="clamped"),
    Case("rotary", [((2, 3, 2, 4), P), ((3, 2), P), ((3, 2), P)]),
    Case("attention", [((2, 4, 4, 3), P), ((2, 4, 2, 3), P), ((2, 4, 2, 3), P)],
         {"causal": True, "scale": 0.7}, id="causal-gqa"),
    Case("attention", [((1, 3, 2, 4), P), ((1, 5, 2, 4), P), ((1, 5, 2, 3), P)],
         {"causal": False}, id="cross"),
    Case("attention", [((1, 3, 2, 4), P), ((1, 5, 1, 4), P), ((1, 5, 1, 2), P)],
         {"causal": True}, id="causal-t>s"),
    Case("moe_topk", [((2, 3, 4), P)], {"k": 2, "normalize": True, "scale": 1.5}, id="norm"),
    Case("moe_topk", [((2, 3, 4), POS)], {"k": 3}, id="plain"),
    Case("moe_dispatch", [((2, 4, 3), P), ((2, 4, 2), "int:3")],
         {"experts": 3, "capacity": 2}, id="dropping"),
    Case("moe_dispatch", [((2, 4, 3), P), ((2, 4, 2), "int:3"), ((2, 4, 2), P)],
         {"experts": 3, "capacity": 3}, id="weighted"),
    Case("moe_combine", [((2, 3, 2, 3), P), ((2, 4, 2), "int:3"), ((2, 4, 2), P)],
         id="weighted"),
    Case("moe_combine", [((2, 3, 2, 3), P), ((2, 4, 2), "int:3")], id="plain"),
    Case("swiglu", [((2, 3, 8), P)]),
    Case("constant_pad", [((2, 3), P)], {"dim": 1, "before": 1, "after": 2, "value": -1.5}),
]
_IDS = [f"{c.kind}-{c.id or i}" for i, c in enumerate(CASES)]

# Kinds with no VJP on purpose: sources, optimizer steps, and the backward-only kinds
# (no higher-order derivatives).
NO_VJP = {
    *SOURCE_KINDS, "sgd_step", "adamw_step", "attention_bwd", "compare",
    "cross_entropy_bwd", "embedding_bwd", "gelu_bwd", "gelu_erf_bwd", "silu_bwd", "relu_bwd",
    "sigmoid_bwd",
    "tanh_bwd", "layer_norm_bwd_x", "layer_norm_bwd_w", "rms_norm_bwd_x", "rms_norm_bwd_w",
    "log_softmax_bwd", "softmax_bwd", "max_bwd", "pad", "opaque",
    "moe_topk_bwd", "moe_gate_grad", "expert_counts", "swiglu_bwd",
}


def _value(how: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if how.startswith("int:"):
        return rng.integers(0, int(how[4:]), size=shape)
    if how == "bool":
        return rng.random(shape) < 0.5
    if how == POS:
        return rng.uniform(0.5, 2.0, size=shape)
    return rng.normal(size=shape)


def _build(case: Case, rng: np.random.Generator) -> tuple[OpGraph, dict[str, np.ndarray]]:
    graph, feeds, names = OpGraph(name=case.kind), {}, []
    for index, (shape, how) in enumerate(case.operands):
        name = f"in{index}"
        dtype = "int64" if how.startswith("int:") else "bool" if how == "bool" else F
        source = graph.param if how in (P, POS) else graph.input
        names.append(source(name, shape, dtype))
        feeds[name] = _value(how, shape, rng)
    outs = graph.op(case.kind, names, name="op", **case.attrs)
    terms = []
    for j, out in enumerate((outs,) if isinstance(outs, str) else outs):
        if graph.tensors[out].dtype is not DType.F64:
            out = graph.op("cast", [out], name=f"widen{j}", dtype=F)
        weight = graph.input(f"weight{j}", graph.tensors[out].shape, F)
        feeds[weight] = rng.normal(size=graph.tensors[out].shape)
        product = graph.op("mul", [out, weight], name=f"weigh{j}")
        rank = len(graph.tensors[product].shape)
        terms.append(graph.op("sum", [product], name=f"total{j}", dims=list(range(rank))))
    loss = terms[0]
    for j, term in enumerate(terms[1:]):
        loss = graph.op("add", [loss, term], name=f"plus{j}")
    graph.mark_output(loss)
    return graph, feeds


def _loss(graph: OpGraph, feeds: dict[str, np.ndarray], case: Case | None) -> float:
    """The forward loss in float64, with ``case.exact`` replacing the op under test."""
    values = dict(feeds)
    for op in graph.topo_ops():
        if op.kind in SOURCE_KINDS:
            continue
        arrays = [values[t] for t in op.inputs]
        if case is not None and case.exact is not None and op.name == "op":
            results = case.exact(*arrays)
        elif op.kind == "cast":
            results = (arrays[0].astype(np.float64),)   # the widening casts stay exact
        else:
            results = get_op(op.kind).reference(arrays, graph.attrs(op))
        values.update(zip(op.outputs, results, strict=True))
    return float(values[graph.outputs[0]])


def check_gradients(graph: OpGraph, feeds: dict[str, np.ndarray], case: Case | None,
                    rng: np.random.Generator, rtol: float = 1e-5) -> int:
    """Compare every parameter gradient with central differences; returns entries checked."""
    full = backward_graph(graph)
    seed = grad_name(graph.outputs[0])
    values = evaluate(full, {**feeds, seed: np.array(1.0)})
    checked = 0
    for name, tensor in graph.tensors.items():
        if graph.producer(name).kind != "param":
            continue
        grad = values[grad_name(name)]
        assert grad.shape == tensor.shape
        flat = np.arange(grad.size)
        picks = flat if grad.size <= MAX_ENTRIES else rng.choice(flat, MAX_ENTRIES, replace=False)
        for index in picks:
            where = np.unravel_index(index, grad.shape)
            diffs = []
            for sign in (1.0, -1.0):
                moved = feeds[name].copy()
                moved[where] += sign * EPS
                diffs.append(_loss(graph, {**feeds, name: moved}, case))
            numeric = (diffs[0] - diffs[1]) / (2 * EPS)
            np.testing.assert_allclose(grad[where], numeric, rtol=rtol, atol=1e-7,
                                       err_msg=f"d loss / d {name}{list(where)}")
            checked += 1
    return checked


@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_vjp_matches_finite_differences(case: Case) -> None:
    rng = np.random.default_rng(11)
    graph, feeds = _build(case, rng)
    assert check_gradients(graph, feeds, case, rng) > 0


def test_every_differentiable_kind_has_a_vjp_and_a_case() -> None:
    with_vjp = {kind for kind in op_kinds() if get_op(kind).vjp is not None}
    assert with_vjp == set(op_kinds()) - NO_VJP
    assert {case.kind for case in CASES} == with_vjp


def test_split_with_one_piece_unused_pads_the_other() -> None:
    graph = OpGraph(name="split")
    x = graph.param("x", (2, 7), F)
    _, right = graph.op("split", [x], name="cut", dim=1, sizes=[3, 4])
    graph.mark_output(graph.op("sum", [graph.op("exp", [right], name="e")], name="s",
                               dims=[0, 1]))
    full = backward_graph(graph)
    assert [op.kind for op in full.ops if op.name == "bwd/cut"] == ["pad"]
    rng = np.random.default_rng(3)
    assert check_gradients(graph, {"x": rng.normal(size=(2, 7))}, None, rng) == 14


# ------------------------------------------------------------------- random chains
UNARY = ("tanh", "gelu", "silu", "sigmoid", "neg", "softmax", "log_softmax", "scale", "exp")
BINARY = ("add", "mul", "sub", "div")
SHAPE = (3, 4)


def _chain(steps: list[tuple[str, int]], graph: OpGraph) -> str:
    """Apply ``steps`` to a [3, 4] activation; ``int`` picks an earlier tensor to reuse."""
    tensors = [graph.op("tanh", [graph.param("p0", SHAPE, F)], name="start")]
    for k, (kind, pick) in enumerate(steps):
        x, name = tensors[-1], f"step{k}"
        other = tensors[pick % len(tensors)]
        if kind in BINARY:
            if kind == "div":
                other = graph.op("exp", [other], name=f"{name}.positive")
            y = graph.op(kind, [x, other], name=name)
        elif kind == "scale":
            y = graph.op("scale", [x], name=name, factor=0.5)
        elif kind == "exp":
            y = graph.op("exp", [graph.op("tanh", [x], name=f"{name}.squash")], name=name)
        elif kind == "norm":
            w = graph.param(f"w{k}", (SHAPE[1],), F)
            y = graph.op("rms_norm" if pick % 2 else "layer_norm", [x, w], name=name)
        elif kind == "linear":
            w = graph.param(f"w{k}", (SHAPE[1], SHAPE[1]), F)
            y = graph.op("einsum", [x, w], name=name, equation="ab,bc->ac")
        elif kind == "bias":
            b = graph.param(f"b{k}", (SHAPE[1],), F)
            y = graph.op("add", [x, b], name=name)
        elif kind == "roundtrip":
            flat = graph.op("reshape", [x], name=f"{name}.flat", shape=[12])
            y = graph.op("reshape", [flat], name=name, shape=list(SHAPE))
        else:
            y = graph.op(kind, [x], name=name)
        tensors.append(y)
    return tensors[-1]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(steps=st.lists(st.tuples(st.sampled_from(
    (*UNARY, *BINARY, "norm", "linear", "bias", "roundtrip")), st.integers(0, 7)),
    min_size=1, max_size=6), seed=st.integers(0, 2**16))
def test_random_chains_match_finite_differences(steps: list[tuple[str, int]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    graph = OpGraph(name="chain")
    out = _chain(steps, graph)
    weight = graph.input("weight", SHAPE, F)
    graph.mark_output(graph.op("sum", [graph.op("mul", [out, weight], name="weigh")],
                               name="loss", dims=[0, 1]))
    feeds = {"weight": rng.normal(size=SHAPE)}
    for name, tensor in graph.tensors.items():
        if graph.producer(name).kind == "param":
            feeds[name] = rng.normal(size=tensor.shape) * 0.7
    check_gradients(graph, feeds, None, rng, rtol=1e-4)
