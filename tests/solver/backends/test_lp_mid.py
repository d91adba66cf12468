"""Mid-size LPs: PDLP first for a capped number of iterations, the dual simplex if it did
not converge.

Independent truths: exhaustive search of the whole problem (no bound above its optimum, no
plan below it) and HiGHS' dual simplex (the LP optimum PDLP's bound must reach when PDLP
converged, and the answer when it did not).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import solve
from solver.backends import lp, lp_answer, pdlp_proto, simplex
from solver.backends.formulation import build
from solver.compact import build_work, index_work
from solver.exact import exhaustive
from tests.solver.backends.test_lp_bound import chain_like, small_problem
from tests.solver.test_periodic import chain_problem
from tests.support.bracket import assert_bracketed


def _simplex_bound(form) -> float:
    return simplex.run_highs(form, lp_answer.objective_factor(form), None, barrier=False,
                         glop=False).bound


@pytest.mark.parametrize("seed", range(4))
def test_converged_pdlp_answers_without_the_simplex_on_the_whole_lp(seed, monkeypatch):
    """PDLP converges on these chains: its answer first (the next one cheap), its bound at
    the dual simplex's LP optimum, and the whole LP never goes to the simplex (not raced
    either: ``test_lp_race`` shows the raced answers are these)."""
    monkeypatch.setattr(lp, "PDLP_TRY_VARS", 0)
    monkeypatch.setattr(lp, "RACE_SIMPLEX", False)
    ix = index_work(build_work(chain_like(seed)))
    form = build(ix, flow=True)
    optimum = _simplex_bound(form)
    monkeypatch.setattr(simplex, "solve_highs_lp", lambda *a, **k: pytest.fail("simplex ran"))
    answers = list(lp.lp_answers(form, None, gap=1e-6))
    first = answers[0]
    tolerance = 1e-6 * max(1.0, abs(optimum))
    assert first.next_is_cheap and first.x is not None and first.duals is not None
    assert optimum - tolerance <= first.bound <= optimum + 1e-9 * max(1.0, abs(optimum))
    for answer in answers:
        assert answer.x is not None and ix.evaluate(answer.x) >= optimum - tolerance


@pytest.mark.parametrize("seed", range(4))
def test_pdlp_short_of_its_cap_hands_over_to_the_dual_simplex(seed, monkeypatch):
    """Capped after one iteration PDLP has not converged: one answer, the dual simplex's,
    with its exact bound and a plan."""
    monkeypatch.setattr(lp, "PDLP_TRY_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_TRY_ITERATIONS", 1)
    ix = index_work(build_work(small_problem(seed)))
    form = build(ix, flow=True)
    expected = simplex.solve_highs_lp(form, None, barrier=False)
    answers = list(lp.lp_answers(form, None))
    assert len(answers) == 1
    (answer,) = answers
    assert answer.bound == expected.bound and np.array_equal(answer.x, expected.x)
    _, best = exhaustive(small_problem(seed))
    assert answer.bound <= best + 1e-9


@pytest.mark.parametrize("cap", [1, 1_000_000])
@pytest.mark.parametrize("seed", range(6))
def test_solve_through_the_mid_size_path_is_exact(seed, cap, monkeypatch):
    """Both ways through (PDLP converged, PDLP cut short): bound below and plan above the
    exhaustive optimum, equal to it when proven."""
    monkeypatch.setattr(lp, "PDLP_TRY_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_TRY_ITERATIONS", cap)
    problem = small_problem(seed)
    _, best = exhaustive(problem)
    answer = solve(problem, backend="highs")
    assert_bracketed(problem, answer, best)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 7), per_block=st.integers(1, 2),
       options=st.integers(2, 3), cap=st.sampled_from([1, 64, 1_000_000]))
def test_periodic_chain_through_the_mid_size_path_is_bracketed(seed, layers, per_block,
                                                               options, cap) -> None:
    """The periodic LP solved by capped PDLP (then the simplex where it stopped short)
    still bounds the whole chain, and the plan is a plan of it."""
    problem = chain_problem(seed, layers, per_block, options, rest=2)
    if np.prod(problem.sizes, dtype=float) > 600_000:
        return
    _, best = exhaustive(problem)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lp, "PDLP_TRY_VARS", 0)
        patch.setattr(lp, "PDLP_TRY_ITERATIONS", cap)
        answer = solve(problem)
    assert_bracketed(problem, answer, best)


@pytest.mark.parametrize("seed", range(3))
def test_pdlp_through_the_proto_is_the_pdlp_of_the_binding(seed, monkeypatch):
    """Same parameters (the binding's default smoothing), same iterate: the proto route
    only skips the SciPy import."""
    monkeypatch.setattr(pdlp_proto, "SMOOTHING", 0.5)
    form = build(index_work(build_work(chain_like(seed))), flow=True)
    factor = lp_answer.objective_factor(form)
    run = pdlp_proto.run_pdlp(form, factor, None, eps=lp.PDLP_EPS,
                              max_iterations=lp.PDLP_MAX_ITERATIONS, threads=1,
                              shards=lp.PDLP_SHARDS)
    binding, primal, converged = lp._solve_pdlp(form, None, lp.PDLP_EPS)
    assert run.converged == converged
    assert run.x is not None and run.duals is not None
    assert lp_answer.dual_bound(form, run.duals, factor) == binding.bound
    assert np.array_equal(run.x, primal)


def test_mid_size_path_cut_short_by_time_still_bounds(monkeypatch):
    """A time limit that stops PDLP (and the simplex after it) may weaken the bound, never
    make it wrong."""
    monkeypatch.setattr(lp, "PDLP_TRY_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_EPS", 1e-12)
    for seed in range(6):
        problem = small_problem(seed)
        _, best = exhaustive(problem)
        form = build(index_work(build_work(problem)), flow=True)
        for answer in lp.lp_answers(form, 1e-3, gap=1e-11):
            assert answer.bound <= best + 1e-9
            assert answer.x is None or index_work(build_work(problem)).evaluate(
                answer.x) >= best - 1e-9
