"""Backward graphs of zoo models: gradients, structure, FLOPs, recomputation, errors.

Oracles: central finite differences of a float64 loss computed here from the forward graph's
logits (independent of the f32-rounding ``cross_entropy`` reference and of every VJP); closed
forms for the einsum FLOPs; the op and tensor names the naming contract promises.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import graphs
from graphs import GraphError, OpGraph, TensorRole, zoo
from graphs.autodiff import (
    AutodiffError,
    NoGradientError,
    Phase,
    UnknownLossError,
    backward_graph,
    grad_name,
    phase_of,
)
from graphs.autodiff_eval import evaluate
from graphs.opgraph import SOURCE_KINDS

SMALL = {"layers": 2, "batch": 2, "seq": 8, "hidden": 32, "heads": 4, "vocab": 53}
MODELS = {
    "gpt2": ("gpt2", SMALL),                                   # LayerNorm, GELU, tied, biases
    "llama-gqa": ("llama3-8b", {**SMALL, "kv_heads": 2}),      # RMSNorm, rotary, SwiGLU, GQA
}
ENTRIES_PER_PARAM = 2
EPS = 1e-5


def _feeds(graph: OpGraph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for name, tensor in graph.tensors.items():
        kind = graph.producer(name).kind
        if kind not in SOURCE_KINDS:
            continue
        if not tensor.dtype.is_float:
            high = graph.tensors["embed.tokens"].shape[0] if name != "positions" else 8
            feeds[name] = rng.integers(0, high, size=tensor.shape)
        elif name in ("rope.cos", "rope.sin"):
            seq, half = tensor.shape
            angle = np.outer(np.arange(seq), 1e4 ** (-np.arange(half) / half))
            feeds[name] = np.cos(angle) if name == "rope.cos" else np.sin(angle)
        else:
            feeds[name] = rng.normal(size=tensor.shape) * (0.3 if kind == "param" else 1.0)
    return feeds


def _ce_loss(graph: OpGraph, feeds: dict[str, np.ndarray]) -> float:
    """Mean cross-entropy of the forward logits, in float64, written out here."""
    logits = evaluate(graph, feeds)["head.out"]
    shifted = logits - logits.max(axis=-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return float(-np.take_along_axis(logp, feeds["targets"][..., None], axis=-1).mean())


def _params(graph: OpGraph) -> list[str]:
    return [n for n, t in graph.tensors.items() if t.role is TensorRole.PARAM]


@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("model", list(MODELS), ids=list(MODELS))
def test_zoo_gradients_match_finite_differences(model: str, recompute: str) -> None:
    name, overrides = MODELS[model]
    graph = zoo.build(name, dtype="f64", **overrides)
    rng = np.random.default_rng(5)
    feeds = _feeds(graph, rng)
    full = backward_graph(graph, recompute=recompute)
    values = evaluate(full, {**feeds, "grad/loss.out": np.array(1.0)})
    for param in _params(graph):
        grad = values[grad_name(param)]
        for _ in range(ENTRIES_PER_PARAM):
            where = tuple(int(rng.integers(0, s)) for s in grad.shape)
            losses = []
            for sign in (1.0, -1.0):
                moved = feeds[param].copy()
                moved[where] += sign * EPS
                losses.append(_ce_loss(graph, {**feeds, param: moved}))
            numeric = (losses[0] - losses[1]) / (2 * EPS)
            np.testing.assert_allclose(grad[where], numeric, rtol=1e-5, atol=1e-9,
                                       err_msg=f"{model} d loss / d {param}{list(where)}")


def test_recompute_modes_give_identical_gradients() -> None:
    graph = zoo.build("llama3-8b", dtype="f64", **{**SMALL, "kv_heads": 2})
    feeds = {**_feeds(graph, np.random.default_rng(1)), "grad/loss.out": np.array(1.0)}
    results = {mode: evaluate(backward_graph(graph, recompute=mode), feeds)
               for mode in ("none", "selective", "selective-op", "full")}
    for param in _params(graph):
        for mode in ("selective", "selective-op", "full"):
            np.testing.assert_array_equal(results[mode][grad_name(param)],
                                          results["none"][grad_name(param)])


def test_tied_embedding_gradient_sums_lookup_and_head() -> None:
    graph = zoo.build("gpt2", dtype="f64", **SMALL)
    full = backward_graph(graph)
    producer = full.producer("grad/embed.tokens")
    assert producer.kind == "add"
    kinds = sorted(full.producer(t).kind for t in producer.inputs)
    assert kinds == ["einsum", "embedding_bwd"]


@pytest.mark.parametrize("model", ["gpt2", "llama3-8b", "transformer", "mlp"])
def test_no_gradients_for_data_and_every_param_gets_one(model: str) -> None:
    overrides = {k: v for k, v in SMALL.items()
                 if not (model in ("transformer", "mlp") and k == "vocab")}
    if model == "mlp":
        overrides = {"layers": 2, "batch": 2, "seq": 4, "hidden": 16, "ffn": 32}
    if model == "llama3-8b":
        overrides["kv_heads"] = 2
    graph = zoo.build(model, dtype="bf16", **overrides)
    full = backward_graph(graph)
    for data in ("tokens", "targets", "positions", "rope.cos", "rope.sin", "x"):
        assert grad_name(data) not in full.tensors
    for param in _params(graph):
        grad = full.tensors[grad_name(param)]
        assert (grad.role, grad.grad_of) == (TensorRole.GRAD, param)
        assert (grad.shape, grad.dtype) == (graph.tensors[param].shape,
                                            graph.tensors[param].dtype)
    assert full.outputs == graph.outputs
    grads = [t for t in full.tensors.values() if t.role is TensorRole.GRAD]
    assert len(grads) == len(_params(graph))
    for name, tensor in full.tensors.items():
        of = name[len("grad/"):]
        if name.startswith("grad/") and of in graph.tensors:
            assert (tensor.shape, tensor.dtype) == (graph.tensors[of].shape,
                                                    graph.tensors[of].dtype), name
    full.validate()
    assert graphs.loads(graphs.dumps(full)) == full


def test_mlp_seed_is_the_output_gradient_and_input_gets_none() -> None:
    graph = zoo.build("mlp", dtype="f64", layers=2, batch=2, seq=4, hidden=8, ffn=16)
    (output,) = graph.outputs
    full = backward_graph(graph)
    seed = full.tensors[grad_name(output)]
    assert (seed.role, seed.shape) == (TensorRole.INPUT, graph.tensors[output].shape)
    # the first einsum reads the data input x: only its weight gradient is computed
    assert [op.name for op in full.ops if op.name.startswith("bwd/layers.0.mlp.up")] == \
        ["bwd/layers.0.mlp.up"]
    rng = np.random.default_rng(2)
    feeds = _feeds(graph, rng)
    dy = rng.normal(size=seed.shape)
    values = evaluate(full, {**feeds, grad_name(output): dy})
    w = "layers.0.mlp.w1"
    where = (3, 5)
    losses = []
    for sign in (1.0, -1.0):
        moved = feeds[w].copy()
        moved[where] += sign * EPS
        losses.append(float((evaluate(graph, {**feeds, w: moved})[output] * dy).sum()))
    numeric = (losses[0] - losses[1]) / (2 * EPS)
    np.testing.assert_allclose(values[grad_name(w)][where], numeric, rtol=1e-6)


def _forward_key(op_name: str) -> str:
    """The forward op a backward op belongs to: strip ``bwd/`` and a ``.<k>`` suffix."""
    return re.sub(r"\.\d+$", "", op_name[len("bwd/"):])


@pytest.mark.parametrize("recompute", ["none", "selective", "selective-op", "full"])
def test_topo_order_is_forward_then_backward_in_reverse(recompute: str) -> None:
    graph = zoo.build("llama3-8b", dtype="bf16", **{**SMALL, "kv_heads": 2})
    full = backward_graph(graph, recompute=recompute)
    names = [op.name for op in full.topo_ops()]
    forward = [op.name for op in graph.topo_ops()]
    assert names[:len(forward)] == forward
    assert [op.name for op in full.ops][:len(graph.ops)] == [op.name for op in graph.ops]
    rest = names[len(forward):]
    assert rest[0] == "grad/loss.out"
    assert {phase_of(n) for n in rest[1:]} <= {Phase.BACKWARD, Phase.RECOMPUTE}
    position = {name: i for i, name in enumerate(forward)}
    keys = [position[_forward_key(n)] for n in rest[1:] if phase_of(n) is Phase.BACKWARD]
    assert keys == sorted(keys, reverse=True)


def _einsum_flops(graph: OpGraph, phase: Phase) -> float:
    total = 0.0
    for op in graph.ops:
        if op.kind == "einsum" and phase_of(op.name) is phase:
            ins, outs = graph.specs(op)
            total += graph.opdef(op).flops(ins, outs, graph.attrs(op))
    return total


def test_backward_einsum_flops_are_twice_the_forward() -> None:
    b, s, h, f, layers, heads = 2, 16, 64, 256, 3, 4
    graph = zoo.build("transformer", dtype="bf16", layers=layers, batch=b, seq=s, hidden=h,
                      ffn=f, heads=heads)
    full = backward_graph(graph)
    closed_forward = layers * 2 * b * s * (4 * h * h + 2 * h * f)   # q k v o, up, down
    assert _einsum_flops(full, Phase.FORWARD) == closed_forward
    assert _einsum_flops(full, Phase.BACKWARD) == 2 * closed_forward
    attention = {op.kind: graph.opdef(op).flops(*full.specs(op), full.attrs(op))
                 for op in full.ops if op.kind in ("attention", "attention_bwd")}
    d = h // heads
    assert attention["attention"] == 2 * b * s * s * heads * 2 * d
    assert attention["attention_bwd"] == 2.5 * attention["attention"]


def _layer(name: str) -> str | None:
    match = re.match(r"^(?:bwd/|recompute/)?(layers\.\d+)\.", name)
    return match.group(1) if match else None


def test_full_recompute_saves_only_layer_inputs() -> None:
    graph = zoo.build("gpt2", dtype="bf16", **{**SMALL, "layers": 3})
    full = backward_graph(graph, recompute="full")
    produced_in = {t: op.name for op in graph.ops if op.kind not in SOURCE_KINDS
                   for t in op.outputs}
    saved = {t for op in full.ops if phase_of(op.name) is not Phase.FORWARD
             for t in op.inputs if t in produced_in}
    inside = {t for t in saved if _layer(produced_in[t]) is not None}
    # a layer's only saved activation is its output, i.e. the next layer's (or final norm's)
    # input
    assert inside == {f"layers.{i}.ffn_residual.out" for i in range(3)}
    recompute_inputs = {t for op in full.ops if phase_of(op.name) is Phase.RECOMPUTE
                        for t in op.inputs}
    for tensor in recompute_inputs:
        role = full.tensors[tensor].role
        assert tensor.startswith("recompute/") or role in (TensorRole.PARAM, TensorRole.INPUT) \
            or tensor in ("embed.add_positions.out", *inside)
    without = backward_graph(graph)
    saved_none = {t for op in without.ops if phase_of(op.name) is not Phase.FORWARD
                  for t in op.inputs if t in produced_in and _layer(produced_in[t])}
    assert len(saved_none) > 5 * len(inside)


def test_recompute_ops_sit_right_before_their_layers_backward() -> None:
    graph = zoo.build("gpt2", dtype="bf16", **{**SMALL, "layers": 3})
    names = [op.name for op in backward_graph(graph, recompute="full").topo_ops()]
    for layer in ("layers.0", "layers.1", "layers.2"):
        recompute = [i for i, n in enumerate(names) if n.startswith(f"recompute/{layer}.")]
        backward = [i for i, n in enumerate(names) if n.startswith(f"bwd/{layer}.")]
        assert recompute == list(range(recompute[0], recompute[-1] + 1))
        assert recompute[-1] + 1 == backward[0]
        others = [i for i, n in enumerate(names[:recompute[0]])
                  if phase_of(n) is Phase.BACKWARD and _layer(n) not in (None, layer)]
        assert all(_layer(names[i]) > layer for i in others)


def test_selective_recompute_keeps_einsum_and_attention_outputs() -> None:
    graph = zoo.build("gpt2", dtype="bf16", **SMALL)
    full = backward_graph(graph, recompute="selective")
    kinds = {op.kind for op in full.ops if phase_of(op.name) is Phase.RECOMPUTE}
    assert kinds and not kinds & {"einsum", "attention"}
    assert "gelu" in kinds and "layer_norm" in kinds


def test_op_level_selective_recomputes_every_second_matmul_the_backward_needs() -> None:
    # torchtitan's policy over wq, wk, wv, wo, w1, w3, w2 recomputes the 2nd, 4th and 6th
    # (wk, wo, w3); the backward needs all three: wk's output through rotary (attention's
    # backward), wo's through the residual sum (the next norm's backward reads its input),
    # w3's by the gated product's backward
    graph = zoo.build("llama3-8b", dtype="bf16", **{**SMALL, "kv_heads": 2})
    full = backward_graph(graph, recompute="selective-op")
    again = sorted(op.name[len("recompute/"):] for op in full.ops
                   if phase_of(op.name) is Phase.RECOMPUTE and op.kind == "einsum")
    assert again == sorted(f"layers.{i}.{name}" for i in range(SMALL["layers"])
                           for name in ("attn.k", "attn.o", "mlp.up"))
    assert "attention" not in {op.kind for op in full.ops
                               if phase_of(op.name) is Phase.RECOMPUTE}
    # the extra forward FLOPs: 2·tokens·(d·d_kv + d·d + d·ffn) per layer (d_kv: kv heads)
    tokens, d = SMALL["batch"] * SMALL["seq"], SMALL["hidden"]
    d_kv = 2 * d // SMALL["heads"]
    up = next(op for op in graph.ops if op.name == "layers.0.mlp.up")
    ffn = graph.specs(up)[1][0].shape[-1]
    assert _einsum_flops(full, Phase.RECOMPUTE) == SMALL["layers"] * 2 * tokens * (
        d * d_kv + d * d + d * ffn)


def _toy() -> OpGraph:
    graph = OpGraph(name="toy")
    x = graph.input("x", (2, 3), "f64")
    w = graph.param("w", (3, 3), "f64")
    graph.param("unused", (3,), "f64")
    y = graph.op("einsum", [x, w], name="mm", outputs=["y"], equation="ab,bc->ac")
    graph.mark_output(graph.op("sum", [y], name="loss", outputs=["loss"], dims=[0, 1]))
    return graph


def test_unused_param_gets_no_gradient_and_forward_is_untouched() -> None:
    graph = _toy()
    before = graphs.dumps(graph)
    full = backward_graph(graph)
    assert graphs.dumps(graph) == before and full.name == graph.name
    assert "grad/w" in full.tensors and "grad/unused" not in full.tensors


def test_gradient_shared_with_add_is_copied_for_a_parameter() -> None:
    graph = OpGraph(name="bias")
    x = graph.input("x", (3,), "f64")
    b = graph.param("b", (3,), "f64")
    y = graph.op("add", [x, b], name="plus", outputs=["y"])
    graph.mark_output(graph.op("sum", [graph.op("exp", [y], name="e")], name="s", dims=[0]))
    full = backward_graph(graph)
    assert full.producer("grad/b").name == "bwd/b"
    values = evaluate(full, {"x": np.ones(3), "b": np.zeros(3), "grad/s.out": np.array(1.0)})
    np.testing.assert_allclose(values["grad/b"], np.full(3, math.e))


@pytest.mark.parametrize(("kwargs", "error", "needle"), [
    ({"loss": "los"}, UnknownLossError, '"los"'),
    ({"loss": "x"}, NoGradientError, '"x"'),
    ({"recompute": "some"}, AutodiffError, '"some"'),
], ids=["unknown-loss", "no-param", "bad-mode"])
def test_errors_name_the_culprit(kwargs: dict, error: type, needle: str) -> None:
    with pytest.raises(error, match=needle) as caught:
        backward_graph(_toy(), **kwargs)
    assert isinstance(caught.value, GraphError)


def test_several_outputs_need_an_explicit_loss() -> None:
    graph = _toy()
    graph.mark_output("y")
    with pytest.raises(UnknownLossError, match="pass loss="):
        backward_graph(graph)
    assert "grad/w" in backward_graph(graph, loss="loss").tensors


def test_phase_of_reads_the_prefix() -> None:
    assert [phase_of(n) for n in ("embed.lookup", "bwd/head.1", "recompute/layers.0.attn.q",
                                  "opt/head.weight")] == \
        [Phase.FORWARD, Phase.BACKWARD, Phase.RECOMPUTE, Phase.OPTIMIZER]
    assert grad_name("layers.0.attn.wq") == "grad/layers.0.attn.wq"
