"""The stage model's memory loop (:func:`fit_memory`): monotone, and never a time-out taken
for "does not fit".

A stand-in for the solver and the cut search, small enough to check every memory limit: the
stage model's peak is what its budget allows between its fastest plan's peak and its
smallest peak, a stage needs twice the stage model's peak (twice the layers), and re-solves
under tight budgets run out of time. The true answer is known in closed form: a plan fits
exactly when the smallest peak's stage (2 × smallest peak) fits the limit.
"""

from __future__ import annotations

import pytest

from autoshard.errors import MemoryTooSmallError
from autoshard.planning.pipeline.pipelined import fit_memory
from solver import NoSolutionError

FAST, SMALLEST, HARD_BELOW = 40.0, 10.0, 25.0


def _fit(limit: float, *, time_outs: bool) -> float | None:
    """The stage bytes fit_memory settles on, or None for "no plan fits"."""
    def solve(budget: float, again: bool) -> float:
        if budget < SMALLEST:
            raise MemoryTooSmallError(needed_bytes=SMALLEST, limit_bytes=budget, mesh="m")
        if again and time_outs and SMALLEST * (1 + 1e-6) < budget < HARD_BELOW:
            raise NoSolutionError("time limit", time_limit=1.0)
        return min(FAST, budget)

    def price(peak: float) -> float:
        if 2 * peak > limit:
            raise MemoryTooSmallError(needed_bytes=2 * peak, limit_bytes=limit, mesh="m",
                                      exact=False)
        return 2 * peak

    try:
        return fit_memory(solve, price, limit, 0.0, 0.5, peak_of=lambda peak: peak)[1]
    except MemoryTooSmallError as exc:
        assert exc.needed_bytes == pytest.approx(2 * SMALLEST)  # the frugal plan's verdict
        return None


@pytest.mark.parametrize("time_outs", [False, True])
def test_the_verdict_is_the_frugal_plans_and_monotone(time_outs: bool) -> None:
    limits = [float(x) for x in range(12, 100)]
    verdicts = [_fit(limit, time_outs=time_outs) for limit in limits]
    for limit, stage in zip(limits, verdicts, strict=True):
        assert (stage is not None) == (limit >= 2 * SMALLEST), limit
        if stage is not None:
            assert stage <= limit
    fits = [v is not None for v in verdicts]
    assert fits == sorted(fits)  # once a limit fits, every larger one does


def test_the_first_solve_failing_is_the_stage_models_own_verdict() -> None:
    def solve(budget: float, again: bool) -> float:
        raise MemoryTooSmallError(needed_bytes=50.0, limit_bytes=budget, mesh="m")

    with pytest.raises(MemoryTooSmallError) as caught:
        fit_memory(solve, lambda peak: peak, 30.0, 0.0, 0.5)
    assert caught.value.needed_bytes == 50.0
