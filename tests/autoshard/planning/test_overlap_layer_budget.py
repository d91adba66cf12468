"""``--overlap layer`` without ``--time-limit``: the exact phase that closes the windows'
gap is bounded (``solver.windowed.EXACT_DEFAULT_S``), and the plan says so where the user
reads it (its notes and ``plan``'s warnings), with its gap to a proven bound.

The exact phase is given no time and one Lagrangian round (monkeypatched), so a small GPT-2
is left with a gap in under a second; the oracle for the plan is its own certificate (bound
below the step time, status not optimal), the claim under test is what is said.
"""

from __future__ import annotations

import autoshard
from autoshard.cli.plan import solver_warnings
from graphs import zoo
from solver import OPTIMALITY_GAP, windowed

MESH = autoshard.Mesh.parse("dp=2,tp=2")
SHAPE = {"layers": 1, "batch": 8, "seq": 128, "hidden": 256, "heads": 4, "vocab": 512}


def test_a_cut_exact_phase_is_stated_with_its_gap(monkeypatch) -> None:
    monkeypatch.setattr(windowed, "EXACT_DEFAULT_S", 0.0)
    monkeypatch.setattr(windowed, "MAX_ROUNDS", 1)
    plan = autoshard.plan(zoo.build("gpt2", **SHAPE), MESH, training=True, overlap="layer")
    obj = plan.objective
    assert obj.status == "time_limit" and not obj.optimal
    assert obj.lower_bound_s < obj.total_s and obj.gap > 0
    notes = [n for n in plan.notes if n.startswith("without --time-limit")]
    assert len(notes) == 1 and "pass --time-limit S to search longer" in notes[0]
    warnings = solver_warnings(plan, OPTIMALITY_GAP)
    assert warnings[0].startswith("warning: the solver stopped at a gap of")
    assert f"note: {notes[0]}" in warnings


def test_with_a_time_limit_there_is_no_such_note(monkeypatch) -> None:
    monkeypatch.setattr(windowed, "MAX_ROUNDS", 1)
    plan = autoshard.plan(zoo.build("gpt2", **SHAPE), MESH, training=True, overlap="layer",
                          time_limit=3)
    assert not any(n.startswith("without --time-limit") for n in plan.notes)
