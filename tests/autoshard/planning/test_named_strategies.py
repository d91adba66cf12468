"""Named hand plans (``--strategy``): axis roles, clear errors, pins a user can print and
edit, and the search never worse than a hand plan it could express.

``auto.total_s <= hand.total_s`` is an independent check of the optimality claim: every hand
plan is a restriction of the problem the search solves (pins only remove options), so a
proven-optimal search that came out slower than a hand plan would be a bug in the search or
in its certificate, not a matter of taste.
"""

from __future__ import annotations

import tomllib
import warnings

import pytest

import autoshard
from autoshard.errors import PinError
from autoshard.planning.named import (
    STRATEGIES,
    axis_role,
    render_pins,
    role_axes,
    strategy_pins,
)
from autoshard.planning.pins import parse_pins
from graphs import zoo
from tests.support import DATA_DIR

DATA = ("ddp", "zero1", "zero2", "fsdp")
TENSOR = ("megatron", "megatron-sp", "megatron-sp-distopt")
SMALL = {"layers": 2, "batch": 8, "seq": 16, "hidden": 64}
TINY = {"layers": 1, "batch": 8, "seq": 8, "hidden": 32}   # 3-axis meshes: many options


def model(name: str, shape: dict) -> autoshard.OpGraph:
    extra = {"mlp": {}, "transformer": {"heads": 4}, "gpt2": {"heads": 4, "vocab": 128},
             "llama3-8b": {"heads": 4, "kv_heads": 2, "vocab": 128, "ffn": 128}}[name]
    return zoo.build(name, **shape, **extra)


def test_axis_roles_come_from_axis_names() -> None:
    assert [axis_role(n) for n in ("dp", "data", "dp_replicate", "dp0", "dp_inter", "replica",
                                   "fsdp", "dp_shard", "zero", "tp", "tensor", "model",
                                   "tp2", "pp", "cp")] == \
        ["dp", "dp", "dp", "dp", "dp", "dp", "fsdp", "fsdp", "fsdp", "tp", "tp", "tp", "tp",
         None, None]
    roles = role_axes(autoshard.Mesh.parse("replica=2,dp=2,fsdp=2,tp=2"))
    assert roles["data"] == ("replica", "dp", "fsdp")
    assert roles["zero"] == ("fsdp",) and roles["replicas"] == ("replica", "dp")
    assert role_axes(autoshard.Mesh.parse("dp=2,data=2"))["zero"] == ("dp", "data")


@pytest.mark.parametrize(("strategy", "mesh", "needle"), [
    ("megatron", "dp=8", "needs a tensor-parallel axis"),
    ("megatron-sp", "fsdp=4", "needs a tensor-parallel axis"),
    ("fsdp", "tp=8", "needs a data-parallel axis"),
    ("ddp", "dp=2,tp=4", "no use for the tensor-parallel axis tp"),
    ("zero2", "dp=2,pp=4", 'mesh axis "pp" has no role'),
    ("megatron", "tp=2,model=2", "one tensor-parallel axis"),
    ("zero3", "dp=8", 'unknown strategy "zero3"'),
])
def test_a_strategy_the_mesh_cannot_run_is_one_clear_error(strategy, mesh, needle) -> None:
    with pytest.raises(PinError) as error:
        strategy_pins(strategy, autoshard.Mesh.parse(mesh))
    assert needle in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_printed_pins_are_a_pin_file_that_plans_the_same(strategy) -> None:
    mesh = autoshard.Mesh.parse("dp=2,tp=2" if strategy in TENSOR else "dp=2,fsdp=2")
    graph = model("gpt2", SMALL)
    named = autoshard.plan(graph, mesh, training=True, strategy=strategy)
    text = render_pins(strategy_pins(strategy, mesh), mesh, f"strategy {strategy}")
    printed = parse_pins(tomllib.loads(text), "printed.toml")
    again = autoshard.plan(graph, mesh, training=True, pins=printed)
    assert again.objective.total_s == pytest.approx(named.objective.total_s, rel=1e-12)
    assert {n: r.placements for n, r in again.tensors.items()} == \
        {n: r.placements for n, r in named.tensors.items()}


def test_pins_after_a_strategy_refine_it() -> None:
    graph, mesh = model("transformer", SMALL), autoshard.Mesh.parse("dp=2,tp=2")
    edit = parse_pins({"pin": [{"tensors": "layers.*.mlp.w2", "placements": {"tp": "R"}}]},
                      "edit.toml")
    plan = autoshard.plan(graph, mesh, training=True, strategy="megatron", pins=edit)
    assert plan.tensors["layers.0.mlp.w2"].placements == ("R", "R")
    assert plan.tensors["layers.0.mlp.w1"].placements == ("R", "S(1)")   # still megatron
    assert plan.pins["sources"] == ["strategy megatron", "edit.toml"]


def _check_auto_beats_hands(graph, mesh_text: str, training: bool,
                            strategies: tuple[str, ...]) -> None:
    mesh = autoshard.Mesh.parse(mesh_text)
    auto = autoshard.plan(graph, mesh, training=training)
    assert auto.objective.optimal
    for strategy in strategies:
        hand = autoshard.plan(graph, mesh, training=training, strategy=strategy)
        assert hand.stats["pinned_tensors"] > 0
        assert auto.objective.total_s <= hand.objective.total_s * (1 + 1e-9), \
            (strategy, auto.objective.total_s, hand.objective.total_s)


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize(("mesh", "strategies"), [
    ("dp=4", DATA), ("dp=2,fsdp=2", DATA), ("tp=4", TENSOR), ("dp=2,tp=2", TENSOR)])
@pytest.mark.parametrize("name", ["mlp", "transformer", "gpt2", "llama3-8b"])
def test_the_search_is_never_slower_than_a_hand_plan(name, mesh, strategies, training) -> None:
    _check_auto_beats_hands(model(name, SMALL), mesh, training, strategies)


@pytest.mark.parametrize("training", [True, False], ids=["training", "inference"])
@pytest.mark.parametrize(("mesh", "strategies"), [
    ("replica=2,dp=2,fsdp=2", DATA), ("dp=2,fsdp=2,tp=2", TENSOR)])
@pytest.mark.parametrize("name", ["mlp", "transformer", "gpt2", "llama3-8b"])
def test_the_search_is_never_slower_than_a_hand_plan_on_3_axes(name, mesh, strategies,
                                                               training) -> None:
    _check_auto_beats_hands(model(name, TINY), mesh, training, strategies)


@pytest.mark.parametrize("config", ["gpt2", "llama-3.1-8b", "llama-3.2-1b", "mistral-7b-v0.1",
                                    "qwen2.5-7b"])
def test_hugging_face_configs_run_the_hand_plans(config) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", zoo.UnmodelledFieldsWarning)
        graph = zoo.from_hf_config(DATA_DIR / "hf-configs" / f"{config}.json", layers=1,
                                   batch=4, seq=64)
    _check_auto_beats_hands(graph, "dp=2,tp=2", True, TENSOR)
    _check_auto_beats_hands(graph, "dp=2,fsdp=2", True, ("zero1", "fsdp"))
