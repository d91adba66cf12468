"""The pair node (a tensor read by two consumers, its shared reshard priced once) against a
brute force over every (producer, consumer, consumer) choice that prices the reshards its own
way: ``r(out, L1) + r(out, L2)``, once when ``L1 == L2`` (one reshard per target layout, as
XLA's ``ReshardCache`` reuses one per target sharding). Random small instances; the oracle never
sees the node's matrices."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest

import solver
from autoshard.planning.shared_pairs import pair_choice, pair_node, pair_options, row_classes
from solver.exact import exhaustive

LAYOUTS = ("A", "B", "C", "D")


@dataclass(frozen=True)
class _Reads:
    """A stand-in strategy: what an option reads on its one input."""

    inputs: tuple[str, ...]


def _instance(seed: int):
    rng = np.random.default_rng(seed)
    n_u, n_1, n_2 = (int(rng.integers(2, 6)) for _ in range(3))
    out = rng.choice(LAYOUTS[:3], size=n_u)  # producer options' output layouts (repeats)
    in1 = rng.choice(LAYOUTS, size=n_1)
    in2 = rng.choice(LAYOUTS, size=n_2)
    price = {(o, t): 0.0 if o == t else float(rng.integers(1, 9)) for o in LAYOUTS
             for t in LAYOUTS}
    if seed % 3 == 0:  # an unreachable move: that pair of layouts never happens
        price[("A", "D")] = np.inf
    m1 = np.array([[price[(o, t)] for t in in1] for o in out])
    m2 = np.array([[price[(o, t)] for t in in2] for o in out])
    costs = [rng.integers(0, 5, size=n).astype(float) for n in (n_u, n_1, n_2)]
    shared = tuple(layout for layout in LAYOUTS if layout in in1 and layout in in2)
    return out, in1, in2, price, m1, m2, costs, shared


def _truth(out, in1, in2, price, costs, a: int, b1: int, b2: int) -> float:
    moves = {(out[a], in1[b1]), (out[a], in2[b2])}  # one reshard per target layout
    return float(costs[0][a] + costs[1][b1] + costs[2][b2]) + sum(
        price[move] for move in moves if move[0] != move[1])


def _problem(m1, m2, in1, in2, costs, shared):
    targets = {1: {t: np.flatnonzero(in1 == t) for t in set(in1)},
               2: {t: np.flatnonzero(in2 == t) for t in set(in2)}}
    edges = [(0, 1, m1, ("t", 0, 0)), (0, 2, m2, ("t", 0, 0))]
    cost, extra = pair_node(0, (0, 1), shared, 3, [e[:3] for e in edges], edges,
                            lambda v, i: targets[v], {})
    problem = solver.ChoiceProblem(node_costs=[*costs, cost], edges=extra)
    return problem, edges, targets


@pytest.mark.parametrize("seed", range(40))
def test_the_pair_node_prices_every_plan_as_the_brute_force_does(seed: int) -> None:
    out, in1, in2, price, m1, m2, costs, shared = _instance(seed)
    problem, edges, targets = _problem(m1, m2, in1, in2, costs, shared)
    strategies = [(), tuple(_Reads((t,)) for t in in1), tuple(_Reads((t,)) for t in in2)]
    best = np.inf
    for a, b1, b2 in itertools.product(*(range(c.size) for c in costs)):
        truth = _truth(out, in1, in2, price, costs, a, b1, b2)
        best = min(best, truth)
        # the node's option for these op choices costs the truth; no option costs less
        pick = pair_choice(0, (0, 1), shared, (a, b1, b2), strategies, edges,
                           [e[:3] for e in edges], lambda v, i: targets[v])
        assert problem.evaluate((a, b1, b2, pick)) == pytest.approx(truth, abs=1e-12) \
            if np.isfinite(truth) else not np.isfinite(problem.evaluate((a, b1, b2, pick)))
        node = problem.node_costs[3].size
        cheapest = min(problem.evaluate((a, b1, b2, c)) for c in range(node))
        assert cheapest == pytest.approx(truth, abs=1e-12) if np.isfinite(truth) \
            else not np.isfinite(cheapest)
    answer = solver.solve(problem)
    assert answer.optimal and answer.objective == pytest.approx(best, abs=1e-12)
    _, value = exhaustive(problem)
    assert value == pytest.approx(best, abs=1e-12)


def test_producer_options_with_equal_prices_share_one_class() -> None:
    m1 = np.array([[0.0, 1.0], [2.0, 3.0], [0.0, 1.0]])
    m2 = np.array([[5.0], [6.0], [5.0]])
    assert row_classes(m1, m2).tolist() == [0, 1, 0]
    assert row_classes(m1, np.array([[5.0], [6.0], [7.0]])).tolist() == [0, 1, 2]


def test_a_class_keeps_no_option_for_a_layout_it_reaches_free_or_never() -> None:
    # producer options out A, B; both readers read A or B; A -> A and B -> B are free,
    # A -> B costs 3, B -> A cannot happen: each class keeps only its one costly layout
    layouts = ("A", "B")
    m = np.array([[0.0, 3.0], [np.inf, 0.0]])
    targets = {t: np.array([k]) for k, t in enumerate(layouts)}
    classes, rows, kept = pair_options(m, m, layouts, targets, targets)
    assert classes.tolist() == [0, 1] and rows.tolist() == [0, 1]
    assert kept.tolist() == [[False, True], [False, False]]
    edges = [(0, 1, m, ("t", 0, 0)), (0, 2, m, ("t", 0, 0))]
    cost, _ = pair_node(0, (0, 1), layouts, 3, [e[:3] for e in edges], edges,
                        lambda v, i: targets, {})
    assert cost.tolist() == [3.0, 0.0, 0.0]  # (A, B), (A, other), (B, other)


def _pairwise_residual(r: np.ndarray) -> float:
    """The least-squares residual of ``g(a, l1, l2) = [l1 == l2 != other] * r[a, l1]`` (the
    saving of one shared reshard; ``l`` in ``0..K``, ``K`` meaning other) fitted by a sum of
    functions of (a, l1), (a, l2) and (l1, l2): zero exactly when such a sum represents it."""
    n_a, k = r.shape
    values = k + 1
    rows, target = [], []
    for a, l1, l2 in itertools.product(range(n_a), range(values), range(values)):
        row = np.zeros(n_a * values * 2 + values * values)
        row[a * values + l1] = 1.0
        row[n_a * values + a * values + l2] = 1.0
        row[2 * n_a * values + l1 * values + l2] = 1.0
        rows.append(row)
        target.append(r[a, l1] if l1 == l2 < k else 0.0)
    design, goal = np.array(rows), np.array(target)
    fit, *_ = np.linalg.lstsq(design, goal, rcond=None)
    return float(np.abs(design @ fit - goal).max())


@pytest.mark.parametrize("layouts", [1, 2, 4])
def test_the_saving_of_a_shared_reshard_is_pairwise_only_when_its_price_ignores_the_source(
        layouts: int) -> None:
    """The module docstring's argument for the auxiliary node, checked numerically: a
    reshard price that depends on the producer's option makes the saving a three-way term;
    one that does not leaves it pairwise (a correction on the readers' edge alone)."""
    rng = np.random.default_rng(layouts)
    depends = rng.integers(1, 9, size=(3, layouts)).astype(float)
    assert _pairwise_residual(depends) > 1e-3
    same = np.repeat(depends[:1], 3, axis=0)  # every producer option pays the same
    assert _pairwise_residual(same) < 1e-9
