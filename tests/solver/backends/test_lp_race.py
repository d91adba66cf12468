"""The dual simplex raced beside PDLP's capped try (``solver.backends.lp_race``).

Independent truths: the sequential path (the simplex started only after PDLP missed, as
before the race existed), whose answers the raced path must reproduce to the last bit, and
exhaustive search of the whole problem (no bound above its optimum, no plan below it).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from solver import solve
from solver.backends import lp, lp_race, simplex
from solver.backends.formulation import build
from solver.compact import build_work, index_work
from solver.exact import exhaustive
from tests.solver.backends.test_lp_bound import chain_like, small_problem
from tests.support.bracket import assert_bracketed


def _fields(answer) -> tuple:
    arrays = tuple(None if a is None else a.tobytes()
                   for a in (answer.x, answer.weight, answer.duals, answer.values))
    return (answer.bound, answer.interim, answer.next_is_cheap, *arrays)


def _answers(form, race: bool, look: bool, patch: pytest.MonkeyPatch) -> list[tuple]:
    patch.setattr(lp, "RACE_SIMPLEX", "always" if race else False)  # whatever the load
    patch.setattr(lp, "_threads", 2)  # a second core, even where the tests have one
    return [_fields(a) for a in lp._pdlp_then_simplex(form, None, 1e-6, look)]


def _spy(monkeypatch) -> list[lp_race.SimplexRace]:
    races: list[lp_race.SimplexRace] = []
    real = lp_race.SimplexRace.__init__

    def recording(self, solve):
        real(self, solve)
        races.append(self)

    monkeypatch.setattr(lp_race.SimplexRace, "__init__", recording)
    return races


@pytest.mark.parametrize("look", [False, True])
@pytest.mark.parametrize("cap", [1, 64, 1_000_000])
@pytest.mark.parametrize("make", [small_problem, chain_like])
@pytest.mark.parametrize("seed", range(3))
def test_raced_answers_are_the_sequential_ones_bit_for_bit(seed, make, cap, look,
                                                           monkeypatch):
    """PDLP converged (cap 1,000,000 on chains) or missed (cap 1 or 64): every answer, its
    bound, plan, duals and flags, is the sequential path's, and the race really ran."""
    monkeypatch.setattr(lp, "PDLP_TRY_ITERATIONS", cap)
    form = build(index_work(build_work(make(seed))), flow=True)
    races = _spy(monkeypatch)
    sequential = _answers(form, False, look, monkeypatch)
    assert not races
    raced = _answers(form, True, look, monkeypatch)
    assert len(races) == 1 and not races[0].running()
    assert raced == sequential


@pytest.mark.parametrize("seed", range(3))
def test_a_caller_that_stops_at_the_interim_answer_leaves_no_simplex_running(seed,
                                                                             monkeypatch):
    """With ``look`` a missed try's point comes first; a caller that proves its plan with it
    closes the generator, and the racing simplex is interrupted and its thread ended."""
    monkeypatch.setattr(lp, "PDLP_TRY_ITERATIONS", 1)
    monkeypatch.setattr(lp, "_threads", 2)
    monkeypatch.setattr(lp, "RACE_SIMPLEX", "always")
    races = _spy(monkeypatch)
    form = build(index_work(build_work(chain_like(seed))), flow=True)
    answers = lp._pdlp_then_simplex(form, None, 1e-6, look=True)
    first = next(answers)
    assert first.interim
    answers.close()
    assert len(races) == 1 and not races[0].running()
    assert not any(t.name == "simplex-race" for t in threading.enumerate())


def test_the_racing_simplex_error_reaches_the_caller_that_uses_its_answer(monkeypatch):
    """A failure of the simplex on its thread is raised where its answer is asked for, as
    it would be on the sequential path."""
    monkeypatch.setattr(lp, "PDLP_TRY_ITERATIONS", 1)
    monkeypatch.setattr(lp, "_threads", 2)
    monkeypatch.setattr(lp, "RACE_SIMPLEX", "always")

    def failing(*args, **kwargs):
        raise ValueError("simplex failed")

    monkeypatch.setattr(simplex, "solve_highs_lp", failing)
    form = build(index_work(build_work(small_problem(0))), flow=True)
    with pytest.raises(ValueError, match="simplex failed"):
        list(lp._pdlp_then_simplex(form, None, 1e-6))


@pytest.mark.parametrize(("threads", "cores", "busy", "races_expected"),
                         [(1, 2, 0, 0), (2, 2, 0, 1), (2, 2, 1, 0), (2, 4, 2, 1),
                          (2, 2, None, 1)])
def test_the_race_runs_only_on_a_spare_core(threads, cores, busy, races_expected,
                                            monkeypatch):
    """One core for this process's LPs (``share_cores``), or every other core busy with
    threads runnable elsewhere: the simplex runs after PDLP, as before. Same answers."""
    monkeypatch.setattr(lp, "PDLP_TRY_ITERATIONS", 1)
    monkeypatch.setattr(lp, "RACE_SIMPLEX", True)
    monkeypatch.setattr(lp, "_threads", threads)
    monkeypatch.setattr(lp, "_usable_cores", lambda: cores)
    monkeypatch.setattr(lp_race, "runnable_elsewhere", lambda: busy)
    races = _spy(monkeypatch)
    form = build(index_work(build_work(small_problem(1))), flow=True)
    answers = [_fields(a) for a in lp._pdlp_then_simplex(form, None, 1e-6)]
    assert len(races) == races_expected
    assert answers == [_fields(simplex.solve_highs_lp(form, None, barrier=False))]


def test_runnable_elsewhere_reads_the_machine():
    """A count, never negative, where /proc/loadavg exists; ``None`` where it does not."""
    busy = lp_race.runnable_elsewhere()
    assert busy is None or busy >= 0


@pytest.mark.parametrize("cap", [1, 1_000_000])
@pytest.mark.parametrize("seed", range(6))
def test_solve_with_the_race_is_exact(seed, cap, monkeypatch):
    """Through ``solve``, the raced mid-size path brackets the exhaustive optimum."""
    monkeypatch.setattr(lp, "PDLP_TRY_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_TRY_ITERATIONS", cap)
    monkeypatch.setattr(lp, "_threads", 2)
    monkeypatch.setattr(lp, "RACE_SIMPLEX", "always")
    problem = small_problem(seed)
    _, best = exhaustive(problem)
    answer = solve(problem, backend="highs")
    assert_bracketed(problem, answer, best)
    assert np.isfinite(answer.objective)


def test_a_race_cancelled_before_its_release_ends_at_once(monkeypatch):
    """Cancelled while still waiting for PDLP's solve call (PDLP failed before it), the
    simplex is interrupted before it starts, and the thread ends without the release wait."""
    monkeypatch.setattr(lp_race, "RELEASE_WAIT_S", 30.0)
    form = build(index_work(build_work(chain_like(0))), flow=True)
    started = []
    race = lp_race.SimplexRace(lambda interrupter: started.append(interrupter.interrupted)
                               or simplex.solve_highs_lp(form, None, barrier=False,
                                                         interrupter=interrupter))
    race.cancel()
    assert not race.running() and started == [True]


def test_an_interrupted_glop_does_not_fall_back_to_highs(monkeypatch):
    """Glop stopped by the race's interrupter ends without an optimum; that is not the
    'Glop failed' case, so HiGHS' simplex must not run after it on the racing thread."""
    from ortools.util.python.pybind_solve_interrupter import PySolveInterrupter

    from solver.backends import lp_answer

    form = build(index_work(build_work(chain_like(1))), flow=True)
    solvers = []
    real = simplex.run_mathopt
    monkeypatch.setattr(simplex, "run_mathopt",
                        lambda *a, **k: solvers.append(a[-1]) or real(*a, **k))
    interrupter = PySolveInterrupter()
    interrupter.interrupt()
    run = simplex.run_highs(form, lp_answer.objective_factor(form), None, barrier=False,
                            interrupter=interrupter)
    assert solvers == ["GLOP"] and run.duals is None and run.stopped
