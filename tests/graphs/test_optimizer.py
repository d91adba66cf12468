"""Optimizer steps: AdamW and SGD against torch.optim, and the state append_optimizer adds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphs import DType, OpGraph, TensorRole, get_op
from graphs.errors import StructureError
from graphs.optimizer import append_optimizer


def _adamw_attrs(**overrides: float) -> dict[str, float]:
    attrs = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1}
    attrs.update(overrides)
    return attrs


@pytest.mark.parametrize("steps", [1, 3])
def test_adamw_step_matches_torch_adamw(steps: int) -> None:
    rng = np.random.default_rng(0)
    param = rng.standard_normal((5, 7))
    grads = [rng.standard_normal((5, 7)) for _ in range(steps)]
    attrs = _adamw_attrs()
    weight = torch.nn.Parameter(torch.tensor(param))
    opt = torch.optim.AdamW([weight], lr=attrs["lr"], betas=(attrs["beta1"], attrs["beta2"]),
                            eps=attrs["eps"], weight_decay=attrs["weight_decay"])
    ours, m, v = param.copy(), np.zeros_like(param), np.zeros_like(param)
    step = get_op("adamw_step").reference
    for k, grad in enumerate(grads, start=1):
        weight.grad = torch.tensor(grad)
        opt.step()
        ours, m, v = step([ours, grad, m, v], {**attrs, "step": k})
    np.testing.assert_allclose(ours, weight.detach().numpy(), rtol=1e-12, atol=1e-12)
    state = opt.state[weight]
    np.testing.assert_allclose(m, state["exp_avg"].numpy(), rtol=1e-12)
    np.testing.assert_allclose(v, state["exp_avg_sq"].numpy(), rtol=1e-12)


def test_adamw_with_master_updates_the_master_and_casts_the_param() -> None:
    rng = np.random.default_rng(1)
    master = rng.standard_normal(16)
    param = master.astype(np.float16)
    grad = rng.standard_normal(16).astype(np.float16)
    zeros = np.zeros(16)
    attrs = {**_adamw_attrs(), "step": 1}
    fp32 = get_op("adamw_step").reference([master, grad.astype(np.float64), zeros, zeros],
                                          attrs)
    mixed = get_op("adamw_step").reference([param, grad, zeros, zeros, master], attrs)
    np.testing.assert_allclose(mixed[3], fp32[0], rtol=1e-12)      # master ← fp32 update
    assert mixed[0].dtype == np.float16
    np.testing.assert_array_equal(mixed[0], fp32[0].astype(np.float16))


def test_sgd_step_matches_torch_sgd() -> None:
    rng = np.random.default_rng(2)
    param, grad = rng.standard_normal(9), rng.standard_normal(9)
    weight = torch.nn.Parameter(torch.tensor(param))
    weight.grad = torch.tensor(grad)
    torch.optim.SGD([weight], lr=0.05).step()
    (ours,) = get_op("sgd_step").reference([param, grad], {"lr": 0.05})
    np.testing.assert_allclose(ours, weight.detach().numpy(), rtol=1e-14)


def _graph_with_grad(dtype: DType) -> OpGraph:
    graph = OpGraph(name="g")
    graph.param("w", (4, 6), dtype)
    graph.input("g_in", (4, 6), dtype)
    graph.op("scale", ["g_in"], name="make_grad", outputs=["grad/w"], factor=1.0)
    graph.set_role("grad/w", TensorRole.GRAD, grad_of="w")
    return graph


def test_mixed_precision_adamw_keeps_fp32_master_and_moments() -> None:
    graph = append_optimizer(_graph_with_grad(DType.BF16), "adamw")
    states = {n: t for n, t in graph.tensors.items() if t.role is TensorRole.OPTIMIZER_STATE}
    assert sorted(states) == ["opt/w.m", "opt/w.master", "opt/w.v"]
    assert all(t.dtype is DType.F32 and t.grad_of == "w" for t in states.values())
    # 2 (bf16 param) + 2 (bf16 grad) + 12 (fp32 master, m, v) bytes per parameter: ZeRO's 16.
    per_param = sum(graph.tensors[n].dtype.itemsize for n in ("w", "grad/w", *states))
    assert per_param == 16
    step = graph.op_by_name("opt/w")
    assert step.inputs == ("w", "grad/w", "opt/w.m", "opt/w.v", "opt/w.master")
    assert set(graph.outputs) >= {"w.next", "opt/w.master.next"}
    assert graph.tensors["w.next"].dtype is DType.BF16
    graph.validate()


def test_fp32_adamw_has_no_master_and_sgd_has_no_state() -> None:
    adam = append_optimizer(_graph_with_grad(DType.F32), "adamw")
    assert "opt/w.master" not in adam.tensors and "opt/w.m" in adam.tensors
    sgd = append_optimizer(_graph_with_grad(DType.BF16), "sgd")
    assert not [t for t in sgd.tensors.values() if t.role is TensorRole.OPTIMIZER_STATE]
    assert sgd.op_by_name("opt/w").kind == "sgd_step"


def test_append_optimizer_refuses_a_graph_without_gradients_and_unknown_optimizers() -> None:
    graph = OpGraph(name="fwd")
    graph.param("w", (2,), DType.F32)
    with pytest.raises(StructureError, match="no parameter gradients"):
        append_optimizer(graph)
    with pytest.raises(StructureError, match="lion"):
        append_optimizer(_graph_with_grad(DType.F32), "lion")


def test_optimizer_state_is_sharded_with_its_parameter() -> None:
    from autoshard import Mesh, enumerate_strategies

    graph = append_optimizer(_graph_with_grad(DType.BF16), "adamw")
    ins, outs = graph.specs(graph.op_by_name("opt/w"))
    for strategy in enumerate_strategies("adamw_step", ins, outs, {}, Mesh.parse("dp=2,tp=2")):
        layouts = {s.placements for s in (*strategy.inputs, *strategy.outputs)}
        assert len(layouts) == 1, strategy
