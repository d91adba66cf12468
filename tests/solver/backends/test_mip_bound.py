"""HiGHS' MIP bound made a true bound (``solver.backends.mip_bound``).

Two oracles independent of the code under test: a feasible point of a stored MIP (checked
here row by row, so any bound above its objective is wrong), and exhaustive search over every
plan of small random chains whose costs span eight orders of magnitude, as seconds do.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import ChoiceProblem
from solver.backends.formulation import Formulation
from solver.backends.lp_answer import objective_factor
from solver.backends.mip_bound import SLACK_SHARE, mip_scale, partial_mip
from solver.exact import exhaustive
from solver.periodic_close import close_gap
from tests.solver.test_periodic_close import lp_and_duals, overlap_chain

DATA = Path(__file__).parents[2] / "data" / "solver" / "mixtral_partial_mip.npz"


def _stored() -> tuple[Formulation, np.ndarray, np.ndarray, float]:
    """The periodic LP's partial MIP of mixtral-8x7b dp=2,ep=4,tp=8 training (bench scale's
    job) after reduced-cost fixing against 0.261305105 s at 1,150 PDLP iterations, and the
    image in it of the plan costing 0.2613050699 s (see tests/data/README.md)."""
    data = np.load(DATA)
    form = Formulation(obj=data["obj"], constant=float(data["constant"]), num_x=0,
                       offsets=np.zeros(1, dtype=np.int64),
                       rows=data["rows"].astype(np.int64), cols=data["cols"].astype(np.int64),
                       coefs=data["coefs"], row_lo=data["row_lo"], row_hi=data["row_hi"],
                       memory_rows=(), edge_maps=())
    return form, data["integers"], data["point"], float(data["incumbent"])


def test_the_stored_point_is_a_point_of_the_mip() -> None:
    form, integers, point, _ = _stored()
    activity = np.bincount(form.rows, weights=form.coefs * point[form.cols],
                           minlength=form.row_lo.size)
    assert (activity >= form.row_lo - 1e-12).all() and (activity <= form.row_hi + 1e-12).all()
    assert ((point >= 0.0) & (point <= 1.0)).all()
    assert np.array_equal(point[integers], np.round(point[integers]))
    assert math.isclose(form.obj @ point + form.constant, 0.2613050699325368, rel_tol=1e-12)


def test_mixtral_partial_mip_bound_stays_below_a_point_of_it() -> None:
    """Scaled by ``objective_factor`` alone HiGHS called 0.2613053432 optimal here, 2.7e-7
    above the point; the bound must not exceed the point's objective."""
    form, integers, point, incumbent = _stored()
    value = float(form.obj @ point + form.constant)
    answer = partial_mip(form, integers, incumbent, 1e-6, None)
    assert answer.bound <= value
    assert answer.bound >= value * (1 - 1e-6)  # and it still proves the point within the gap
    assert answer.values is not None
    assert float(form.obj @ answer.values + form.constant) <= value * (1 + 1e-9)


@settings(max_examples=40, deadline=None)
@given(incumbent=st.floats(1e-6, 1e3), gap=st.sampled_from([0.0, 1e-9, 1e-6, 1e-3]),
       columns=st.integers(1, 2_000_000), top=st.floats(1e-9, 1e3))
def test_scale_is_a_power_of_two_and_the_term_a_small_part_of_the_gap(incumbent, gap, columns,
                                                                       top) -> None:
    form = Formulation(obj=np.array([top]), constant=0.0, num_x=0,
                       offsets=np.zeros(1, dtype=np.int64), rows=np.zeros(0, dtype=np.int64),
                       cols=np.zeros(0, dtype=np.int64), coefs=np.zeros(0),
                       row_lo=np.zeros(0), row_hi=np.zeros(0), memory_rows=(), edge_maps=())
    form = _with_columns(form, columns)
    factor, slack = mip_scale(form, incumbent, gap)
    assert factor >= objective_factor(form)
    assert math.log2(factor) == int(math.log2(factor))
    assert math.isclose(slack * factor, columns * 1e-7)
    if factor < objective_factor(form) * 2.0 ** 30:  # not capped
        assert slack <= max(gap * SLACK_SHARE, 1e-10) * incumbent * (1 + 1e-12)


def _with_columns(form: Formulation, columns: int) -> Formulation:
    obj = np.zeros(columns)
    obj[0] = form.obj[0]
    return Formulation(obj=obj, constant=0.0, num_x=0, offsets=form.offsets, rows=form.rows,
                       cols=form.cols, coefs=form.coefs, row_lo=form.row_lo,
                       row_hi=form.row_hi, memory_rows=(), edge_maps=())


def wide_range_chain(seed: int, layers: int) -> ChoiceProblem:
    """``overlap_chain`` with its costs in units of 1e-8 and one option of the rest node at
    1.0 that no cheap plan takes: after ``objective_factor`` every other cost sits around
    HiGHS' absolute tolerances, as small reshards do beside a model's largest cost."""
    base = overlap_chain(seed, layers, 2)
    costs = [c * 1e-8 for c in base.node_costs]
    costs[0] = np.append(costs[0], 1.0)
    edges = []
    for u, v, matrix in base.edges:
        matrix = matrix * 1e-8
        if u == 0:
            matrix = np.vstack([matrix, np.zeros((1, matrix.shape[1]))])
        if v == 0:
            matrix = np.hstack([matrix, np.zeros((matrix.shape[0], 1))])
        edges.append((u, v, matrix))
    return ChoiceProblem(node_costs=costs, edges=edges, blocks=base.blocks)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 5),
       gap=st.sampled_from([0.0, 1e-6]), over=st.sampled_from([0.0, 1e-6, 1e-2]))
def test_partial_mip_bound_never_exceeds_the_optimum_of_wide_range_costs(seed, layers, gap,
                                                                         over) -> None:
    problem = wide_range_chain(seed, layers)
    _, best = exhaustive(problem)
    _, agg, lp, answer = lp_and_duals(problem)
    closed = close_gap(lp, agg, answer.duals, best * (1 + over), None, gap)
    assert closed.bound <= best
    assert closed.bound >= answer.bound - 1e-7 * best  # a MIP of the LP, less the term
