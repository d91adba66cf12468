"""The LP bound computed from duals: valid for any multipliers, tight at the optimal ones.

Independent truths: exhaustive search of the whole problem (the bound may never exceed its
optimum) and the dual simplex's own optimum (PDLP's bound, computed from its inexact duals,
must match it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from solver import ChoiceProblem, solve
from solver.backends import lp, lp_answer, simplex
from solver.backends.formulation import build, decode_weighted
from solver.compact import build_work, index_work
from solver.exact import exhaustive
from tests.support.bracket import assert_bracketed


def small_problem(seed: int) -> ChoiceProblem:
    rng = np.random.default_rng(seed)
    costs = [rng.integers(0, 9, size=3).astype(float) for _ in range(6)]
    edges = [(a, b, rng.integers(0, 9, size=(3, 3)).astype(float))
             for a in range(6) for b in range(a + 1, 6) if rng.random() < 0.5]
    return ChoiceProblem(node_costs=costs, edges=edges)


@pytest.mark.parametrize("seed", range(6))
def test_any_multipliers_give_a_bound_below_the_optimum(seed):
    problem = small_problem(seed)
    _, best = exhaustive(problem)
    form = build(index_work(build_work(problem)))
    rng = np.random.default_rng(seed)
    for scale in (0.0, 1.0, 10.0):
        duals = rng.normal(scale=scale, size=form.row_lo.size)
        assert lp_answer.dual_bound(form, duals, 1.0) <= best + 1e-9


@pytest.mark.parametrize("seed", range(8))
def test_glop_and_highs_simplex_agree_and_bound_the_optimum(seed, monkeypatch):
    """Glop's bound is ``dual_bound`` of its duals, not its own report: it must equal HiGHS'
    LP optimum (to its tolerances) and stay below the exhaustive optimum."""
    problem = small_problem(seed) if seed < 4 else chain_like(seed)
    form = build(index_work(build_work(problem)), flow=True)
    monkeypatch.setattr(simplex, "SIMPLEX", "HIGHS")
    highs = lp.solve_lp(form, None)
    monkeypatch.setattr(simplex, "SIMPLEX", "GLOP")
    solvers = []
    real = simplex.run_mathopt
    monkeypatch.setattr(simplex, "run_mathopt",
                        lambda *a, **k: solvers.append(a[-1]) or real(*a, **k))
    glop = lp.solve_lp(form, None)
    assert solvers == ["GLOP"]
    assert glop.bound == pytest.approx(highs.bound, rel=1e-8, abs=1e-12)
    assert glop.x is not None and form.num_vars < lp.PDLP_MIN_VARS
    if seed < 4:
        _, best = exhaustive(problem)
        assert glop.bound <= best + 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_pdlp_bound_matches_dual_simplex(seed, monkeypatch):
    problem = small_problem(seed)
    ix = index_work(build_work(problem))
    form = build(ix, flow=True)
    simplex_bound = lp.solve_lp(form, None).bound
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    pdlp = lp.solve_lp(form, None)
    x, pdlp_bound = pdlp.x, pdlp.bound
    assert math.isfinite(simplex_bound)
    assert pdlp_bound == pytest.approx(simplex_bound, rel=1e-5, abs=1e-5)
    assert pdlp_bound <= simplex_bound + 1e-9 * max(1.0, abs(simplex_bound))
    assert x is not None and ix.evaluate(x) >= pdlp_bound - 1e-9


@pytest.mark.parametrize("seed", range(6))
def test_solve_through_pdlp_is_exact(seed, monkeypatch):
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    problem = small_problem(seed)
    _, best = exhaustive(problem)
    answer = solve(problem, backend="highs")
    assert_bracketed(problem, answer, best)


def test_pdlp_cut_short_still_gives_a_valid_bound(monkeypatch):
    """A time limit that stops PDLP early may weaken the bound, never make it wrong."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_EPS", 1e-12)
    for seed in range(6):
        problem = small_problem(seed)
        _, best = exhaustive(problem)
        form = build(index_work(build_work(problem)), flow=True)
        bound = lp.solve_lp(form, 1e-3, gap=1e-11).bound  # PDLP at 1e-12: cut short
        assert bound <= best + 1e-9


@pytest.mark.parametrize("seed", range(4))
def test_pdlp_past_its_iteration_cap_hands_over_to_the_barrier(seed, monkeypatch):
    """Capped after one iteration PDLP has not converged: the barrier (with crossover) must
    still deliver the LP optimum (the dual simplex's), and a plan."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_MAX_ITERATIONS", 1)
    problem = small_problem(seed)
    ix = index_work(build_work(problem))
    form = build(ix, flow=True)
    solve_highs_lp = simplex.solve_highs_lp
    simplex_bound = solve_highs_lp(form, None, barrier=False).bound
    runs = []
    monkeypatch.setattr(simplex, "solve_highs_lp",
                        lambda *a, **k: runs.append(k) or solve_highs_lp(*a, **k))
    answer = lp.solve_lp(form, None)
    x, bound = answer.x, answer.bound
    assert runs == [{"barrier": True}]
    assert bound == pytest.approx(simplex_bound, rel=1e-6, abs=1e-6)
    assert bound <= simplex_bound + 1e-9 * max(1.0, abs(simplex_bound))
    assert x is not None and ix.evaluate(x) >= bound - 1e-9


def test_pdlp_answer_does_not_depend_on_its_threads(monkeypatch):
    """Sweep workers run PDLP on fewer threads than a lone plan: same input, same answer."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "_threads", lp._threads)  # restored after the test
    monkeypatch.setattr(lp, "_usable_cores", lambda: 2)
    problem = chain_like(seed=3)
    form = build(index_work(build_work(problem)), flow=True)
    answers = []
    for processes in (1, 2):  # 2 threads, then 1
        lp.share_cores(processes)
        answers.append(lp._solve_pdlp(form, None, lp.PDLP_EPS))
    (first, first_x, _), (second, second_x, _) = answers
    assert lp._threads == 1 and np.array_equal(first.x, second.x)
    assert np.array_equal(first_x, second_x)
    assert first.bound == second.bound and np.array_equal(first.weight, second.weight)


def chain_like(seed: int) -> ChoiceProblem:
    rng = np.random.default_rng(seed)
    costs = [rng.random(12) for _ in range(30)]
    edges = [(a, a + 1, rng.random((12, 12))) for a in range(29)]
    return ChoiceProblem(node_costs=costs, edges=edges)


def _simplex_optimum(form) -> tuple[float, np.ndarray]:
    """The LP optimum and its x, by HiGHS' dual simplex: the independent reference."""
    run = simplex.run_highs(form, lp_answer.objective_factor(form), None, barrier=False)
    assert run.x is not None
    return float(form.obj @ run.x + form.constant), run.x


@pytest.mark.parametrize("seed", range(6))
def test_support_of_an_optimal_x_gives_the_lp_optimum(seed):
    """Restricted to the columns an optimal x uses, the LP keeps its optimum, and the vertex
    found there decodes to a plan that costs at least the LP optimum."""
    problem = chain_like(seed)
    ix = index_work(build_work(problem))
    form = build(ix, flow=True)
    optimum, x = _simplex_optimum(form)
    choice, _ = decode_weighted(form, x)
    answer, value = simplex.solve_on_support(form, x, choice, None)
    assert value == pytest.approx(optimum, rel=1e-9, abs=1e-12)
    assert answer.bound <= optimum + 1e-9 * max(1.0, abs(optimum))
    assert answer.x is not None and ix.evaluate(answer.x) >= optimum - 1e-9


def _watch_support(seed: int, monkeypatch) -> tuple:
    """``(indexed, form, LP optimum, support calls)`` of a random chain, with every
    ``simplex.solve_on_support`` answer recorded."""
    ix = index_work(build_work(chain_like(seed)))
    form = build(ix, flow=True)
    optimum, _ = _simplex_optimum(form)
    supports: list = []
    real = simplex.solve_on_support
    monkeypatch.setattr(simplex, "solve_on_support",
                        lambda *a: supports.append(real(*a)) or supports[-1])
    return ix, form, optimum, supports


@pytest.mark.parametrize("gap", [1e-3, 0.0])
@pytest.mark.parametrize("seed", range(4))
def test_capped_pdlp_answers_support_vertex_first_then_barrier(seed, gap, monkeypatch):
    """Past PDLP's cap the first answer is the support LP's vertex with PDLP's bound (below
    the LP optimum; the vertex's value above it), the second the barrier's, at the optimum,
    unless the support LP's value already met its bound within the gap: then the LP is
    solved to the gap (its bound within it of the simplex optimum) and the barrier is not
    run."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_MAX_ITERATIONS", 64)
    ix, form, optimum, supports = _watch_support(seed, monkeypatch)
    answers = list(lp.lp_answers(form, None, gap=gap))
    (support, value), = supports
    tolerance = 1e-9 * max(1.0, abs(optimum))
    assert value >= optimum - tolerance
    first = answers[0]
    assert first.bound <= optimum + tolerance
    assert support.x is not None and np.array_equal(first.x, support.x)
    assert ix.evaluate(first.x) >= optimum - tolerance
    if value - first.bound <= gap * abs(value):
        assert len(answers) == 1
        assert first.bound >= optimum - gap * abs(optimum) - tolerance
        return
    assert len(answers) == 2
    second = answers[1]
    assert second.bound == pytest.approx(optimum, rel=1e-6, abs=1e-6)
    assert first.bound <= second.bound <= optimum + tolerance


def test_a_provisional_caller_gets_no_barrier_past_the_cap(monkeypatch):
    """``barrier=False`` (``solve(provisional=True)``): past PDLP's cap the answers end with
    the support LP's vertex and PDLP's bound, still below the LP optimum, where the same LP
    with the barrier gets a second answer (on some of these LPs the support LP closes the gap
    and the barrier does not run either way)."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(lp, "PDLP_MAX_ITERATIONS", 64)
    barrier_would_run = 0
    for seed in range(4):
        with monkeypatch.context() as patched:
            ix, form, optimum, _ = _watch_support(seed, patched)
            full = list(lp.lp_answers(form, None, gap=0.0))
            patched.setattr(simplex, "solve_highs_lp",
                            lambda *a, **k: pytest.fail("barrier ran"))
            provisional = list(lp.lp_answers(form, None, gap=0.0, barrier=False))
        tolerance = 1e-9 * max(1.0, abs(optimum))
        barrier_would_run += len(full) == 2
        assert len(provisional) == 1
        assert np.array_equal(provisional[0].x, full[0].x)
        assert provisional[0].bound == full[0].bound <= optimum + tolerance
        assert ix.evaluate(provisional[0].x) >= optimum - tolerance
    assert barrier_would_run  # the cap is hit and the support LP leaves a gap somewhere


@pytest.mark.parametrize("seed", range(4))
def test_converged_pdlp_answers_itself_then_the_support_vertex(seed, monkeypatch):
    """PDLP converged: its own answer first (saying the next is cheap), then the simplex
    vertex on its support, whose value is the LP optimum; never the barrier."""
    monkeypatch.setattr(lp, "PDLP_MIN_VARS", 0)
    monkeypatch.setattr(simplex, "solve_highs_lp", lambda *a, **k: pytest.fail("barrier ran"))
    _, form, optimum, supports = _watch_support(seed, monkeypatch)
    first, second = lp.lp_answers(form, None, gap=1e-6)
    (support, value), = supports
    tolerance = 1e-6 * max(1.0, abs(optimum))
    assert first.next_is_cheap and not second.next_is_cheap
    assert value == pytest.approx(optimum, rel=1e-6, abs=1e-9)
    assert np.array_equal(second.x, support.x)
    assert first.bound <= second.bound <= optimum + tolerance
    assert second.bound >= optimum - tolerance
