"""Identical layers solved once: the planner's periodic solve against the whole-graph solve.

The whole-graph solve (layers not detected) is the pre-existing exact path; the periodic one
must find a plan of the same cost, proven optimal for the *whole* problem.
"""

from __future__ import annotations

import pytest

import autoshard
from autoshard.planning import planner
from autoshard.planning.layers import layer_of, repeated_blocks
from graphs import zoo

CASES = [
    ("gpt2", {"layers": 6, "hidden": 256, "heads": 4, "ffn": 1024, "batch": 8, "seq": 256},
     "dp=2,tp=2"),
    ("llama3-8b", {"layers": 5, "hidden": 512, "heads": 8, "ffn": 1536, "batch": 4, "seq": 512},
     "tp=4"),
]


@pytest.mark.parametrize(("model", "dims", "mesh"), CASES)
def test_periodic_plan_equals_the_whole_graph_optimum(model, dims, mesh, monkeypatch):
    """The plain sum, where the periodic LP is tight on these models (see the next test for
    the overlap model)."""
    graph = zoo.build(model, **dims)
    fast = autoshard.plan(graph, autoshard.Mesh.parse(mesh), training=True, overlap="none")
    assert fast.objective.optimal
    monkeypatch.setattr(planner, "repeated_blocks", lambda names, keys: None)
    whole = autoshard.plan(graph, autoshard.Mesh.parse(mesh), training=True, overlap="none")
    assert whole.objective.optimal
    assert fast.objective.total_s == pytest.approx(whole.objective.total_s, rel=1e-9)
    assert fast.objective.lower_bound_s == pytest.approx(whole.objective.total_s, rel=1e-6)


@pytest.mark.parametrize(("model", "dims", "mesh"), CASES)
def test_periodic_plan_is_within_its_gap_of_the_whole_graph_optimum_with_overlap(
        model, dims, mesh, monkeypatch):
    """With collectives hidden behind ops the periodic LP is not always tight on these small
    stacks (5 layers): the plan may stop short of the proof, but it is never worse than its
    stated gap, and its bound is below the whole graph's proven optimum."""
    graph = zoo.build(model, **dims)
    fast = autoshard.plan(graph, autoshard.Mesh.parse(mesh), training=True)
    monkeypatch.setattr(planner, "repeated_blocks", lambda names, keys: None)
    whole = autoshard.plan(graph, autoshard.Mesh.parse(mesh), training=True)
    assert whole.objective.optimal
    assert fast.objective.lower_bound_s <= whole.objective.total_s * (1 + 1e-9)
    assert fast.objective.total_s >= whole.objective.total_s * (1 - 1e-9)
    assert fast.objective.total_s <= whole.objective.total_s * (1 + fast.objective.gap + 1e-9)


def test_layer_names():
    assert layer_of("bwd/layers.3.attn.q.2") == (3, "bwd/layers.*.attn.q.2")
    assert layer_of("opt/layers.12.mlp.w1.m") == (12, "opt/layers.*.mlp.w1.m")
    assert layer_of("bwd/final_norm.1") is None  # a suffix, not a layer
    assert layer_of("model.layers.4/add_1") == (4, "model.layers.*/add_1")  # torch importer
    assert layer_of("bwd/model.norm/mul_1.1") is None
    assert layer_of("model.layers.0.self_attn.q_proj/linear") == (
        0, "model.layers.*.self_attn.q_proj/linear")


def test_blocks_need_every_layer_to_match():
    names = [f"layers.{i}.a" for i in range(4)] + [f"layers.{i}.b" for i in range(4)]
    keys = ["x"] * 8
    blocks = repeated_blocks(names, keys)
    assert blocks == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert repeated_blocks(names[:-1], keys[:-1]) is None  # layer 3 lacks b
    assert repeated_blocks(names, ["x"] * 7 + ["y"]) is None  # b differs in layer 3
    assert repeated_blocks(names[:3] + names[4:7], keys[:6]) is None  # only 3 layers


def test_a_restricted_plan_says_so_and_states_the_gap(tmp_path):
    """llama3-8b-shaped, 4 layers at seq 2048 on dp=4,tp=2: the chain LP does not close with one
    distinct end block (there are too few layers for two), so the plan comes from a restricted
    search (the LP's interior with the rest re-optimised around it, or identical interior
    layers), with the gap to a bound of the whole problem, and every output says so. (At the
    default seq 4096 the instance closes: the attention strategies of context parallelism, a
    ring over dp and the backward's query-head groups, change its LP. On dp=2,tp=4, the
    instance this test used before the LP got its last-tied-block rows, it now closes too.)"""
    import json

    from click.testing import CliRunner

    from autoshard.cli import main
    from costmodel import dump_topology
    from tests.support.alpha_beta import alpha_beta_preset

    # the scenario (an LP that does not close) was found on alpha-beta prices: keep them
    topology = tmp_path / "textbook-h100.toml"
    topology.write_text(dump_topology(alpha_beta_preset("dgx-h100")))
    result = CliRunner().invoke(main, ["plan", "--model", "llama3-8b", "--layers", "4",
                                       "--seq", "2048", "--mesh", "dp=4,tp=2", "--training",
                                       "--overlap", "none", "--topology", str(topology),
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "warning: search restricted:" in result.output  # which restriction: the road taken
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert 0 < plan["objective"]["gap"] <= 0.005
    assert not plan["objective"]["optimal"]
    assert any(note.startswith("search restricted:") for note in plan["notes"])
