"""``time_limit`` holds for the whole plan, pricing included: the solver is given what pricing
left of it (a 4-axis mesh's pricing once took 67 s of a 60 s limit the solver then spent
again), and a plan whose pricing took over half the limit says so in a note.

Pricing is made slow by the clock, not by size: the reshard matrices are computed as always,
then the call sleeps, so the solver's limit can be read off against a known pricing time.
"""

from __future__ import annotations

import time

import pytest

import autoshard
from autoshard.planning import hand_floor, planner
from graphs import zoo

MESH = autoshard.Mesh.parse("dp=2,tp=2")
PRICING_S = 1.5


@pytest.fixture
def slow_pricing(monkeypatch) -> list[float | None]:
    """Reshard pricing that takes ``PRICING_S`` more; returns the limits the solver gets."""
    matrices, solve, limits = planner.edge_matrices, planner.solver.solve, []

    def slow(*args, **kwargs):
        result = matrices(*args, **kwargs)
        time.sleep(PRICING_S)
        return result

    def recorded(problem, *args, time_limit=None, **kwargs):
        limits.append(time_limit)
        return solve(problem, *args, time_limit=time_limit, **kwargs)

    monkeypatch.setattr(planner, "edge_matrices", slow)
    monkeypatch.setattr(planner.solver, "solve", recorded)
    return limits


def test_the_solver_gets_what_pricing_left_of_the_limit(slow_pricing) -> None:
    graph = zoo.build("gpt2", layers=1, batch=8, seq=128)
    limit = 2.5
    plan = autoshard.plan(graph, MESH, training=True, time_limit=limit)
    assert slow_pricing, "the solver was not called"
    assert slow_pricing[0] is not None
    assert slow_pricing[0] <= hand_floor.search_share(limit) - PRICING_S + 1e-6
    assert any(note.startswith("pricing the options took") for note in plan.notes)


def test_without_a_limit_the_solver_has_none_and_no_note(slow_pricing) -> None:
    graph = zoo.build("gpt2", layers=1, batch=8, seq=128)
    plan = autoshard.plan(graph, MESH, training=True)
    assert slow_pricing and all(limit is None for limit in slow_pricing)
    assert not any(note.startswith("pricing the options took") for note in plan.notes)
