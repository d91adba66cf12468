"""The step model against hand derivations: overlap of gradient reductions, micro-batch
counts, the batch arithmetic of training recipes, and MFU by the PaLM formula.

* Overlap (op model): DDP buckets gradients and all-reduces them while backward goes on (Li et
  al. 2020, "PyTorch Distributed", VLDB, §3.2.3): a reduction costs only what the compute of
  the op that produced its gradient does not cover, so against the same plan priced as a plain
  sum a step saves exactly Σ min(all-reduce, producer's compute) — every all-reduce priced here
  by Thakur et al.'s formulas from the plan's link inputs, every compute read from the op
  records the search was given.
* Micro-batches: DDP's ``no_sync`` accumulates gradients locally and all-reduces them once per
  step (torch.nn.parallel.DistributedDataParallel.no_sync docs); ZeRO-2 reduce-scatters the
  gradient of every micro-batch into its partition (Rajbhandari et al. 2020, §5.2; DeepSpeed's
  ``stage_1_and_2.py`` reduces in each micro-step's backward), so its reductions run m times.
* ZeRO-1 keeps the whole gradient (Rajbhandari et al. 2020, §5.1: ``4Ψ + 12Ψ/N``), so the
  micro-batches accumulate into it and it is reduce-scattered once per step; Megatron-LM's
  distributed optimizer does the same with its whole-size gradient buffer (``--overlap-grad-
  reduce`` launches the reduce-scatter during the last micro-batch's backward).
* MFU: PaLM appendix B (Chowdhery et al. 2022): 6N + 12·L·H·Q·T FLOPs per token, with N the
  matmul parameters counted from the model's config by hand.
"""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

import autoshard
from autoshard.cli import main
from autoshard.errors import UsageError
from autoshard.planning.batch import BatchPlan, batch_plan
from graphs import zoo
from tests.support.alpha_beta import alpha_beta_preset
from tests.support.closed_forms import all_reduce_s, axis_link, gather_or_scatter_s

TEXTBOOK = alpha_beta_preset("dgx-h100")
GPT2 = {"layers": 2, "batch": 8, "seq": 64, "hidden": 256, "heads": 4, "ffn": 1024,
        "vocab": 512}
MESH = autoshard.Mesh.parse("dp=8")


@pytest.fixture(scope="module")
def graph() -> autoshard.OpGraph:
    return zoo.build("gpt2", **GPT2)


def _plan(graph: autoshard.OpGraph, strategy: str, m: int, overlap: str) -> autoshard.Plan:
    return autoshard.plan(graph, MESH, training=True, topology=TEXTBOOK, strategy=strategy,
                          micro_batches=m, overlap=overlap)


def _syncs(plan: autoshard.Plan) -> list:
    """The gradient reductions: reshards of a gradient into its optimizer step."""
    return [r for r in plan.reshards
            if plan.tensors[r.tensor].role == "grad" and r.consumer.startswith("opt/")
            and r.collectives]


@pytest.mark.parametrize("m", [1, 4])
def test_ddp_all_reduces_hide_behind_the_ops_that_produce_their_gradients(graph, m) -> None:
    overlapped, plain = _plan(graph, "ddp", m, "op"), _plan(graph, "ddp", m, "none")
    assert {k: o.strategy for k, o in overlapped.ops.items()} == \
        {k: o.strategy for k, o in plain.ops.items()}  # a whole plan pinned: the same plan
    n, alpha, bw = axis_link(overlapped, "dp")
    syncs = _syncs(overlapped)
    params = [t for t, r in overlapped.tensors.items() if r.role == "param"]
    assert len(syncs) == len(params)  # DDP: one all-reduce per parameter's gradient
    hidden = 0.0
    for r in syncs:
        (c,) = r.collectives
        grad_bytes = math.prod(overlapped.tensors[r.tensor].shape) * 2  # bf16, replicated
        assert (c.kind, c.axes, c.bytes) == ("all_reduce", ("dp",), grad_bytes)
        assert r.seconds == pytest.approx(all_reduce_s(n, grad_bytes, alpha, bw), rel=1e-9)
        assert r.count == 1  # accumulated locally, synchronised once per step
        assert r.overlap == f"op {r.producer}"
        hidden += min(r.seconds, overlapped.ops[r.producer].compute_s)
    assert overlapped.objective.hidden_s == pytest.approx(hidden, rel=1e-9)
    assert plain.objective.hidden_s == 0.0
    assert plain.objective.total_s - overlapped.objective.total_s == \
        pytest.approx(hidden, rel=1e-9)


def test_zero2_reduce_scatters_every_micro_batch_ddp_once(graph) -> None:
    m = 4
    ddp, zero2 = _plan(graph, "ddp", m, "op"), _plan(graph, "zero2", m, "op")
    n, alpha, bw = axis_link(zero2, "dp")
    assert {r.count for r in _syncs(ddp)} == {1}
    for r in _syncs(zero2):
        kinds = [c.kind for c in r.collectives]
        if kinds == ["all_reduce"]:  # a gradient too small to split over 8 (a bias of 1 dim
            assert r.count == 1      # not divisible stays whole): synchronised as in DDP
            continue
        assert kinds == ["reduce_scatter"], r
        assert r.count == m
        total_bytes = math.prod(zero2.tensors[r.tensor].shape) * 2
        assert r.seconds == pytest.approx(gather_or_scatter_s(n, total_bytes, alpha, bw),
                                          rel=1e-9)
    # forward and backward run per micro-batch, the optimizer once per step
    for name, op in zero2.ops.items():
        if name.startswith(("fwd/", "bwd/")):
            assert op.count == m, name
        elif name.startswith("opt/"):
            assert op.count == 1, name


def test_zero1_reduce_scatters_once_per_step_what_zero2_does_every_micro_batch() -> None:
    m = 4  # wide weights and few tokens: reduce-scatters longer than their producers' compute
    wide = zoo.build("gpt2", **{**GPT2, "seq": 8, "hidden": 1024, "ffn": 4096})
    zero1, zero2 = _plan(wide, "zero1", m, "op"), _plan(wide, "zero2", m, "op")
    assert {k: o.strategy for k, o in zero1.ops.items()} == \
        {k: o.strategy for k, o in zero2.ops.items()}  # the same placements, pinned
    once = {r.tensor: r for r in _syncs(zero1)}
    every = {r.tensor: r for r in _syncs(zero2)}
    assert once.keys() == every.keys() and once
    saved = 0.0
    for name, r in once.items():
        assert r.count == 1, r  # the whole gradient accumulates: one reduction per step
        assert r.collectives == every[name].collectives and r.seconds == every[name].seconds
        if every[name].count == m:  # ZeRO-2's reduce-scatters, each hidden as in one run
            hidden = min(r.seconds, zero1.ops[r.producer].compute_s)
            saved += (m - 1) * (r.seconds - hidden)
    assert saved > 0
    assert zero2.objective.total_s - zero1.objective.total_s == pytest.approx(saved, rel=1e-9)
    # what ZeRO-1 pays for it: whole gradients, against ZeRO-2's shards
    assert zero1.memory_breakdown["grads"] > zero2.memory_breakdown["grads"]


def test_zero1_and_zero2_cost_the_same_time_without_accumulation(graph) -> None:
    zero1, zero2 = _plan(graph, "zero1", 1, "op"), _plan(graph, "zero2", 1, "op")
    assert zero1.objective.total_s == zero2.objective.total_s


def test_mfu_is_the_palm_formula_over_the_step(graph) -> None:
    m = 2
    plan = _plan(graph, "ddp", m, "op")
    layers, h, ffn, vocab = GPT2["layers"], GPT2["hidden"], GPT2["ffn"], GPT2["vocab"]
    seq, batch = GPT2["seq"], GPT2["batch"]
    # matmul weights: q, k, v, o (h×h each), up and down (h×ffn each), the tied LM head
    # (vocab×h); the learned position table is a lookup, not a matmul
    n = layers * (4 * h * h + 2 * h * ffn) + vocab * h
    per_token = 6 * n + 12 * layers * h * seq
    tokens = batch * seq * m
    peak = 989e12  # H100 SXM dense BF16 (NVIDIA H100 Tensor Core GPU datasheet)
    t = plan.throughput
    assert t["tokens_per_step"] == tokens
    assert t["model_flops_per_step"] == pytest.approx(per_token * tokens, rel=1e-12)
    assert t["mfu"] == pytest.approx(per_token * tokens
                                     / (plan.objective.total_s * MESH.size * peak), rel=1e-9)
    assert t["tokens_per_s_per_device"] == pytest.approx(
        tokens / plan.objective.total_s / MESH.size, rel=1e-12)


# ----------------------------------------------------------------- batch arithmetic
@pytest.mark.parametrize(("mesh", "kwargs", "expected"), [
    # Megatron-LM: global = micro × data-parallel replicas × micro-batches
    ("dp=4,fsdp=2,tp=8", {"global_batch": 256, "micro_batch": 2}, BatchPlan(
        graph_batch=16, micro_batches=16)),
    ("tp=8", {"global_batch": 32, "micro_batch": 4}, BatchPlan(graph_batch=4,
                                                               micro_batches=8)),
    ("dp=8", {"global_batch": 256, "grad_accum": 8}, BatchPlan(graph_batch=32,
                                                               micro_batches=8)),
    ("dp=8", {"grad_accum": 3}, BatchPlan(graph_batch=None, micro_batches=3)),
    ("dp=8", {"batch": 16}, BatchPlan(graph_batch=16, micro_batches=1)),
    ("dp=8", {"global_batch": 64}, BatchPlan(graph_batch=64, micro_batches=1)),
])
def test_batch_plan_follows_the_recipes_arithmetic(mesh, kwargs, expected) -> None:
    assert batch_plan(autoshard.Mesh.parse(mesh), **kwargs) == expected


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"global_batch": 100, "micro_batch": 3}, "not a multiple of --micro-batch 3"),
    ({"global_batch": 100, "grad_accum": 3}, "not a multiple of --grad-accum"),
    ({"micro_batch": 2}, "--micro-batch needs --global-batch"),
    ({"batch": 8, "global_batch": 64}, "give one"),
    ({"global_batch": 64, "micro_batch": 1, "grad_accum": 2}, "not both"),
    ({"global_batch": 0}, "--global-batch must be a positive"),
])
def test_batch_plan_refuses_what_does_not_divide_or_contradicts(kwargs, needle) -> None:
    with pytest.raises(UsageError, match=needle.replace("-", r"\-")):
        batch_plan(autoshard.Mesh.parse("dp=4"), **kwargs)


def test_cli_global_batch_sets_micro_batches_and_tokens(tmp_path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "plan", "--model", "gpt2", "--layers", "1", "--hidden", "128", "--heads", "2",
        "--ffn", "512", "--seq", "32", "--mesh", "dp=4", "--training", "--global-batch",
        "64", "--micro-batch", "2", "--strategy", "ddp", "--out", str(out)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "plan.json").read_text())
    assert plan["objective"]["micro_batches"] == 64 // (2 * 4)
    assert plan["throughput"]["tokens_per_step"] == 64 * 32
    bad = CliRunner().invoke(main, [
        "plan", "--model", "gpt2", "--layers", "1", "--mesh", "dp=4", "--training",
        "--global-batch", "66", "--micro-batch", "2"])
    assert bad.exit_code == 2
    assert "--global-batch 66 is not a multiple" in bad.output
