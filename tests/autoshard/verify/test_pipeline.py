"""A pipelined plan emulated micro-batch by micro-batch against the unsharded whole-batch step.

The oracle is independent of the pipeline code: the training step of the same model built with
the whole batch (micro-batch × m) and run unsharded (loss, every gradient, every updated
parameter and optimizer state), against which the emulation's loss (mean over micro-batches),
accumulated gradients and optimizer step are compared.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from autoshard import Mesh
from autoshard.cli import main as cli
from autoshard.planning.pipeline.pipelined import PipelineOptions, plan_pipeline
from autoshard.verify.pipeline import emulate_pipeline
from autoshard.verify.verification import verify
from graphs import zoo

TINY = {"hidden": 16, "heads": 2, "ffn": 32, "vocab": 64, "seq": 8, "batch": 4}


def _plan(model: str, layers: int, mesh: str, schedule: str, strategy: str | None,
          micro_batches: int = 4, **dims: int):
    graph = zoo.build(model, layers=layers, **{**TINY, **dims})
    config = zoo.config_of(graph)
    plan = plan_pipeline(graph, Mesh.parse(mesh),
                         stage_graph=lambda k: zoo.build_config(
                             dataclasses.replace(config, layers=k)),
                         pipeline=PipelineOptions(schedule=schedule),
                         micro_batches=micro_batches, memory_limit=1e12, strategy=strategy)
    return plan, graph, config


@pytest.mark.parametrize(("model", "layers", "mesh", "schedule", "strategy"), [
    ("gpt2", 4, "pp=2,dp=2,tp=2", "1f1b", "megatron"),
    ("gpt2", 4, "pp=4,tp=2", "zb-h1", "megatron"),
    ("gpt2", 4, "pp=4,dp=2", "gpipe", "zero1"),
    ("gpt2", 8, "pp=2,tp=2", "interleaved", "megatron"),
    ("llama3-8b", 4, "pp=2,dp=2,tp=2", "1f1b", "megatron"),
])
def test_pipelined_step_matches_the_whole_batch_step(model, layers, mesh, schedule, strategy):
    dims = {"heads": 4, "kv_heads": 2, "hidden": 32} if model.startswith("llama") else {}
    plan, _, config = _plan(model, layers, mesh, schedule, strategy, **dims)
    run = emulate_pipeline(plan, config)
    assert run.result.passed, run.summary()
    p, m = plan.pipeline["stages"], plan.pipeline["micro_batches"]
    names = {o.tensor for o in run.result.outputs}
    assert "loss.out" in names
    assert any(n.startswith("grad/layers.") for n in names)  # accumulated gradients
    assert any(n.endswith(".next") for n in names)  # the optimizer step
    # every micro-batch crosses every boundary both ways: activations forward, grads back
    for mb in range(m):
        pairs = {(s.src, s.dst) for s in run.sends if s.micro_batch == mb}
        chunks = len(plan.pipeline["layers_per_chunk"])
        for c in range(chunks - 1):
            a, b = c % p, (c + 1) % p
            assert (a, b) in pairs and (b, a) in pairs


def test_dropping_the_gradient_sync_is_caught():
    """Without the plan's data-parallel reduction into the optimizer the updated parameters
    are wrong: the emulation must name the optimizer step."""
    plan, _, config = _plan("gpt2", 4, "pp=2,dp=2", "1f1b", "ddp")
    kept = tuple(r for r in plan.reshards if not r.consumer.startswith("opt/"))
    assert len(kept) < len(plan.reshards)
    run = emulate_pipeline(dataclasses.replace(plan, reshards=kept), config)
    assert not run.result.passed
    assert "optimizer step" in run.result.divergence.name


def test_a_wrong_strategy_is_caught_at_its_stage():
    plan, _, config = _plan("gpt2", 4, "pp=2,tp=2", "1f1b", "megatron")
    ops = dict(plan.ops)
    victim = "layers.1.mlp.down"
    assert ops[victim].strategy != "R"
    ops[victim] = dataclasses.replace(ops[victim], strategy="R")
    run = emulate_pipeline(dataclasses.replace(plan, ops=ops), config)
    assert not run.result.passed
    assert run.result.divergence.name.startswith("stage ")


def test_verify_scales_a_pipelined_plan_down():
    plan, graph, _ = _plan("gpt2", 4, "pp=2,dp=2,tp=2", "1f1b", "megatron", hidden=64,
                           heads=4, ffn=128, vocab=128, seq=16)
    result = verify(plan, graph)
    assert result.passed, result.message
    assert result.scaled_dims["hidden"] == (64, 8)
    assert "pipelined: 2 stages x 4 micro-batches" in result.message


def test_cli_plans_verifies_and_reverifies_a_pipelined_plan(tmp_path):
    shape = ["--model", "gpt2", "--layers", "4", "--hidden", "64", "--heads", "4", "--ffn",
             "128", "--seq", "16"]
    runner = CliRunner()
    out = runner.invoke(cli, ["plan", *shape, "--mesh", "pp=2,dp=2,tp=2", "--training",
                              "--global-batch", "16", "--micro-batch", "2", "--schedule",
                              "1f1b", "--strategy", "megatron", "--verify", "-q",
                              "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    record = json.loads((tmp_path / "plan.json").read_text())["verification"]
    assert record["passed"] and "pipelined" in record["message"]
    again = runner.invoke(cli, ["verify", str(tmp_path / "plan.json"), *shape, "--batch", "4"])
    assert again.exit_code == 0, again.output
    assert "PASSED" in again.output
    wrong = runner.invoke(cli, ["verify", str(tmp_path / "plan.json"), *shape, "--batch", "8"])
    assert wrong.exit_code == 2 and "fingerprint" in wrong.output
