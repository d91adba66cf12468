"""Training plans: data parallel, ZeRO-3/FSDP, Megatron TP and sequence parallel emerge from one
search over forward + backward + AdamW graphs, checked against closed forms (issue 6).

Expected numbers come from the papers' formulas and the alpha-beta collective formulas written
out here, with the link parameters read from the plan's inputs (``plan.links``), never from the
costs the planner computed.

Conventions for Korthikanti et al. 2022 (Table 2, bytes per layer with 16-bit activations):
our graphs have no dropout, so the two 1-byte dropout masks (attention output, MLP output) of
their 34·sbh are absent (34 → 32, 10 + 24/t → 8 + 24/t, 34/t → 32/t); attention is
flash-style, so the 5·a·s²·b term is absent and its backward reads q, k, v and the output
projection's input, exactly the 8·sbh the paper counts for Q, K, V and the projection input.
"""

from __future__ import annotations

import math
import re

import pytest

import autoshard
from autoshard.errors import MemoryTooSmallError
from graphs import zoo
from tests.support.alpha_beta import alpha_beta_preset
from tests.support.closed_forms import all_reduce_s as _all_reduce_s
from tests.support.closed_forms import axis_link as _link
from tests.support.closed_forms import gather_or_scatter_s as _gather_or_scatter_s

# The expectations are alpha-beta closed forms (Thakur et al. 2005), so the plans price on
# the dgx-h100 links without their measured-curve terms.
TEXTBOOK = alpha_beta_preset("dgx-h100")

MIB = 2**20


# ----------------------------------------------------------------- closed forms
def _local_bytes(shape: tuple[int, ...], itemsize: int, placements: tuple[str, ...],
                 sizes: tuple[int, ...]) -> float:
    elements = math.prod(shape)
    for placement, size in zip(placements, sizes, strict=True):
        if placement.startswith("S("):
            elements /= size
    return elements * itemsize


# ---------------------------------------------------------------- data parallel
def test_small_model_big_batch_is_pure_data_parallel_with_one_gradient_sync() -> None:
    graph = zoo.build("gpt2", layers=2, batch=64, seq=512, hidden=256, heads=4, vocab=1024)
    # every collective priced in full: hidden gradient syncs would tie, and the closed forms
    # below price each sync whole
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=8"), training=True,
                          topology=TEXTBOOK, overlap="none")
    n, alpha, bw = _link(plan, "dp")
    assert plan.tensors["tokens"].placements == ("S(0)",)
    params = {name: rec for name, rec in plan.tensors.items() if rec.role == "param"}
    synced: dict[str, float] = {}
    for reshard in plan.reshards:
        if reshard.consumer == "<output>":          # the scalar loss, summed for reporting
            assert reshard.tensor == "loss.out"
            continue
        param = reshard.tensor.removeprefix("grad/").removesuffix(".next")
        assert param in params, f"activation {reshard.tensor} moved: not pure data parallel"
        kinds = [c.kind for c in reshard.collectives]
        assert kinds in (["all_reduce"], ["reduce_scatter"], ["all_gather"], ["all_slice"])
        synced[param] = synced.get(param, 0.0) + reshard.seconds
    assert set(synced) == set(params)                # every gradient is synchronised once
    for name, rec in params.items():
        m = math.prod(rec.shape) * 2                 # bf16 gradient
        all_reduce = _all_reduce_s(n, m, alpha, bw)
        scatter_gather = 2 * _gather_or_scatter_s(n, m, alpha, bw)
        assert synced[name] == pytest.approx(all_reduce, rel=1e-9) or \
            synced[name] == pytest.approx(scatter_gather, rel=1e-9, abs=1e-6), name


# ------------------------------------------------------------------------ ZeRO-3
def test_states_that_do_not_fit_replicated_give_zero3_at_16_bytes_per_param_over_n() -> None:
    # GPT-2-style blocks, 25.2 M parameters: replicated, parameters + gradients + AdamW state
    # are 16Ψ = 385 MiB. The budget is the smallest that fits any plan (+1 MiB), and it is
    # below what ZeRO-2 (parameters replicated: 2Ψ + 14Ψ/8 of model state) would need with
    # the same activations, so the weights themselves must be stored sharded.
    graph = zoo.build("transformer", layers=2, batch=16, seq=512)
    mesh = autoshard.Mesh.parse("dp=8")
    with pytest.raises(MemoryTooSmallError) as smallest:
        autoshard.plan(graph, mesh, training=True, memory_limit=MIB)
    limit = smallest.value.needed_bytes + MIB
    plan = autoshard.plan(graph, mesh, training=True, memory_limit=limit)
    transient = plan.memory_breakdown["activations"] + plan.memory_breakdown["inputs"]
    psi_bytes = 2 * sum(math.prod(r.shape) for r in plan.tensors.values() if r.role == "param")
    assert limit < psi_bytes + 7 * psi_bytes / 8 + transient
    n = 8
    weights = [name for name, rec in plan.tensors.items()
               if rec.role == "param" and len(rec.shape) == 2]
    assert len(weights) == 12
    gathers: dict[str, list[str]] = {w: [] for w in weights}
    for reshard in plan.reshards:
        if reshard.tensor in gathers and not reshard.consumer.startswith("opt/"):
            assert [c.kind for c in reshard.collectives] == ["all_gather"]
            gathers[reshard.tensor].append(reshard.consumer)
    for weight in weights:
        assert plan.tensors[weight].placements[0].startswith("S("), weight
        phases = {"bwd" if c.startswith("bwd/") else "fwd" for c in gathers[weight]}
        assert phases == {"fwd", "bwd"}, (weight, gathers[weight])   # gathered in both passes
        (grad_sync,) = [r for r in plan.reshards if r.tensor == f"grad/{weight}"]
        assert [c.kind for c in grad_sync.collectives] == ["reduce_scatter"]
    # Model state per device from the plan's layouts: parameters as stored, gradients as the
    # optimizer reads them, fp32 master/m/v as stored.
    psi = sum(math.prod(rec.shape) for rec in plan.tensors.values() if rec.role == "param")
    state = 0.0
    for name, rec in plan.tensors.items():
        if rec.role in ("param", "optimizer_state"):
            itemsize = 2 if rec.dtype == "bf16" else 4
            state += _local_bytes(rec.shape, itemsize, rec.placements, (n,))
        if rec.role == "param":
            step = plan.ops[f"opt/{name}"]
            state += math.prod(step.local_inputs[1]) * 2
    assert state == pytest.approx((2 + 2 + 12) * psi / n, rel=0.05)
    assert plan.peak_bytes_per_device <= limit


# ------------------------------------------------------------- Megatron TP / SP
B, S, H, HEADS, T, LAYERS = 4, 1024, 4096, 32, 8, 3
_LAYER = re.compile(r"layers\.(\d+)\.")


def _megatron_graph():
    return zoo.build("transformer", layers=LAYERS, batch=B, seq=S, hidden=H, heads=HEADS)


def _saved_per_layer(plan: autoshard.Plan) -> float:
    return plan.memory_breakdown["activations_saved"] / LAYERS / (S * B * H)


def test_saved_activations_without_parallelism_are_korthikanti_34_sbh() -> None:
    plan = autoshard.plan(_megatron_graph(), autoshard.Mesh.parse("dp=1"), training=True)
    assert _saved_per_layer(plan) == pytest.approx(34 - 2)


def test_large_hidden_on_one_node_is_megatron_tensor_parallel() -> None:
    plan = autoshard.plan(_megatron_graph(), autoshard.Mesh.parse(f"tp={T}"), training=True,
                          topology=TEXTBOOK, overlap="none")  # closed forms add every collective
    assert _saved_per_layer(plan) == pytest.approx(10 - 2 + 24 / T, rel=0.05)
    n, alpha, bw = _link(plan, "tp")
    block = S * B * H * 2                           # one b·s·h bf16 activation
    # Activation traffic of an interior layer: 2 all-reduces forward and 2 backward (or the
    # equivalent reduce-scatter + all-gather pairs). The first layer's input needs no gradient
    # and the last layer's output may stay sharded, so only the middle layer is exact.
    moved = _activation_traffic(plan, layer=1)
    assert {c.bytes for c in moved} == {block}
    units = sum(1.0 if c.kind == "all_reduce" else 0.5 for c in moved)
    assert units == 4
    seconds = sum(c.seconds for c in moved)
    assert seconds == pytest.approx(units * _all_reduce_s(n, block, alpha, bw), rel=1e-9)


def test_tight_memory_turns_tensor_parallel_into_sequence_parallel() -> None:
    graph, mesh = _megatron_graph(), autoshard.Mesh.parse(f"tp={T}")
    with pytest.raises(MemoryTooSmallError) as smallest:
        autoshard.plan(graph, mesh, training=True, memory_limit=64 * MIB)
    limit = smallest.value.needed_bytes + MIB
    plan = autoshard.plan(graph, mesh, training=True, memory_limit=limit)
    assert _saved_per_layer(plan) == pytest.approx((34 - 2) / T, rel=0.05)
    moved = _activation_traffic(plan)
    kinds = {c.kind for c in moved}
    assert kinds <= {"all_gather", "reduce_scatter", "all_to_all"}, kinds
    assert "all_reduce" not in kinds


def _activation_traffic(plan: autoshard.Plan, layer: int | None = None) -> list:
    """Collectives moving activations or their gradients (not parameters, gradients of
    parameters or optimizer state), local slices excluded; optionally of one layer."""
    moved = []
    for r in plan.reshards:
        match = _LAYER.search(r.tensor)
        if plan.tensors[r.tensor].role != "activation":
            continue
        if layer is not None and (match is None or int(match.group(1)) != layer):
            continue
        moved.extend(c for c in r.collectives if c.kind != "all_slice")
    return moved


# ------------------------------------------------------------------- 2-D meshes
def test_slow_dp_and_fast_tp_links_put_data_parallel_on_dp_and_tensor_parallel_on_tp() -> None:
    # Interior layers only: the last block's output and the incoming gradient of a
    # loss-less stack may take any layout for free, which makes its MLP a boundary case.
    graph = zoo.build("transformer", layers=3, batch=2, seq=8192, hidden=4096, heads=32)
    # every collective priced in full: with overlap, sharding the parameters over dp too
    # (FSDP, gathers hidden behind compute) is cheaper, and looks the same in a placement
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=2,tp=4"), training=True,
                          links={"dp": "ib"}, topology=TEXTBOOK, overlap="none")
    assert plan.tensors["x"].placements == ("S(0)", "R")       # batch over dp only
    interior = ("layers.0.", "layers.1.")
    for name, rec in plan.tensors.items():
        if rec.role == "param" and len(rec.shape) == 2 and name.startswith(interior):
            assert rec.placements[0] == "R", (name, rec.placements)   # never TP on dp
    for name in ("attn.wq", "attn.wk", "attn.wv", "mlp.w1", "mlp.w2"):
        for layer in interior:
            assert plan.tensors[layer + name].placements[1].startswith("S("), layer + name
    for reshard in plan.reshards:
        if reshard.tensor.startswith(interior) and reshard.consumer != "<next step>" \
                and not reshard.consumer.startswith("opt/"):
            for c in reshard.collectives:
                assert "dp" not in c.axes or c.kind == "all_slice", reshard


# ------------------------------------------------------------------ recompute
def test_recomputation_trades_flops_for_saved_activations() -> None:
    graph, mesh = _megatron_graph(), autoshard.Mesh.parse("dp=1")
    plans = {mode: autoshard.plan(graph, mesh, training=True, recompute=mode)
             for mode in ("none", "selective", "full")}
    saved = {mode: _saved_per_layer(plan) for mode, plan in plans.items()}
    assert saved["none"] == pytest.approx(32)
    assert saved["full"] == pytest.approx(2)           # only each layer's input (Korthikanti)
    assert saved["full"] < saved["selective"] < saved["none"]
    flops = {mode: sum(o.flops for o in plan.ops.values()) for mode, plan in plans.items()}
    forward = sum(o.flops for name, o in plans["none"].ops.items()
                  if name.startswith("layers.") and "/" not in name)
    # Full recomputation reruns each layer's forward up to what its backward reads (not the
    # output projections, whose results the backward never needs): each rerun op costs the
    # FLOPs of its forward twin, and all of it is priced.
    rerun = [name.removeprefix("recompute/") for name in plans["full"].ops
             if name.startswith("recompute/")]
    extra = sum(plans["none"].ops[name].flops for name in rerun)
    assert flops["full"] - flops["none"] == pytest.approx(extra, rel=1e-9)
    assert 0.5 * forward < extra < forward
    assert flops["none"] < flops["selective"] < flops["full"]
    compute = {mode: plan.objective.compute_s for mode, plan in plans.items()}
    assert compute["none"] < compute["selective"] < compute["full"]
    assert plans["full"].peak_bytes_per_device < plans["none"].peak_bytes_per_device


def test_training_cli_reports_memory_by_category(tmp_path) -> None:
    from click.testing import CliRunner

    from autoshard.cli import main

    result = CliRunner().invoke(main, ["plan", "--model", "gpt2", "--layers", "1", "--training",
                                       "--mesh", "dp=2,tp=2", "--optimizer", "sgd",
                                       "--reserve", "1GiB", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    memory = next(line for line in result.output.splitlines() if line.startswith("memory"))
    for category in ("params", "activations", "reserve 1 GiB"):
        assert category in memory
    assert "optimizer" not in memory                   # SGD keeps no state
    assert "saved for backward" in result.output
    plan = autoshard.Plan.load(tmp_path / "plan.json")
    assert any(name.startswith("opt/") for name in plan.ops)
    assert plan.memory_breakdown["reserve"] == 2**30
