"""Exports of a pipelined plan: every stage's layouts on the stage mesh, and the stage layout.

A pipelined plan's tensors are the intra-stage plan's (the mesh without ``pp``), so the
layouts export as a plan on that mesh, priced on the links each axis spans in the whole mesh
(:func:`~autoshard.planning.pipeline.pipelined.stage_links`). What the pipeline adds goes
after them: for DTensor, the split points and schedule class for ``torch.distributed.
pipelining`` (``pipeline(module, mb_args, split_spec=...)`` with ``SplitPoint.BEGINNING`` at
the first layer of every chunk but the first; chunk ``k`` runs on stage ``k mod p``, the
interleaved schedules' loop placement); for JSON the ``pipeline`` record; for the others
(JAX, HLO, Shardy) comment lines stating which layers and devices each stage holds.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from autoshard.planning.pipeline.pipelined import PP_AXIS, stage_links
from autoshard.planning.record import Plan
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.sharding.mesh import Mesh

MAIN = '\n\nif __name__ == "__main__":'


def stage_plan(plan: Plan) -> Plan | None:
    """The plan on the stage mesh, or None for a plan without a pipeline."""
    if not plan.pipeline:
        return None
    return dataclasses.replace(plan, mesh=tuple(a for a in plan.mesh if a[0] != PP_AXIS))


def stage_overrides(plan: Plan, topology: str | None,
                    overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The link overrides the intra-stage plan was priced with."""
    topo = resolve_topology(topology or plan.topology)
    full = MeshLinks.build(Mesh(axes=plan.mesh), topo, dict(overrides))
    return stage_links(full, topo, overrides)


def split_points(pipeline: Mapping[str, Any]) -> list[str]:
    """Module names where chunks after the first begin, in chunk order (``layers.20``)."""
    starts, at = [], 0
    for count in pipeline["layers_per_chunk"][:-1]:
        at += count
        starts.append(f"layers.{at}")
    return starts


def with_pipeline(text: str, plan: Plan, fmt: str) -> str:
    """``text`` (an export of the stage plan) with the pipeline's part added."""
    pipeline = plan.pipeline or {}
    if fmt == "json":
        data = json.loads(text)
        data["pipeline"] = dict(pipeline)
        return json.dumps(data, indent=1) + "\n"
    lines = _layout_comments(pipeline)
    if fmt != "dtensor":
        return text + "\n".join(lines) + "\n"
    code = "\n".join(lines + _torch_lines(pipeline)) + "\n"
    head, marker, tail = text.rpartition(MAIN)
    return head + code + marker + tail if marker else text + code


def _layout_comments(pipeline: Mapping[str, Any]) -> list[str]:
    lines = [f"# pipeline: {pipeline['schedule']} schedule over {PP_AXIS}={pipeline['stages']} "
             f"stages ({pipeline['chunks_per_stage']} chunk(s) each), "
             f"{pipeline['micro_batches']} micro-batches per step; the layouts above hold on "
             f"every stage's devices"]
    for row in pipeline["stage"]:
        layers = ", ".join(f"layers {a}-{b - 1}" for a, b in row["layers"])
        extras = "".join(x for x, on in ((" + embedding", row["embedding"]),
                                         (" + head", row["head"])) if on)
        lines.append(f"#   stage {row['stage']}: {layers}{extras}; devices "
                     f"{','.join(map(str, row['devices']))}")
    return lines


def _torch_lines(pipeline: Mapping[str, Any]) -> list[str]:
    return [
        "",
        "# torch.distributed.pipelining: split the model at these modules and run the",
        "# schedule below (PipelineStage per chunk; chunk k on pipeline rank k % stages)",
        f"PIPELINE_SCHEDULE = {pipeline['torch_schedule']!r}",
        f"PIPELINE_SPLIT_POINTS = {split_points(pipeline)!r}",
        f"PIPELINE_STAGES = {pipeline['stages']}",
        f"PIPELINE_MICRO_BATCHES = {pipeline['micro_batches']}",
        "",
        "",
        "def pipeline_split_spec():",
        '    """split_spec for torch.distributed.pipelining.pipeline()."""',
        "    from torch.distributed.pipelining import SplitPoint",
        "",
        "    return {name: SplitPoint.BEGINNING for name in PIPELINE_SPLIT_POINTS}",
        "",
        "",
        "def pipeline_schedule_class():",
        '    """The schedule class that runs this plan\'s order."""',
        "    import torch.distributed.pipelining as pipelining",
        "",
        "    return getattr(pipelining, PIPELINE_SCHEDULE)",
    ]
