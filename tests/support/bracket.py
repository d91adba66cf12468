"""The check every exact-solver test makes against an exhaustive optimum."""

from __future__ import annotations

import pytest

from solver import ChoiceProblem, Solution


def assert_bracketed(problem: ChoiceProblem, answer: Solution, best: float) -> None:
    """The bound is below the true optimum ``best``, the plan is a plan of ``problem`` priced
    as it says and not below ``best``, and a plan called optimal is the optimum."""
    assert answer.bound <= best + 1e-9
    assert answer.objective >= best - 1e-9
    assert answer.objective == pytest.approx(problem.evaluate(answer.choices))
    if answer.optimal:
        assert answer.objective == pytest.approx(best, abs=1e-9)
