"""The budget a refusal names when the time limit left the least peak unproven: the peak of
the leanest plan found (``MemoryTooSmallError.found_bytes``), at which the stage model's
re-solve (``pipelined._frugal``) must find a plan. The solver's least peak is faked to be
unproven (its lower bound halved); the oracle is the re-solved plan's own peak against the
budget, and the refusal of a budget at the lower bound, below the true least peak."""

from __future__ import annotations

import math

import pytest

from autoshard.errors import MemoryTooSmallError
from autoshard.planning.planner import plan, training_step_graph
from autoshard.sharding.mesh import Mesh
from graphs import zoo
from solver import graph_search
from solver.peak import PeakBounds, least_peak

SHAPE = {"seq": 64, "hidden": 128, "ffn": 256, "heads": 8, "batch": 2, "layers": 4}
RESERVE = 1 << 20


def _unproven(problem, clock, known_lower=-math.inf, *, search=True) -> PeakBounds:
    found = least_peak(problem, clock, known_lower, search=search)
    return PeakBounds(lower=found.lower / 2, upper=found.upper)


def test_a_refusal_without_proof_names_a_budget_where_a_plan_fits(monkeypatch) -> None:
    train = training_step_graph(zoo.build("llama3-8b", **SHAPE), "adamw", "none")
    mesh = Mesh.parse("dp=2,tp=2")
    with pytest.raises(MemoryTooSmallError) as proven:
        plan(train, mesh, memory_limit=RESERVE + 1.0, reserve=RESERVE)
    assert proven.value.exact and proven.value.found_bytes == proven.value.needed_bytes
    least = proven.value.needed_bytes
    monkeypatch.setattr(graph_search, "least_peak", _unproven)
    with pytest.raises(MemoryTooSmallError) as caught:
        plan(train, mesh, memory_limit=RESERVE + 1.0, reserve=RESERVE)
    refusal = caught.value
    assert not refusal.exact and "needs at least" in str(refusal) and "upper bound" in str(refusal)
    assert refusal.needed_bytes < least <= refusal.found_bytes
    budget = refusal.found_bytes * (1 + 1e-9)
    fitted = plan(train, mesh, memory_limit=budget, reserve=RESERVE)
    assert fitted.peak_bytes_per_device <= budget
    with pytest.raises(MemoryTooSmallError):  # the lower bound is no budget to re-solve at
        plan(train, mesh, memory_limit=refusal.needed_bytes, reserve=RESERVE)
