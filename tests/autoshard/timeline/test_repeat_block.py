"""A step of many micro-batches drawn with only the first few alike ones in full: the rest
are one repeat block per track, and the timeline must say what the whole drawing says."""

from __future__ import annotations

import functools
from collections import defaultdict

import pytest

import autoshard
from autoshard.planning.record import Plan
from autoshard.timeline import step_timeline
from autoshard.timeline.slices import Category, Timeline
from graphs import zoo

M = 8


@functools.cache
def planned(strategy: str, overlap: str) -> Plan:
    graph = zoo.build("gpt2", layers=2, batch=8, seq=128, hidden=256, heads=4, vocab=1024)
    mesh = "dp=2,fsdp=4" if strategy in ("fsdp", "zero2") else "dp=2,tp=4"
    return autoshard.plan(graph, mesh, training=True, micro_batches=M, overlap=overlap,
                          strategy=None if strategy == "auto" else strategy)


def busy(timeline: Timeline) -> dict[str, float]:
    """Seconds of work per track: drawn slices, and what each repeat block stands for."""
    total: dict[str, float] = defaultdict(float)
    for piece in timeline.slices:
        if piece.track.thread in ("step", "windows"):
            continue
        total[piece.track.thread] += (piece.args["busy_s"] if piece.category is Category.REPEAT
                                      else piece.seconds)
    return dict(total)


CASES = [("auto", "op"), ("fsdp", "op"), ("zero2", "layer"), ("megatron", "none")]


@pytest.mark.parametrize(("strategy", "overlap"), CASES)
@pytest.mark.parametrize("drawn", [1, 2, 5])
def test_the_repeat_block_stands_for_the_micro_batches_it_replaces(strategy, overlap,
                                                                   drawn) -> None:
    plan = planned(strategy, overlap)
    whole, short = step_timeline(plan, None), step_timeline(plan, drawn)
    assert short.end_s == pytest.approx(whole.end_s, rel=1e-12)
    assert short.end_s == pytest.approx(plan.objective.total_s, rel=1e-12)
    assert busy(short) == pytest.approx(busy(whole), rel=1e-9)
    assert [t.thread for t in short.tracks] == [t.thread for t in whole.tracks]
    steps = [s for s in short.slices if s.track.thread == "step"]
    drawn_marks = [s for s in steps if s.category is Category.STEP
                   and s.name.startswith("micro-batch ")]
    blocks = [s for s in steps if s.category is Category.REPEAT]
    assert len(blocks) <= 1 and len(short.slices) < len(whole.slices)
    # each micro-batch is drawn once or stands in the block: M in all
    covered = len(drawn_marks) + sum(b.args["count"] for b in blocks)
    assert covered == M and drawn_marks[0].name == "micro-batch 0"
    assert len([s for s in drawn_marks if s.args["micro_batch"] < drawn]) == drawn
    # the micro-batches drawn after the block are the whole drawing's, to the slice
    after = [s for s in drawn_marks if blocks and s.start_s >= blocks[0].end_s]
    whole_marks = {s.name: s for s in whole.slices if s.track.thread == "step"}
    for mark in after:
        twin = whole_marks[mark.name]
        assert mark.start_s == pytest.approx(twin.start_s, rel=1e-12)
        assert mark.seconds == pytest.approx(twin.seconds, rel=1e-9)


def test_all_draws_every_micro_batch() -> None:
    plan = planned("auto", "op")
    marks = [s for s in step_timeline(plan, None).slices if s.track.thread == "step"
             and s.name.startswith("micro-batch ")]
    assert len(marks) == M
    assert not [s for s in step_timeline(plan, None).slices if s.category is Category.REPEAT]
