"""PDLP in legs (``solver.backends.pdlp_run``) and the periodic search's look at each leg's
point before PDLP converges, against independent answers: the dual simplex's LP optimum and
exhaustive search of the whole problem (``solver.exact`` shares no code with either)."""

from __future__ import annotations

import pytest

import solver.periodic_search as periodic_search
from solver import solve
from solver.backends import lp, lp_answer, simplex
from solver.backends.formulation import build
from solver.compact import build_work, index_work
from solver.exact import exhaustive
from tests.solver.backends.test_lp_bound import chain_like
from tests.solver.test_periodic import chain_problem
from tests.support.bracket import assert_bracketed

# interim answers early (the last leg runs to the cap in one go, so short legs cannot stop
# PDLP converging); the chains below converge in a few hundred iterations
CHECKS = (16, 32, 48)
EARLY = 8  # the first leg's end where the caller asks for an early look (``lp.EARLY_LOOK``)
# a mid-size LP's PDLP try cut short (``lp.PDLP_TRY_ITERATIONS``): on chain_like's LPs the
# duals' bound is then 0.1-0.8 % below the optimum, not converged
LOOK_ITERATIONS = 192


def _lp_optimum(form) -> float:
    run = simplex.run_highs(form, lp_answer.objective_factor(form), None, barrier=False)
    assert run.x is not None
    return float(form.obj @ run.x + form.constant)


def _chain_lp(seed: int):
    """A random chain-like problem, its LP with flow networks, the simplex's LP optimum and
    the tolerance bounds are compared with."""
    ix = index_work(build_work(chain_like(seed)))
    form = build(ix, flow=True)
    optimum = _lp_optimum(form)
    return ix, form, optimum, 1e-9 * max(1.0, abs(optimum))


@pytest.mark.parametrize("seed", range(4))
def test_pdlp_legs_bound_below_the_lp_optimum_and_reach_it(seed, monkeypatch) -> None:
    """Every leg's bound (from its duals, by weak duality) stays below the simplex's LP
    optimum; the legs end with PDLP converged, its bound at the optimum; each interim
    answer's x is a plan of the problem."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_CHECKS", CHECKS)
    ix, form, optimum, tolerance = _chain_lp(seed)
    answers = list(lp.lp_answers(form, None, gap=1e-6, interim=True))
    interim = [a for a in answers if a.interim]
    final = [a for a in answers if not a.interim]
    assert interim and final, "the LP should take more than the first leg"
    assert all(a.bound <= optimum + tolerance for a in answers)
    assert all(ix.evaluate(a.x) >= optimum - tolerance for a in interim)
    assert final[0].next_is_cheap  # PDLP converged within its cap
    assert final[0].bound == pytest.approx(optimum, rel=1e-5, abs=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_an_early_look_bounds_below_the_lp_optimum_and_the_legs_still_reach_it(
        seed, monkeypatch) -> None:
    """``early``: the first leg ends at ``EARLY_LOOK`` with a shorter major period, the rest
    as before; every bound stays below the simplex's LP optimum and PDLP still converges to
    it."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_CHECKS", CHECKS)
    monkeypatch.setattr(lp, "EARLY_LOOK", EARLY)
    _, form, optimum, tolerance = _chain_lp(seed)
    answers = list(lp.lp_answers(form, None, gap=1e-6, interim=True, early=True))
    interim = [a for a in answers if a.interim]
    assert len(interim) == 1 + len(CHECKS)  # the early look, then every check
    assert all(a.bound <= optimum + tolerance for a in answers)
    final = [a for a in answers if not a.interim]
    assert final[0].next_is_cheap
    assert final[0].bound == pytest.approx(optimum, rel=1e-5, abs=1e-9)


def test_the_early_leg_is_pdlp_with_the_shorter_major_period(monkeypatch) -> None:
    """The early look's point is the one PDLP gives after ``EARLY_LOOK`` iterations with a
    major iteration every ``EARLY_MAJOR`` (a run of its own, bit for bit), and not the one
    PDLP's default period gives."""
    from solver.backends.pdlp_run import PdlpRunner

    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "EARLY_LOOK", 40)
    _, form, _, _ = _chain_lp(0)
    first = next(lp.lp_answers(form, None, gap=1e-6, interim=True, early=True))
    assert first.interim
    runner = PdlpRunner(form, lp_answer.objective_factor(form), lp.pdlp_tolerance(1e-6),
                        lp._threads, lp.PDLP_SHARDS, lp.PDLP_LEG_SMOOTHING)
    short = runner.run(40, None, None, lp.EARLY_MAJOR)
    default = runner.run(40, None, None)
    assert short is not None and default is not None
    assert first.values is not None
    assert first.values.tobytes() == short.primal[:form.num_x].tobytes()
    assert short.primal.tobytes() != default.primal.tobytes()


@pytest.mark.parametrize("seed", range(2))
def test_the_default_major_period_is_pdlps_own(seed) -> None:
    """``configure`` states the major period and termination checks explicitly; at
    ``MAJOR_ITERATIONS`` PDLP runs exactly as with its own defaults (the same iterate, bit
    for bit), so the roads that keep the default are unchanged."""
    from ortools.pdlp import solvers_pb2
    from ortools.pdlp.python import pdlp

    from solver.backends.pdlp_run import MAJOR_ITERATIONS, PdlpRunner, configure

    form = build(index_work(build_work(chain_like(seed))), flow=True)
    runner = PdlpRunner(form, lp_answer.objective_factor(form), 1e-6, 1, lp.PDLP_SHARDS)
    ours = solvers_pb2.PrimalDualHybridGradientParams()
    configure(ours, eps=1e-6, iterations=300, threads=1, shards=lp.PDLP_SHARDS,
              smoothing=0.5, major=MAJOR_ITERATIONS)
    theirs = solvers_pb2.PrimalDualHybridGradientParams()
    configure(theirs, eps=1e-6, iterations=300, threads=1, shards=lp.PDLP_SHARDS,
              smoothing=0.5)
    theirs.ClearField("major_iteration_frequency")
    theirs.ClearField("termination_check_frequency")
    a = pdlp.primal_dual_hybrid_gradient(runner.program, ours)
    b = pdlp.primal_dual_hybrid_gradient(runner.program, theirs)
    assert a.solve_log.iteration_count == b.solve_log.iteration_count
    assert bytes(memoryview(a.primal_solution)) == bytes(memoryview(b.primal_solution))


@pytest.mark.parametrize("seed", range(4))
def test_legs_resumed_with_their_primal_weight_converge_as_one_leg_does(seed) -> None:
    """PDLP resumed leg after leg (150 iterations each: ``PDLP_CHECKS``' spacing) from the
    last leg's point and primal weight converges within one leg of the iterations a single
    run needs, to the simplex's LP optimum."""
    from solver.backends.pdlp_run import PdlpRunner

    form = build(index_work(build_work(chain_like(seed))), flow=True)
    optimum, factor = _lp_optimum(form), lp_answer.objective_factor(form)
    runner = PdlpRunner(form, factor, 1e-6, 1, lp.PDLP_SHARDS)
    whole = runner.run(5_000, None, None)
    assert whole is not None and whole.converged
    point = None
    while point is None or (not point.converged and point.iterations < 5_000):
        point = runner.run(150, None, point)
        assert point is not None
    assert point.converged and point.iterations <= whole.iterations + 150
    bound = lp_answer.dual_bound(form, point.duals, factor)
    assert bound <= optimum + 1e-9 * max(1.0, abs(optimum))
    assert bound == pytest.approx(optimum, rel=1e-5, abs=1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_interim_answers_keep_the_periodic_answer_bracketed(seed, monkeypatch) -> None:
    """With PDLP in legs and its interim points closed by fixing and the partial MIP, the
    answer is still bracketed by the exhaustive optimum, and one called optimal is it."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_CHECKS", CHECKS)
    monkeypatch.setattr(lp, "EARLY_LOOK", EARLY)
    monkeypatch.setattr(periodic_search, "MAX_VARS", 0)  # the PDLP road of large LPs
    looks = []
    real = periodic_search._Search.interim
    monkeypatch.setattr(periodic_search._Search, "interim",
                        lambda self, *a: looks.append(real(self, *a)) or looks[-1])
    problem = chain_problem(seed, layers=5, per_block=2, options=3, rest=2)
    _, best = exhaustive(problem)
    answer = solve(problem)
    assert_bracketed(problem, answer, best)
    assert looks and all(isinstance(done, bool) for done in looks)


def test_some_chain_is_proven_at_an_interim_point(monkeypatch) -> None:
    """The road is taken, not only allowed: on some of these chains the interim look closes
    the gap before PDLP converges, and the plan it proves is the exhaustive optimum."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_CHECKS", CHECKS)
    monkeypatch.setattr(lp, "EARLY_LOOK", EARLY)
    monkeypatch.setattr(periodic_search, "MAX_VARS", 0)
    assert _proven_at_a_look(lambda: _interim_verdicts(monkeypatch))


def _looks_counted(monkeypatch) -> list[bool]:
    """Mid-size LPs (every LP here) try PDLP for 16 iterations, never enough to converge on
    these chains, so each periodic LP looks at PDLP's point before its dual simplex; returns
    the looks' verdicts as they happen."""
    monkeypatch.setattr(lp, "PDLP_TRY_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_TRY_ITERATIONS", 16)
    return _interim_verdicts(monkeypatch)


def _interim_verdicts(monkeypatch) -> list[bool]:
    """Every ``_Search.interim`` verdict (gap closed or not) from now on, as they happen."""
    looks: list[bool] = []
    real = periodic_search._Search.interim
    monkeypatch.setattr(periodic_search._Search, "interim",
                        lambda self, *a: looks.append(real(self, *a)) or looks[-1])
    return looks


def _proven_at_a_look(verdicts) -> list[int]:
    """Seeds of ten random chains whose last look closed the gap; each such answer must be
    called optimal and equal the exhaustive optimum. ``verdicts()`` starts counting anew."""
    proven = []
    for seed in range(10):
        looks = verdicts()
        problem = chain_problem(seed, layers=5, per_block=2, options=3, rest=2)
        _, best = exhaustive(problem)
        answer = solve(problem)
        if looks and looks[-1]:
            assert answer.optimal and answer.objective == pytest.approx(best, abs=1e-9)
            proven.append(seed)
    return proven


@pytest.mark.parametrize("seed", range(4))
def test_a_mid_size_look_comes_before_the_simplex_and_bounds_the_lp(seed, monkeypatch) -> None:
    """``lp_answers(look=True)`` on a mid-size LP whose PDLP try did not converge: an interim
    answer first (a plan, and a bound from its duals below the simplex's LP optimum), then
    the dual simplex's answer at the optimum; without ``look`` only the simplex's."""
    monkeypatch.setattr(lp, "PDLP_TRY_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_TRY_ITERATIONS", LOOK_ITERATIONS)
    ix, form, optimum, tolerance = _chain_lp(seed)
    looked = list(lp.lp_answers(form, None, gap=1e-6, look=True))
    assert [a.interim for a in looked] == [True, False]
    assert looked[0].bound <= optimum + tolerance
    assert ix.evaluate(looked[0].x) >= optimum - tolerance
    assert looked[1].bound == pytest.approx(optimum, rel=1e-7, abs=1e-9)
    assert [a.interim for a in lp.lp_answers(form, None, gap=1e-6)] == [False]


@pytest.mark.parametrize("seed", range(10))
def test_mid_size_looks_keep_the_periodic_answer_bracketed(seed, monkeypatch) -> None:
    """With every periodic LP looked at before its dual simplex (its point as a plan, the
    partial MIP when fixing keeps at most ``LOOK_MIP_VARS``), the answer is bracketed by the
    exhaustive optimum, and one called optimal is it."""
    looks = _looks_counted(monkeypatch)
    problem = chain_problem(seed, layers=5, per_block=2, options=3, rest=2)
    _, best = exhaustive(problem)
    answer = solve(problem)
    assert_bracketed(problem, answer, best)
    assert looks


def test_some_chain_is_proven_at_a_mid_size_look(monkeypatch) -> None:
    """The road is taken: on some of these chains the look proves the plan before the dual
    simplex runs, and that plan is the exhaustive optimum."""
    assert _proven_at_a_look(lambda: _looks_counted(monkeypatch))


def _asked_for(keyword: str, monkeypatch, **options) -> set:
    """The values of ``lp_answers``' ``keyword`` over a chain's large-LP solve (PDLP's road
    forced, no closable LP) under ``solve(**options)``, whose answer must be bracketed by
    the exhaustive optimum."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_CHECKS", CHECKS)
    monkeypatch.setattr(periodic_search, "MAX_VARS", 0)
    asked: list = []
    real = periodic_search.lp_answers

    def recorded(*args, **kwargs):
        asked.append(kwargs[keyword])
        return real(*args, **kwargs)

    monkeypatch.setattr(periodic_search, "lp_answers", recorded)
    problem = chain_problem(3, layers=5, per_block=2, options=3, rest=2)
    _, best = exhaustive(problem)
    assert_bracketed(problem, solve(problem, **options), best)
    assert asked
    return set(asked)


@pytest.mark.parametrize("early_look", [True, False])
def test_a_caller_can_opt_out_of_the_early_look(early_look, monkeypatch) -> None:
    """``solve(early_look=False)`` (the shared-reshard rounds' degenerate LPs) asks PDLP for
    no early leg, and the answer is still bracketed by the exhaustive optimum; by default the
    periodic search asks for one."""
    monkeypatch.setattr(lp, "EARLY_LOOK", EARLY)
    assert _asked_for("early", monkeypatch, early_look=early_look) == {early_look}


@pytest.mark.parametrize("provisional", [False, True])
def test_a_provisional_caller_caps_pdlp_one_leg_after_the_looks(provisional,
                                                                 monkeypatch) -> None:
    """``solve(provisional=True)`` (a shared-reshard round, wanted for its plan) asks PDLP
    for at most ``lp.PDLP_PLAN_ITERATIONS`` on the large-LP road, a whole solve for PDLP's
    own cap; either answer is bracketed by the exhaustive optimum."""
    assert _asked_for("max_iterations", monkeypatch, provisional=provisional) == {
        lp.PDLP_PLAN_ITERATIONS if provisional else None}
