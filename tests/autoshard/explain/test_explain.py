"""``explain``: a layout's alternatives priced by re-solving with each pinned.

Oracles: optimality (the explained plan is proven optimal, so forcing any alternative cannot
make the step faster: every re-solved change is >= 0) and the single-change bound (the plan
with only that op switched is a feasible plan of the forced problem, so the re-solved change
is at most the bound). Both are properties of the mathematics, not of the code; a third check
plans the forced alternative directly with a pin file and must get the same step time.
"""

from __future__ import annotations

import pytest

import autoshard
from autoshard.errors import UsageError
from autoshard.explain import (
    explain_context,
    explain_op,
    explain_tensor,
    fragile_decisions,
)
from autoshard.export.plan_view import PlanMismatchError
from autoshard.planning.pins import parse_pins
from graphs import zoo

MESH = autoshard.Mesh.parse("dp=2,tp=2")
SHAPE = {"layers": 2, "batch": 8, "seq": 128, "hidden": 256, "heads": 4, "vocab": 512}
TOL = 1e-12


@pytest.fixture(scope="module")
def graph():
    return zoo.build("gpt2", **SHAPE)


@pytest.fixture(scope="module")
def auto(graph):
    plan = autoshard.plan(graph, MESH, training=True)
    assert plan.objective.optimal
    return plan


@pytest.fixture(scope="module")
def ctx(graph, auto):
    return explain_context(auto, graph)


def _check_bounds(alternatives, base_s: float) -> int:
    solved = 0
    for alt in alternatives:
        if alt.delta_s is None:
            continue
        solved += 1
        assert alt.delta_s >= -TOL * base_s, alt
        assert alt.delta_s <= alt.bound_s + TOL * base_s, alt
    return solved


def test_a_tensors_alternatives_are_re_solved_and_bounded(ctx, auto, graph) -> None:
    result = explain_tensor(ctx, "layers.1.mlp.w1")
    assert result.placement == " ".join(auto.tensors["layers.1.mlp.w1"].placements)
    assert result.facts["role"] == "param" and result.facts["memory_bytes"] > 0
    assert _check_bounds(result.alternatives, auto.objective.total_s) == \
        len(result.alternatives) > 3
    deltas = [a.delta_s for a in result.alternatives]
    assert deltas == sorted(deltas)
    # the first alternative, planned directly with a pin file, costs what explain says
    first = result.alternatives[0]
    rule = {"tensors": "layers.1.mlp.w1", "placements": first.placement.split()}
    direct = autoshard.plan(graph, MESH, training=True,
                            pins=parse_pins({"pin": [rule]}, "direct.toml"))
    assert direct.objective.total_s - auto.objective.total_s == \
        pytest.approx(first.delta_s, rel=1e-9, abs=1e-15)


def test_an_ops_alternatives_are_bounded_and_limited(ctx, auto) -> None:
    result = explain_op(ctx, "layers.1.attn.q", limit=3)
    assert result.placement == auto.ops["layers.1.attn.q"].strategy
    assert _check_bounds(result.alternatives, auto.objective.total_s) == 3
    assert "3 of" in result.note and "single-change bound" in result.note
    unsolved = [a.bound_s for a in result.alternatives if a.delta_s is None]
    assert unsolved == sorted(unsolved)                     # the rest, ranked by bound
    assert min(unsolved) >= max(a.bound_s for a in result.alternatives[:3])


def test_fragile_decisions_are_the_closest_re_solved_alternatives(ctx, auto) -> None:
    result = fragile_decisions(ctx, count=5, shortlist=8)
    assert len(result.decisions) == 5
    assert "re-solved 8 of" in result.note
    deltas = [d.alternative.delta_s for d in result.decisions]
    assert deltas == sorted(deltas)
    _check_bounds([d.alternative for d in result.decisions], auto.objective.total_s)
    patterns = [d.pattern for d in result.decisions]
    assert len(set(patterns)) == len(patterns)              # one row per layer pattern


def test_count_zero_shows_every_re_solved_decision(ctx) -> None:
    """``--count 0`` is "all of them", as ``--limit 0`` is; it used to re-solve the shortlist
    and then show nothing, saying no tensor had another layout."""
    result = fragile_decisions(ctx, count=0, shortlist=4)
    assert len(result.decisions) == 4 and "re-solved 4 of" in result.note


def test_a_pinned_plan_is_explained_under_its_own_pins(graph) -> None:
    megatron = autoshard.plan(graph, MESH, training=True, strategy="megatron")
    ctx = explain_context(megatron, graph)
    result = explain_tensor(ctx, "layers.0.mlp.w2", limit=2)
    assert result.facts["pinned_by"]
    solved = [a for a in result.alternatives if a.delta_s is not None]
    edit = parse_pins({"pin": [{"tensors": "layers.0.mlp.w2",
                                "placements": solved[0].placement.split()}]}, "edit.toml")
    direct = autoshard.plan(graph, MESH, training=True, strategy="megatron", pins=edit)
    assert direct.objective.total_s - megatron.objective.total_s == \
        pytest.approx(solved[0].delta_s, rel=1e-9, abs=1e-15)


def test_unknown_names_and_other_graphs_are_clear_errors(ctx, auto) -> None:
    with pytest.raises(UsageError, match=r"did you mean layers\.1\.mlp\.w1"):
        explain_tensor(ctx, "layers.1.mlp.w11")
    with pytest.raises(UsageError, match='no op "nope"'):
        explain_op(ctx, "nope")
    with pytest.raises(PlanMismatchError):
        explain_context(auto, zoo.build("gpt2", **{**SHAPE, "hidden": 128}))
