"""A search the time limit cut short never answers slower than a named hand plan.

Checked against the hand plans planned on their own (``--strategy``, each proven optimal among
the plans its pins allow): every hand plan is a plan of the search's problem, so the answer must
cost at most the cheapest of them, whatever the time limit let the search find.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import autoshard
import solver
from autoshard.errors import PinError
from autoshard.planning import hand_floor, planner
from autoshard.planning.named import STRATEGIES
from graphs import zoo

MESH = autoshard.Mesh.parse("dp=2,fsdp=2,tp=2")


@pytest.fixture(scope="module")
def graph() -> autoshard.OpGraph:
    return zoo.build("llama3-8b", layers=2, batch=8, seq=256, hidden=512, heads=8, kv_heads=4,
                     vocab=1024, ffn=1024)


@pytest.fixture(scope="module")
def hand_totals(graph) -> dict[str, float]:
    totals = {}
    for name in STRATEGIES:
        try:
            totals[name] = autoshard.plan(graph, MESH, training=True,
                                          strategy=name).objective.total_s
        except PinError:
            continue  # a strategy this mesh cannot run (ddp has no use for tp)
    # one micro-batch: a ZeRO-1 hand plan (deferred sync) costs on the search's problem what it
    # costs on its own
    assert {"megatron", "megatron-sp"} <= totals.keys()
    return totals


@pytest.mark.parametrize("time_limit", [0.05, 1.0])
def test_a_cut_short_search_is_never_slower_than_a_hand_plan(graph, hand_totals,
                                                            time_limit) -> None:
    plan = autoshard.plan(graph, MESH, training=True, time_limit=time_limit)
    assert plan.objective.total_s <= min(hand_totals.values()) * (1 + 1e-9)


def test_a_poor_plan_gives_way_to_the_cheapest_hand_plan(graph, hand_totals,
                                                         monkeypatch) -> None:
    solve, poor_costs = planner._Planner._solve, []

    def poor(self, limit):  # the search "ran out of time" at megatron-sp's plan
        answer = solve(self, limit)
        worse = hand_floor.pinned_plan(hand_floor.without_rows(self.problem), "megatron-sp",
                                       self.hand_restriction, 30.0, "auto")
        poor_costs.append(self.problem.evaluate(worse))
        return dataclasses.replace(
            answer, choices=worse, objective=poor_costs[-1],
            status=solver.SolveStatus.TIME_LIMIT, bound=-np.inf).with_bound(answer.bound)

    monkeypatch.setattr(planner._Planner, "_solve", poor)
    plan = autoshard.plan(graph, MESH, training=True, time_limit=30.0)
    best = min(hand_totals, key=hand_totals.get)
    assert poor_costs[0] > hand_totals[best]
    # the hand plan's choices, then each op moved to a same-layout strategy that computes
    # less where that keeps the time (autoshard.planning.lean): never dearer than the hand plan
    assert plan.objective.total_s <= hand_totals[best] * (1 + 1e-9)
    assert any(f"hand plan {best}" in note for note in plan.notes)
    assert not plan.objective.optimal and plan.objective.gap > 0


def test_a_proven_search_solves_no_hand_plan(graph, monkeypatch) -> None:
    def never(*args, **kwargs):
        raise AssertionError("a proven search needs no hand plan")

    monkeypatch.setattr(hand_floor, "best_hand_plan", never)
    monkeypatch.setattr(planner, "best_hand_plan", never)
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=2"), training=True, time_limit=60.0)
    assert plan.objective.optimal
