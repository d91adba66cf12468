"""What a pipelined plan records: ``plan.json``'s ``pipeline`` section and its objective."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from autoshard.planning.pipeline.layer_costs import LayerCosts, PartCost
from autoshard.planning.pipeline.search import Choice, Setting
from autoshard.planning.pipeline.simulate import peak_deferred
from autoshard.planning.pipeline.stage_rows import boundary_counterpart
from autoshard.planning.record import Objective, Plan
from autoshard.sharding.mesh import Mesh

NOTES = (
    "pipelined: the tensors, ops and reshards are the intra-stage plan's, for a stage model "
    "with as many layers as the largest stage; every stage uses these layouts; costs.csv and "
    "reshards.csv copy them onto the stages that run them (pipeline.charges)",
    "pipelined: objective.total_s is the simulated step (schedule timeline with bubbles, "
    "point-to-point transfers on the pp link and per-stage gradient sync and optimizer "
    "tails); compute_s, comm_s, hidden_s and concurrent_s are those of the stage that "
    "finishes last (pipeline.critical_stage), bubble_s its idle time (bubble and transfer "
    "waits), so total_s = compute_s + comm_s - hidden_s - concurrent_s + bubble_s; "
    "lower_bound_s is the busiest stage's work (no bubble)",
    "pipelined: a stage boundary pays the reshards of a layer boundary of the stage model "
    "(boundary_reshard: the first stage boundary's, per micro-batch: the activation and its "
    "saved copy re-laid out on the receiving stage, the gradient on the sending one) besides "
    "the point-to-point transfer; each layer is priced as one stage-model layer (the first "
    "as its first, the last as its last, the others as its second)",
)


def stage_devices(mesh: Mesh, stage: int) -> list[int]:
    """Device ids of one pipeline stage (the mesh positions whose pp coordinate is it)."""
    grid = np.asarray(mesh.device_ids).reshape(mesh.axis_sizes)
    return [int(d) for d in np.take(grid, stage, axis=mesh.axis_index("pp")).ravel()]


def pipeline_record(mesh: Mesh, choice: Choice, setting: Setting, intra: Plan,
                    stage_layers: int, costs: LayerCosts) -> dict[str, Any]:
    p, v = setting.stages, choice.chunks_per_stage
    timeline = choice.timeline
    starts, counts = choice.cut.starts, choice.cut.layers
    layers = sum(counts)
    # the boundary between the first two stages, as the step prices it (the summary's)
    first = boundary_counterpart(starts[1], layers, stage_layers) - 1 \
        if len(counts) > 1 and costs.into_at else None
    into_part = PartCost() if first is None else costs.into_at[first]
    out_part = PartCost() if first is None else costs.out_of_at[first]

    def at(edges: tuple[PartCost, ...], layer: int) -> float:
        """A model boundary's reshards (into ``layer``), as the step prices them."""
        if not edges:
            return 0.0
        return edges[boundary_counterpart(layer, layers, stage_layers) - 1].compute_s

    stages = []
    for s in range(p):
        chunks = [k for k in range(len(counts)) if k % p == s]
        part = choice.stage_parts[s]
        # the reshards of the stage boundaries this stage's chunks have, per micro-batch
        boundary = sum((at(costs.into_at, starts[k]) if k > 0 else 0.0)
                       + (at(costs.out_of_at, starts[k + 1]) if k < len(counts) - 1 else 0.0)
                       for k in chunks)
        stages.append({
            "stage": s,
            "layers": [[starts[k], starts[k] + counts[k]] for k in chunks],
            "embedding": 0 in chunks, "head": len(counts) - 1 in chunks,
            "devices": stage_devices(mesh, s),
            "memory_bytes": choice.stage_bytes[s],
            "static_bytes": part.static_bytes,
            "activation_bytes": choice.held_bytes[s],
            "in_flight": timeline.peak_in_flight[s],
            "deferred_w": peak_deferred(timeline.spans[s]),
            "forward_s": part.forward_s, "backward_s": part.backward_s + part.weight_s,
            "boundary_reshard_s": boundary,
            "busy_s": timeline.busy_s[s], "tail_s": part.tail_s,
            "finish_s": timeline.finish_s[s] + part.tail_s,
        })
    return {"schedule": choice.schedule.value, "torch_schedule": choice.schedule.torch_class,
            "micro_batches": setting.micro_batches, "stages": p, "chunks_per_stage": v,
            "layers_per_chunk": list(counts), "step_s": timeline.step_s,
            "bubble_fraction": timeline.bubble_fraction, "p2p_send_s": setting.send_s,
            "p2p_bytes": costs.boundary_bytes,
            "boundary_reshard": {"forward_s": into_part.forward_s,
                                 "backward_s": into_part.backward_s + into_part.weight_s
                                 + out_part.compute_s,
                                 "receiver_s": into_part.compute_s,
                                 "sender_s": out_part.compute_s},
            "chunk_costs": [[c.forward_s, c.backward_s, c.weight_s]
                            for c in choice.cut.chunks],
            "critical_stage": critical_stage(choice),
            "stage_model_layers": stage_layers, "intra_stage_total_s":
                intra.objective.total_s, "stage": stages, "notes": NOTES}


def critical_stage(choice: Choice) -> int:
    """The stage that finishes last (its last task, then its tail): the step's end."""
    ends = [f + part.tail_s for f, part in zip(choice.timeline.finish_s, choice.stage_parts,
                                               strict=True)]
    return max(range(len(ends)), key=lambda s: (ends[s], -s))


def pipeline_objective(intra: Plan, choice: Choice, setting: Setting) -> Objective:
    """The step split as the stage that finishes last spends it, so the parts add up:

    ``busy + tail`` is its tasks and tail (``m`` micro-batches of its chunks' forward and
    backward, then its gradient sync and optimizer), made of its ops' compute and its exposed
    communication; ``bubble = step − busy − tail`` is the time it waits (warm-up, cool-down,
    transfers). Communication counts every collective once; of it, ``concurrent`` ran beside
    another mesh axis's and ``hidden = compute + comm − busy − tail − concurrent`` beside
    compute (by difference, as a plan's; at most the compute)."""
    s, m = critical_stage(choice), setting.micro_batches
    part, timeline = choice.stage_parts[s], choice.timeline
    worked = timeline.busy_s[s] + part.tail_s
    compute = m * part.ops_compute_s + part.tail_compute_s
    comm = m * part.comm_s + part.tail_comm_s
    concurrent = m * part.concurrent_s + part.tail_concurrent_s
    bound = max(b + p.tail_s for b, p in zip(timeline.busy_s, choice.stage_parts, strict=True))
    return dataclasses.replace(
        intra.objective, total_s=timeline.step_s, compute_s=compute, comm_s=comm,
        hidden_s=max(compute + comm - worked - concurrent, 0.0), concurrent_s=concurrent,
        bubble_s=max(timeline.step_s - worked, 0.0),
        lower_bound_s=min(bound, timeline.step_s))
