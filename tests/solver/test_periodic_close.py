"""The periodic LP's partial MIP (``solver.periodic_close``) against exhaustive search.

Chains here price their "collectives" the way the op overlap objective does: an edge costs
``max(0, transfer − compute of the op at one end)``, which is what made the periodic LP of
llama3-70b fractional. ``solver.exact`` enumerates every assignment of the *whole* problem
and shares no code with the aggregation or the MIP, so the checks are independent: the MIP's
bound never exceeds the true optimum, whatever incumbent its reduced-cost fixing is given,
and a plan called optimal costs exactly the true optimum.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver import ChoiceProblem, solve
from solver.backends.lp import solve_lp
from solver.exact import exhaustive
from solver.periodic import aggregate, expand, find_chain, periodic_lp
from solver.periodic_close import close_gap, column_weights, fixed_options, integral_mask
from tests.support.bracket import assert_bracketed


def overlap_chain(seed: int, layers: int, options: int) -> ChoiceProblem:
    """A rest node (an embedding table) and ``layers`` identical blocks of a parameter, the op
    it feeds and the op's gradient. Gather edge param → op: ``max(0, R − compute of the op)``
    (the op hides it); sync edge gradient → param: ``max(0, R − compute of the gradient op)``;
    the activation runs op → next block's op; the table feeds block 0's op and reads the last
    gradient (a cycle through the rest, as the embedding closes one in a model)."""
    rng = np.random.default_rng(seed)

    def transfer() -> np.ndarray:
        return rng.integers(0, 9, size=(options, options)).astype(float)

    compute = rng.integers(0, 6, size=options).astype(float)
    grad_compute = rng.integers(0, 6, size=options).astype(float)
    gather = np.maximum(transfer() - compute[None, :], 0.0)
    sync = np.maximum(transfer() - grad_compute[:, None], 0.0)
    param_cost = rng.integers(0, 4, size=options).astype(float)
    activation = transfer()
    costs = [rng.integers(0, 9, size=options).astype(float)]
    edges, blocks = [], []
    for k in range(layers):
        p, o, g = len(costs), len(costs) + 1, len(costs) + 2
        costs += [param_cost, compute, grad_compute]
        blocks.append((p, o, g))
        edges += [(p, o, gather), (g, p, sync), (o, g, np.diag(np.full(options, -1.0)) + 1)]
        if k:
            edges.append((blocks[k - 1][1], o, activation))
    edges.append((0, blocks[0][1], np.maximum(transfer() - compute[None, :], 0.0)))
    edges.append((blocks[-1][2], 0, np.maximum(transfer() - grad_compute[:, None], 0.0)))
    return ChoiceProblem(node_costs=costs, edges=edges, blocks=tuple(blocks))


def _small(problem: ChoiceProblem) -> bool:
    return float(np.prod(problem.sizes, dtype=float)) <= 200_000


def lp_and_duals(problem: ChoiceProblem):
    """The chain, its aggregate, its periodic LP and the LP's answer (with duals)."""
    chain = find_chain(problem)
    assert chain is not None
    agg = aggregate(problem, chain)
    lp = periodic_lp(agg)
    answer = solve_lp(lp.form, None)
    assert answer.duals is not None
    return chain, agg, lp, answer


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 6), options=st.integers(2, 3),
       slack=st.sampled_from([0.0, 0.5, 3.0]))
def test_partial_mip_bound_never_exceeds_the_optimum(seed, layers, options, slack) -> None:
    problem = overlap_chain(seed, layers, options)
    if not _small(problem):
        return
    _, best = exhaustive(problem)
    chain, agg, lp, answer = lp_and_duals(problem)
    closed = close_gap(lp, agg, answer.duals, best + slack, None, 0.0)
    assert closed.bound <= best + 1e-9
    assert closed.bound >= answer.bound - 1e-7 * max(1.0, abs(best))  # a MIP of the LP
    if closed.x is not None:  # its point is a plan of the whole problem
        plan = expand(chain, agg, lp.lift(closed.x), problem.num_nodes)
        assert problem.evaluate(plan) >= best - 1e-9


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 6), options=st.integers(2, 3))
def test_solve_is_bracketed_by_the_true_optimum(seed, layers, options) -> None:
    problem = overlap_chain(seed, layers, options)
    if not _small(problem):
        return
    _, best = exhaustive(problem)
    answer = solve(problem)
    assert_bracketed(problem, answer, best)


def test_fixing_keeps_every_option_of_a_cheaper_plan() -> None:
    """Options of the optimum survive any incumbent above it: fixing only removes what
    every plan cheaper than the incumbent avoids."""
    for seed in range(10):
        problem = overlap_chain(seed, 4, 3)
        choices, best = exhaustive(problem)
        chain, agg, lp, answer = lp_and_duals(problem)
        upper, _ = fixed_options(lp, agg, answer.duals, best + 1e-6)
        integral, _ = integral_mask(lp, agg)
        mapped = _mapped_choices(chain, agg, lp, choices)
        for node, option in mapped.items():
            assert upper[lp.form.offsets[node] + option] == 1.0, (seed, node)
        assert integral.any()


def _mapped_choices(chain, agg, lp, choices) -> dict[int, int]:
    """LP node → option of the exhaustive optimum, for single-member LP nodes of the rest
    and the distinct blocks (where the optimum's image is 0/1)."""
    whole_of = dict(zip(agg.rest, chain.rest, strict=True))
    for k in (0, len(chain.blocks) - 1):
        whole_of.update(zip(agg.block_nodes[k], chain.blocks[k], strict=True))
    out = {}
    for node, members in enumerate(lp.members):
        if len(members) == 1 and members[0] in whole_of:
            original = choices[whole_of[members[0]]]
            table = lp.tables[node][:, 0]
            hits = np.flatnonzero(table == original)
            if hits.size:
                out[node] = int(hits[0])
    return out


def frustrated_chain(layers: int) -> ChoiceProblem:
    """Three rest nodes and block 0's node, all four joined by "differ" edges (1 when both ends
    take the same of two options): any plan splits them two and two at best, so the optimum
    is 2, while the LP sets all four to 1/2 and costs 0 (every node has degree 3 or more, so
    no exact reduction removes the cycle). The blocks chain through free edges."""
    differ = np.array([[1.0, 0.0], [0.0, 1.0]])
    free = np.zeros((2, 2))
    costs = [np.zeros(2) for _ in range(3 + layers)]
    first = 3
    clique = (0, 1, 2, first)
    edges = [(a, b, differ) for i, a in enumerate(clique) for b in clique[i + 1:]]
    edges += [(first + k - 1, first + k, free) for k in range(1, layers)]
    blocks = tuple((first + k,) for k in range(layers))
    return ChoiceProblem(node_costs=costs, edges=edges, blocks=blocks)


@pytest.mark.parametrize("layers", [4, 9])
def test_partial_mip_closes_a_frustrated_cycle_through_the_rest(layers) -> None:
    problem = frustrated_chain(layers)
    _, best = exhaustive(problem)
    assert best == 2.0  # the closed form above, checked by enumeration
    _, agg, lp, answer = lp_and_duals(problem)
    assert answer.bound == pytest.approx(0.0, abs=1e-9)  # the LP's half-half point
    closed = close_gap(lp, agg, answer.duals, 6.0, None, 0.0)
    assert closed.bound == pytest.approx(2.0, abs=1e-9)
    solved = solve(problem)
    assert solved.optimal and solved.objective == 2.0
    # HiGHS' bound less its tolerance term (``solver.backends.mip_bound``): within the gap
    assert 2.0 * (1 - 1e-6) <= solved.bound <= 2.0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(4, 6), options=st.integers(2, 3),
       noise=st.sampled_from([1e-3, 1e-1, 1.0]))
def test_fixing_with_inexact_duals_keeps_a_true_bound(seed, layers, options, noise) -> None:
    """PDLP's duals are approximate: fixing every variable (edge variables and flow arcs
    too, weighted by their image in a plan) against them must still leave the partial MIP a
    bound of the whole problem, whatever the duals."""
    problem = overlap_chain(seed, layers, options)
    if not _small(problem):
        return
    _, best = exhaustive(problem)
    _, agg, lp, answer = lp_and_duals(problem)
    rng = np.random.default_rng(seed)
    duals = answer.duals * (1 + noise * rng.standard_normal(answer.duals.size))
    for incumbent in (best, best + 1e-6, best * 1.01 + 1e-3):
        closed = close_gap(lp, agg, duals, incumbent, None, 0.0)
        assert closed.bound <= best + 1e-9
    weight, integral = column_weights(lp, agg)
    if lp.form.num_vars > lp.form.num_x:  # (the reductions may leave no edge: seed 9701)
        assert (weight[lp.form.num_x:] > 0).any()  # edge variables are fixable too
    assert integral.any()


def test_fixing_keeps_the_image_of_every_cheaper_plan() -> None:
    """Every plan cheaper than the incumbent, enumerated: its image (0/1 on the rest and the
    distinct blocks, the share of tied blocks taking each option on the representative) is
    never on a fixed option, whether the duals are exact or perturbed."""
    checked = 0
    for seed in range(6):
        problem = overlap_chain(seed, 4, 2)
        assert np.prod(problem.sizes, dtype=float) <= 10_000
        _, best = exhaustive(problem)
        chain, agg, lp, answer = lp_and_duals(problem)
        incumbent = best * 1.05 + 1e-3
        cheaper = [plan for plan in itertools.product(*(range(size) for size in problem.sizes))
                   if problem.evaluate(plan) < incumbent]
        rng = np.random.default_rng(seed)
        for duals in (answer.duals, answer.duals * (1 + 0.1 * rng.standard_normal(
                answer.duals.size))):
            upper, _ = fixed_options(lp, agg, duals, incumbent)
            for plan in cheaper:
                for node, option in _image(chain, agg, lp, plan):
                    assert upper[lp.form.offsets[node] + option] == 1.0, (seed, plan)
                checked += 1
    assert checked > 0


def _image(chain, agg, lp, plan):
    """(LP node, option) pairs a plan's image puts weight on, for single-member LP nodes of
    the rest, the distinct blocks and the tied representative."""
    whole_of = {a: [i] for a, i in zip(agg.rest, chain.rest, strict=True)}
    for k, nodes in enumerate(agg.block_nodes):
        if k not in agg.tied:
            whole_of.update({a: [i] for a, i in zip(nodes, chain.blocks[k], strict=True)})
    for r, a in enumerate(agg.block_nodes[agg.tied[0]]):
        whole_of[a] = [chain.blocks[k][r] for k in agg.tied]
    for node, members in enumerate(lp.members):
        if len(members) == 1 and members[0] in whole_of:
            table = lp.tables[node][:, 0]
            for original in {plan[i] for i in whole_of[members[0]]}:
                hits = np.flatnonzero(table == original)
                if hits.size:
                    yield node, int(hits[0])
