"""A pipelined plan's step as a timeline: one process per stage, its F, B and W tasks per
micro-batch from the simulated schedule (:mod:`autoshard.planning.pipeline.simulate`), the
gaps between them the bubbles, then its gradient sync and optimizer step. Re-simulated from
plan.json's ``pipeline`` record, so it ends at the plan's step time."""

from __future__ import annotations

from typing import Any

from autoshard.planning.pipeline.schedules import Kind, parse_schedule
from autoshard.planning.pipeline.simulate import ChunkCost, simulate
from autoshard.planning.record import Plan
from autoshard.timeline.slices import Category, Slice, Timeline, Track

NAMES = {Kind.F: "forward", Kind.B: "backward", Kind.W: "weight grad"}


def pipeline_timeline(plan: Plan) -> Timeline:
    """See the module docstring; ``plan`` must have a ``pipeline`` record."""
    record: Any = plan.pipeline
    p = record["stages"]
    costs = record["chunk_costs"]
    chunks = [ChunkCost(f, b, w, record["p2p_send_s"] if k < len(costs) - 1 else 0.0)
              for k, (f, b, w) in enumerate(costs)]
    tails = [row["tail_s"] for row in record["stage"]]
    timeline = simulate(parse_schedule(record["schedule"]), chunks, record["micro_batches"], p,
                        tails)
    tracks, slices = [], []
    for s, spans in enumerate(timeline.spans):
        track = Track(process=f"stage {s}", thread="compute")
        tracks.append(track)
        for task, start, end in spans:
            slices.append(Slice(track=track, name=f"{NAMES[task.kind]} mb {task.micro}",
                                start_s=start, end_s=end, category=Category.COMPUTE,
                                args={"micro_batch": task.micro, "chunk": task.chunk}))
        finish = timeline.finish_s[s]
        slices.append(Slice(track=track, name="gradient sync + optimizer", start_s=finish,
                            end_s=finish + tails[s], category=Category.STEP))
    return Timeline(slices=tuple(slices), tracks=tuple(tracks), end_s=timeline.step_s,
                    metadata={"model": plan.model, "schedule": record["schedule"],
                              "stages": p, "micro_batches": record["micro_batches"],
                              "step_s": plan.objective.total_s})
