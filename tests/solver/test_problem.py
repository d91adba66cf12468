"""Checked liveness rows are checked once, and only for the sizes they were checked against."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from solver import ChoiceProblem
from solver.errors import InvalidProblemError


def _problem() -> ChoiceProblem:
    return ChoiceProblem(node_costs=[[1.0, 2.0], [3.0, 1.0]],
                         liveness=[[(0, [1.0, 2.0]), (1, [0.0, 1.0])], [(1, [4.0, 0.0])]],
                         memory_limit=3.0)


def test_a_problem_built_from_checked_rows_shares_them() -> None:
    p = _problem()
    q = dataclasses.replace(p, memory_limit=2.0)
    assert q.liveness is p.liveness
    assert q.peak_memory((1, 0)) == 4.0 and q.peak_memory((0, 1)) == 2.0


def test_checked_rows_are_checked_again_against_other_sizes() -> None:
    p = _problem()
    with pytest.raises(InvalidProblemError, match="must hold 3 finite values"):
        ChoiceProblem(node_costs=[[1.0, 2.0, 3.0], [1.0, 1.0]], liveness=p.liveness)
    with pytest.raises(InvalidProblemError, match="refers to node 1"):
        ChoiceProblem(node_costs=[[1.0, 2.0]], liveness=p.liveness)


def test_rows_survive_a_pickle() -> None:
    p = pickle.loads(pickle.dumps(_problem()))
    assert p.peak_memory((1, 0)) == 4.0
    assert ChoiceProblem(node_costs=p.node_costs, liveness=p.liveness).peak_memory((0, 1)) == 2.0


def test_a_pair_shared_by_rows_is_checked_and_a_bad_term_beside_it_is_not_missed() -> None:
    import numpy as np

    vector = np.array([1.0, 2.0])
    vector.setflags(write=False)
    shared = (0, vector)
    good = ChoiceProblem(node_costs=[[1.0, 2.0], [3.0, 1.0]],
                         liveness=[[shared], [shared, (1, [1.0, 1.0])], [shared]],
                         memory_limit=3.0)
    assert good.liveness[0][0] is shared and good.liveness[2][0] is shared
    assert good.peak_memory((1, 0)) == 3.0
    with pytest.raises(InvalidProblemError, match="must hold 2 finite values"):
        ChoiceProblem(node_costs=[[1.0, 2.0], [3.0, 1.0]],
                      liveness=[[shared], [shared, (1, [1.0, np.inf])], [shared]])
    with pytest.raises(InvalidProblemError, match="refers to node 2"):
        ChoiceProblem(node_costs=[[1.0, 2.0], [3.0, 1.0]],
                      liveness=[[shared], [shared, (2, [1.0, 1.0])]])
