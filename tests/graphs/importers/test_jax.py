"""The JAX importer against independent facts: the pytree's own sizes, closed-form matmul
FLOPs, JAX's own numerics (forward and value_and_grad), and the planner accepting the graphs.

The models are plain ``jax.numpy`` code (``autoshard/bench/jax_models.py``), small enough for
NumPy evaluation in a second.
"""

from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import autoshard
from autoshard.bench import jax_models as models
from graphs import get_op
from graphs.autodiff import backward_graph
from graphs.autodiff_eval import evaluate
from graphs.importers import UnmappedOpsError, UnmappedOpsWarning

pytestmark = pytest.mark.jax

SHAPE = models.GptShape(layers=3, hidden=32, heads=4, ffn=64, batch=2, seq=8)


def _gpt_loss():
    return functools.partial(models.gpt_loss, heads=SHAPE.heads)


def _import(fn, *args):
    from graphs.importers.jax_jaxpr import import_jax

    return import_jax(fn, *args)


def _feeds(imported, args) -> dict[str, np.ndarray]:
    import jax

    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(args)]
    return {**dict(zip(imported.arg_tensors, leaves, strict=True)), **imported.constants}


def _cases(dtype):
    mlp_args = (models.mlp_params(16, 32, dtype), np.random.default_rng(2)
                .standard_normal((4, 16)).astype(dtype))
    gpt_args = (models.gpt_params(SHAPE, dtype), models.gpt_input(SHAPE, dtype))
    return {"mlp": (models.mlp_loss, mlp_args), "gpt": (_gpt_loss(), gpt_args)}


def test_parameters_are_the_pytree_leaves_with_dotted_names() -> None:
    import jax

    params = models.gpt_params(SHAPE)
    graph = _import(_gpt_loss(), params, models.gpt_input(SHAPE)).graph
    ours = {name: t for name, t in graph.tensors.items() if t.role.value == "param"}
    assert sum(t.numel for t in ours.values()) == sum(leaf.size for leaf in
                                                      jax.tree.leaves(params))
    assert {"layers.0.wq", "layers.2.w2", "ln_f_g"} <= set(ours)
    assert ours["layers.1.w1"].shape == (SHAPE.hidden, SHAPE.ffn)
    assert graph.tensors["x"].role.value == "input"


def test_matmul_flops_equal_the_closed_form() -> None:
    graph = _import(_gpt_loss(), models.gpt_params(SHAPE), models.gpt_input(SHAPE)).graph
    b, s, d, f, h = SHAPE.batch, SHAPE.seq, SHAPE.hidden, SHAPE.ffn, SHAPE.heads
    per_layer = (4 * 2 * b * s * d * d          # q, k, v, o projections
                 + 2 * 2 * b * h * s * s * (d // h)   # scores and context
                 + 2 * 2 * b * s * d * f)       # up and down projections
    einsums = [op for op in graph.ops if op.kind == "einsum"]
    flops = sum(get_op("einsum").flops(*graph.specs(op), graph.attrs(op)) for op in einsums)
    assert len(einsums) == 8 * SHAPE.layers
    assert flops == SHAPE.layers * per_layer


@pytest.mark.parametrize("model", ["mlp", "gpt"])
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "value_and_grad"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_numpy_evaluation_equals_jax(model: str, grad: bool, dtype) -> None:
    import jax

    with jax.enable_x64(dtype == np.float64):
        fn, args = _cases(dtype)[model]
        fn = jax.value_and_grad(fn) if grad else fn
        imported = _import(fn, *args)
        values = evaluate(imported.graph, _feeds(imported, args))
        expected = [np.asarray(leaf) for leaf in jax.tree.leaves(fn(*args))]
    tolerance = 2e-5 if dtype == np.float32 else 1e-12
    assert len(imported.out_tensors) == len(expected)
    for name, want in zip(imported.out_tensors, expected, strict=True):
        got = values[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        scale = max(float(np.max(np.abs(want))), 1e-30)
        assert float(np.max(np.abs(got - want))) <= tolerance * scale, name


def test_value_and_grad_outputs_are_named_after_the_parameters() -> None:
    import jax

    fn, args = _cases(np.float32)["mlp"]
    graph = _import(jax.value_and_grad(fn), *args).graph
    assert graph.outputs[0] == "out.0"
    assert sorted(graph.outputs[1:]) == ["grad/b1", "grad/b2", "grad/w1", "grad/w2"]
    assert graph.tensors["grad/w1"].grad_of == "w1"
    assert any(op.name.startswith("bwd/") for op in graph.ops)


def test_our_autodiff_on_the_imported_loss_equals_jax_grad() -> None:
    import jax

    with jax.enable_x64(True):
        fn, args = _cases(np.float64)["gpt"]
        imported = _import(fn, *args)
        full = backward_graph(imported.graph)
        feeds = {**_feeds(imported, args), "grad/out": np.ones(())}
        values = evaluate(full, feeds)
        grads = jax.grad(fn)(*args)
    for layer, name in ((0, "wq"), (2, "w1"), (1, "ln2_b")):
        want = np.asarray(grads["layers"][layer][name])
        got = values[f"grad/layers.{layer}.{name}"]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * np.abs(want).max())


def test_layers_without_named_scope_get_identical_names() -> None:
    """Inner layers match exactly (the first and last also hold the ops before/after the
    stack: the inference only sees which parameters an op depends on)."""
    shape = models.GptShape(layers=4, hidden=32, heads=4, ffn=64, batch=2, seq=8)
    graph = _import(_gpt_loss(), models.gpt_params(shape), models.gpt_input(shape)).graph

    def layer(index: int) -> set[str]:
        prefix = f"layers.{index}"
        return {re.sub(r"^layers\.\d+", "*", op.name) for op in graph.ops
                if op.name.startswith(prefix + "/") or op.name.startswith(prefix + ".")}

    assert layer(1) and layer(1) == layer(2)
    assert "layers.1/dot_general" in {op.name for op in graph.ops}


def test_named_scope_names_the_ops() -> None:
    import jax
    import jax.numpy as jnp

    def fn(params, x):
        for i, w in enumerate(params["blocks"]):
            with jax.named_scope(f"blocks.{i}"), jax.named_scope("mlp"):
                x = jnp.tanh(x @ w)
        return x

    params = {"blocks": [np.ones((4, 4), np.float32)] * 2}
    graph = _import(fn, params, np.ones((2, 4), np.float32)).graph
    names = [op.name for op in graph.ops if op.kind not in ("param", "input")]
    assert names == ["blocks.0.mlp/dot_general", "blocks.0.mlp/tanh",
                     "blocks.1.mlp/dot_general", "blocks.1.mlp/tanh"]


def _with_cumsum(params, x):
    import jax.numpy as jnp

    return jnp.cumsum(x @ params["w"], axis=1).sum() + jnp.cumsum(x, axis=0).sum()


def test_unmapped_primitive_becomes_opaque_with_a_warning() -> None:
    params = {"w": np.ones((4, 3), np.float32)}
    with pytest.warns(UnmappedOpsWarning, match=r"cumsum x2"):
        graph = _import(_with_cumsum, params, np.ones((2, 4), np.float32)).graph
    opaque = [op for op in graph.ops if op.kind == "opaque"]
    assert [op.attrs["target"] for op in opaque] == ["cumsum", "cumsum"]
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=2,tp=4"))
    assert all(p == "R" for name in opaque[0].inputs for p in plan.tensors[name].placements)


def test_strict_names_every_unmapped_primitive() -> None:
    from graphs.importers import from_jax

    params = {"w": np.ones((4, 3), np.float32)}
    with pytest.raises(UnmappedOpsError, match=r"cumsum x2") as error:
        from_jax(_with_cumsum, params, np.ones((2, 4), np.float32), strict=True)
    assert error.value.counts == {"cumsum": 2}


@pytest.mark.parametrize("kind", ["forward", "training", "value_and_grad"])
def test_plans_on_dp2_tp4(kind: str) -> None:
    import jax

    shape = models.GptShape(layers=1, hidden=64, heads=4, ffn=256, batch=8, seq=16)
    fn = functools.partial(models.gpt_loss, heads=shape.heads)
    fn = jax.value_and_grad(fn) if kind == "value_and_grad" else fn
    graph = _import(fn, models.gpt_params(shape), models.gpt_input(shape)).graph
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=2,tp=4"),
                          training=kind == "training", time_limit=60)
    assert plan.objective.total_s > 0
    assert len(plan.tensors["layers.0.wq"].placements) == 2
    if kind == "value_and_grad":
        assert set(plan.tensors) == set(graph.tensors)


