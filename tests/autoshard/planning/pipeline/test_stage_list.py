"""``--stages`` against the schedules: the list's length says which schedules it fits.

Oracle: a list is one layer count per chunk, so ``p`` entries fit GPipe, 1F1B and ZB-H1 and
``p·v`` entries the interleaved schedule; ``auto`` keeps exactly the candidates it would try
without a list that also fit it.
"""

from __future__ import annotations

import re

import pytest

from autoshard.errors import PipelineError
from autoshard.planning.pipeline.schedules import Schedule
from autoshard.planning.pipeline.search import Setting, candidates, fitting_stages

ALL = [Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.ZB_H1, Schedule.INTERLEAVED]


def setting(layers: tuple[int, ...] | None, p: int = 2, m: int = 8, v: int = 2) -> Setting:
    return Setting(stages=p, micro_batches=m, send_s=0.0, limit_bytes=1.0,
                   transient_bytes=0.0, virtual=v, layers=layers)


@pytest.mark.parametrize(("layers", "expected"), [
    (None, ALL),
    ((1, 3), ALL[:3]),
    ((1, 1, 1, 1), [Schedule.INTERLEAVED]),
])
def test_auto_keeps_the_candidates_the_list_fits(layers, expected) -> None:
    assert candidates(None, setting(layers), 4) == expected


def test_one_chunk_per_stage_fits_every_schedule() -> None:
    assert candidates(None, setting((2, 2), v=1), 4) == ALL


def test_the_readme_list_runs_under_auto() -> None:
    """README: llama3-70b (80 layers), dp=4,pp=4,tp=4, 64 micro-batches, --stages 20,20,20,20
    under auto runs the non-interleaved schedules."""
    assert fitting_stages(None, (20, 20, 20, 20), 80, 4, 2, 64) is None
    assert candidates(None, setting((20, 20, 20, 20), p=4, m=64), 80) == ALL[:3]


def test_a_per_chunk_list_under_auto_is_the_interleaved_schedule() -> None:
    assert fitting_stages(None, (1, 1, 1, 1), 4, 2, 2, 8) is Schedule.INTERLEAVED


@pytest.mark.parametrize(("schedule", "layers", "needle"), [
    (None, (1, 2, 1), "give 2 (one per pp stage) or 4 (pp × --virtual-stages"),
    (Schedule.GPIPE, (1, 1, 1, 1), "the gpipe schedule needs 2 (one per pp stage); 4 entries "
                                   "fit --schedule interleaved, or auto"),
    (Schedule.INTERLEAVED, (1, 3), "the interleaved schedule needs 4"),
    (None, (2, 3), "sums to 5 layers, the model has 4"),
    (None, (0, 4), "at least one layer"),
])
def test_a_list_that_does_not_fit_is_one_error(schedule, layers, needle) -> None:
    with pytest.raises(PipelineError, match=re.escape(needle)):
        candidates(schedule, setting(layers), 4)


def test_too_few_micro_batches_for_the_only_fitting_schedule() -> None:
    with pytest.raises(PipelineError, match="multiple of the pipeline stages"):
        fitting_stages(None, (1, 1, 1, 1), 4, 2, 2, 3)
