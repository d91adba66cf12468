"""The time limit holds for the whole solve: once the deadline has passed, no optional phase
starts (``solver.clock``).

A slow instance is constructed by its clock, not by its size: the solve's clock runs out the
moment a chosen phase ends, as if that phase had taken all the time (a 3-axis periodic LP
does). Nothing here is timed: the checks count the phases that ran after the deadline, and
compare the answer with exhaustive search of the whole problem (``solver.exact``, which
shares no code with the periodic road), so a late answer is still a plan with a valid bound.
"""

from __future__ import annotations

import pytest

import solver.api as api
from solver import solve
from solver.clock import Clock
from solver.errors import Infeasible
from solver.exact import exhaustive
from solver.solution import SolveStatus
from tests.solver.test_periodic import chain_problem
from tests.solver.test_periodic_close import overlap_chain


def _expiring_at(phase: str) -> type[Clock]:
    class Expiring(Clock):
        """A clock whose deadline passes when ``phase`` first ends."""

        def lap(self, name: str) -> None:
            super().lap(name)
            if name == phase:
                self.deadline = self.start

    return Expiring


# chains whose periodic road, given all the time it wants, goes on past its first LP: the
# polish, the partial MIP and the tied search
CHAINS = [("chain", 6), ("chain", 7), ("overlap", 4), ("overlap", 7)]


def _problem(kind: str, seed: int):
    return chain_problem(seed, 5, 2, 3, 2) if kind == "chain" else overlap_chain(seed, 5, 2)


@pytest.mark.parametrize(("kind", "seed"), CHAINS)
@pytest.mark.parametrize("phase", ["periodic_lp", "polish"])
def test_no_phase_starts_after_the_deadline(kind, seed, phase, monkeypatch) -> None:
    problem = _problem(kind, seed)
    _, best = exhaustive(problem)
    unhurried = [name for name, _ in solve(problem).stats.seconds]
    assert phase in unhurried
    assert len(unhurried) > unhurried.index(phase) + 1  # it would go on if it had the time
    monkeypatch.setattr(api, "Clock", _expiring_at(phase))
    answer = solve(problem, time_limit=3600.0)
    names = [name for name, _ in answer.stats.seconds]
    assert names == unhurried[:unhurried.index(phase) + 1]
    assert answer.objective == pytest.approx(problem.evaluate(answer.choices))
    assert answer.objective >= best - 1e-9
    assert answer.bound <= best + 1e-9
    if not answer.optimal:
        assert answer.status is SolveStatus.TIME_LIMIT


class _Expired(Clock):
    """A clock whose deadline has passed before the solve begins."""

    def __init__(self, time_limit: float | None, stop_when=None):
        super().__init__(time_limit, stop_when)
        self.deadline = self.start


@pytest.mark.parametrize("seed", range(12))
def test_a_memory_bound_chain_out_of_time_still_returns_a_plan_that_fits(seed,
                                                                         monkeypatch) -> None:
    """No time at all for a chain whose memory binds: no price search and no tied search
    start, and the plan returned fits (or the solve says nothing fits, as exhaustive search
    does)."""
    problem = chain_problem(seed, 5, 1, 3, 2, memory=True)
    try:
        _, best = exhaustive(problem)
    except Infeasible:  # nothing fits: the late solve may not invent a plan
        best = None
    monkeypatch.setattr(api, "Clock", _Expired)
    try:
        answer = solve(problem, time_limit=3600.0)
    except Infeasible:
        assert best is None
        return
    assert best is not None
    assert [name for name, _ in answer.stats.seconds
            if name.startswith(("priced_", "restricted_"))] == []
    assert problem.peak_memory(answer.choices) <= problem.memory_limit
    assert answer.objective >= best - 1e-9
    assert answer.bound <= best + 1e-9


class _ExpiresAfterTwoPricedSolves(Clock):
    """A clock whose deadline passes once the price search has solved two priced chains
    (their phases are copied into this clock's, named ``priced_*``): a plan that fits and
    a cheaper one that does not, the two the block mix starts from."""

    def expired(self) -> bool:
        return sum(name == "priced_aggregate" for name, _ in self.phases) >= 2

    def remaining(self) -> float | None:
        return 0.0 if self.expired() else super().remaining()


@pytest.mark.parametrize(("seed", "per_block"), [(0, 1), (2, 1), (3, 1), (5, 1)])
def test_after_the_deadline_the_price_search_runs_one_block_mix_with_a_short_limit(
        seed, per_block, monkeypatch) -> None:
    import solver.memory_price as memory_price

    problem = chain_problem(seed, 6, per_block, 3, 2, memory=True)
    limits = []
    real = memory_price.best_mix

    def counted(*args):
        limits.append(args[-1])
        return real(*args)

    monkeypatch.setattr(memory_price, "best_mix", counted)
    solve(problem)
    assert limits  # given the time, the search mixes blocks
    limits.clear()
    monkeypatch.setattr(api, "Clock", _ExpiresAfterTwoPricedSolves)
    answer = solve(problem, time_limit=3600.0)
    # past the deadline only the first mix (cheapest non-fitting plan x best fitting) runs,
    # and its MIP gets MIX_SECONDS, not the hour the solve was given
    assert limits in ([], [memory_price.MIX_SECONDS])
    assert problem.peak_memory(answer.choices) <= problem.memory_limit
    _, best = exhaustive(problem)
    assert best - 1e-9 <= answer.objective and answer.bound <= best + 1e-9


@pytest.mark.parametrize(("kind", "seed"), CHAINS)
def test_stop_when_ends_a_chain_search_at_its_first_plan_that_meets_it(kind, seed) -> None:
    problem = _problem(kind, seed)
    _, best = exhaustive(problem)
    unhurried = [name for name, _ in solve(problem).stats.seconds]
    seen = []

    def never(choices: tuple[int, ...]) -> bool:
        seen.append(choices)
        return False

    assert [name for name, _ in solve(problem, stop_when=never).stats.seconds] == unhurried
    assert seen and all(len(c) == problem.num_nodes for c in seen)
    answer = solve(problem, stop_when=lambda choices: True)
    names = [name for name, _ in answer.stats.seconds]
    # the first LP's plan (polished where the LP hesitated) is the last phase
    assert names in (["aggregate", "periodic_lp"], ["aggregate", "periodic_lp", "polish"])
    assert names == unhurried[:len(names)] and len(names) < len(unhurried)
    assert answer.objective >= best - 1e-9 and answer.bound <= best + 1e-9
