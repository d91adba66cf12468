"""The planner's collector thresholds: raised inside, restored after, never lowered."""

from __future__ import annotations

import gc

import pytest

from autoshard.planning.collector import THRESHOLDS, fewer_collections


@pytest.fixture()
def thresholds():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_raised_inside_and_restored_after_an_error(thresholds) -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), fewer_collections():
        assert gc.get_threshold() == THRESHOLDS
        raise RuntimeError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_never_lower_than_the_callers(thresholds) -> None:
    gc.set_threshold(300_000, 5, 40)
    with fewer_collections():
        assert gc.get_threshold() == (300_000, 20, 40)
    assert gc.get_threshold() == (300_000, 5, 40)


def test_collection_off_stays_off(thresholds) -> None:
    gc.set_threshold(0, 10, 10)
    with fewer_collections():
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold() == (0, 10, 10)


def test_plan_restores_the_thresholds(thresholds) -> None:
    from autoshard import Mesh, plan
    from graphs import zoo

    gc.set_threshold(700, 10, 10)
    plan(zoo.build("gpt2", layers=1), Mesh.parse("dp=2"), training=True)
    assert gc.get_threshold() == (700, 10, 10)
