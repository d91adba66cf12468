"""The stage model's memory loop (:func:`fit_memory`): monotone, and never a time-out taken
for "does not fit".

A stand-in for the solver and the cut search, small enough to check every memory limit: the
stage model's peak is what its budget allows between its fastest plan's peak and its
smallest peak; a stage needs twice the stage model's peak (twice the layers), which the
re-solve as a stage (``solve(budget, first)``) asks of its plan, except for ``MISS`` bytes
the cut search adds (a schedule holding more than the stage the constraint stood for); and
re-solves under tight budgets run out of time. The true answer is known in closed form: a
plan fits exactly when the smallest peak's stage (2 × smallest peak) fits the limit.
"""

from __future__ import annotations

import pytest

from autoshard.errors import MemoryTooSmallError
from autoshard.planning.pipeline.pipelined import fit_memory
from solver import NoSolutionError

FAST, SMALLEST, HARD_BELOW, MISS = 40.0, 10.0, 25.0, 3.0


def _fit(limit: float, *, time_outs: bool) -> float | None:
    """The stage bytes fit_memory settles on, or None for "no plan fits"."""
    def solve(budget: float, stage: object) -> float:
        per_byte = 2.0 if stage is not None else 1.0  # a stage constraint counts the stage
        if budget < SMALLEST * per_byte:
            raise MemoryTooSmallError(needed_bytes=SMALLEST * per_byte, limit_bytes=budget,
                                      mesh="m")
        if stage is not None and time_outs and budget < HARD_BELOW * 2:
            raise NoSolutionError("time limit", time_limit=1.0)
        peak = min(FAST, budget / per_byte)
        return SMALLEST if peak < SMALLEST * (1 + 1e-6) else peak  # the smallest, exactly

    def price(peak: float) -> float:
        need = 2 * peak + (MISS if peak > SMALLEST else 0.0)
        if need > limit:
            raise MemoryTooSmallError(needed_bytes=need, limit_bytes=limit, mesh="m",
                                      exact=False)
        return need

    try:
        return fit_memory(solve, price, limit, 0.0, lambda plan: "stage")[1]
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


def test_the_stage_re_solve_fits_without_a_frugal_plan() -> None:
    """A limit the fastest plan misses but a stage-constrained one meets: two solves."""
    calls: list[tuple[float, object]] = []

    def solve(budget: float, stage: object) -> float:
        calls.append((budget, stage))
        return min(FAST, budget / 2) if stage is not None else FAST

    def price(peak: float) -> float:
        if 2 * peak > 60.0:
            raise MemoryTooSmallError(needed_bytes=2 * peak, limit_bytes=60.0, mesh="m")
        return 2 * peak

    assert fit_memory(solve, price, 60.0, 0.0, lambda plan: "stage")[1] == 60.0
    assert calls == [(float("inf"), None), (60.0, "stage")]


def test_the_first_solve_failing_is_the_stage_models_own_verdict() -> None:
    def solve(budget: float, stage: object) -> float:
        raise MemoryTooSmallError(needed_bytes=50.0, limit_bytes=budget, mesh="m")

    with pytest.raises(MemoryTooSmallError) as caught:
        fit_memory(solve, lambda peak: peak, 30.0, 0.0)
    assert caught.value.needed_bytes == 50.0


def test_another_binding_stage_starts_again_at_the_device_memory() -> None:
    """The fastest plan's fullest stage is the last (replicated head); the plan re-solved for
    it fills the first stage instead, whose own re-solve gets the whole device again."""
    calls: list[tuple[float, object]] = []
    answers = {None: FAST, "last": 30.0, "first": 20.0}

    def solve(budget: float, stage: object) -> float:
        calls.append((budget, stage))
        return answers[stage]  # type: ignore[index]

    def price(peak: float) -> float:
        if peak > 20.0:
            raise MemoryTooSmallError(needed_bytes=70.0, limit_bytes=60.0, mesh="m")
        return 60.0

    def binding(peak: float) -> str:
        return "last" if peak == FAST else "first"

    assert fit_memory(solve, price, 60.0, 0.0, binding)[0] == 20.0
    assert calls == [(float("inf"), None), (60.0, "last"), (60.0, "first")]
    calls.clear()  # told where to start, the first re-solve is the right one
    assert fit_memory(solve, price, 60.0, 0.0, binding, lambda first: "first")[0] == 20.0
    assert calls == [(float("inf"), None), (60.0, "first")]


LOWER, FOUND = 8.0, 12.0  # what a search the time limit cut short proves and finds


def _unproven_fit(limit: float, calls: list[tuple[float, object]]) -> float:
    """``fit_memory`` against a stage model whose smallest peak (``SMALLEST``) was not proven
    in time: a refusal says only that it lies between ``LOWER`` and ``FOUND`` (a plan found
    there), as ``solver.peak.least_peak`` reports it. The re-solve at the device's memory
    runs out of time, so the frugal plans decide."""
    def solve(budget: float, stage: object) -> float:
        calls.append((budget, stage))
        per_byte = 2.0 if stage is not None else 1.0
        if budget < SMALLEST * per_byte:
            raise MemoryTooSmallError(needed_bytes=LOWER * per_byte, limit_bytes=budget,
                                      mesh="m", exact=False, found_bytes=FOUND * per_byte)
        if budget == limit:
            raise NoSolutionError("time limit", time_limit=1.0)
        return max(SMALLEST, min(FAST, budget / per_byte))

    def price(peak: float) -> float:
        if 2 * peak > limit:
            raise MemoryTooSmallError(needed_bytes=2 * peak, limit_bytes=limit, mesh="m",
                                      exact=False)
        return 2 * peak

    return fit_memory(solve, price, limit, 0.0, lambda plan: "stage")[1]


@pytest.mark.parametrize("limit", [2 * FOUND + 1.0, 2 * FOUND + 5.0])
def test_an_unproven_smallest_peak_re_solves_at_the_plan_found(limit: float) -> None:
    """The frugal re-solve's budget is the found plan's peak (a plan exists there), never the
    lower bound (under which none may fit): a plan comes back, and its stage fits."""
    calls: list[tuple[float, object]] = []
    assert _unproven_fit(limit, calls) <= limit
    assert calls[-1] == (pytest.approx(2 * FOUND), "stage")


def test_an_unproven_smallest_peak_with_no_plan_found_is_a_time_out() -> None:
    """No plan found in time either: the verdict is a time-out, not "no plan fits"."""
    def solve(budget: float, stage: object) -> float:
        if budget < 2 * FAST:
            raise MemoryTooSmallError(needed_bytes=LOWER, limit_bytes=budget, mesh="m",
                                      exact=False)
        return FAST

    def price(peak: float) -> float:
        raise MemoryTooSmallError(needed_bytes=2 * peak, limit_bytes=30.0, mesh="m")

    with pytest.raises(NoSolutionError):
        fit_memory(solve, price, 30.0, 0.0, lambda plan: "stage")
