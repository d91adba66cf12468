"""A pipelined plan's trace: per stage its tasks, its ops and collectives inside them on the
compute and mesh-axis tracks, and its point-to-point transfers on a ``pp`` track.

Oracles: the schedules' transfer counts in closed form (a micro-batch crosses each of the
``v·p − 1`` boundaries between virtual stages forward as an activation and back as a
gradient: ``2(v·p − 1)·m`` per step, ``2(p − 1)·m`` for 1F1B); each transfer's price from
the collective model (``costmodel.collective_seconds``, collective-permute) for the local
bytes of the boundary activation (its shape and placements in plan.json) on the pp link;
the plan's step time.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autoshard.planning.record import Plan
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.sharding.mesh import Mesh
from autoshard.timeline.pipeline import pipeline_timeline
from autoshard.timeline.slices import Category
from costmodel import CollectiveKind, collective_seconds
from tests.support.cli import run

SMALL = ("--model", "llama3-8b", "--layers", "8", "--seq", "128", "--hidden", "256", "--ffn",
         "512", "--heads", "8", "--training", "--global-batch", "32", "--micro-batch", "2")
CASES = {  # name: (options, chunks per stage)
    "1f1b": (("--mesh", "dp=2,pp=2,tp=2", "--schedule", "1f1b"), 1),
    "interleaved": (("--mesh", "pp=2,tp=2", "--schedule", "interleaved"), 2),
}
COMM = {Category.EXPOSED, Category.OVERLAPPED, Category.INTRA_OP, Category.P2P}
BYTES = {"bf16": 2, "f32": 4}


@pytest.fixture(scope="module", params=sorted(CASES))
def traced(request, tmp_path_factory) -> tuple[Plan, dict, int, Path]:
    out = tmp_path_factory.mktemp(request.param)
    options, chunks = CASES[request.param]
    result = run("plan", *SMALL, *options, "--out", str(out / "p"), "--trace",
                 str(out / "trace.json"))
    assert result.exit_code == 0, result.output
    return Plan.load(out / "p" / "plan.json"), json.loads((out / "trace.json").read_text()), \
        chunks, out


def test_one_transfer_per_boundary_micro_batch_and_direction(traced) -> None:
    plan, _, v, _ = traced
    p, m = plan.pipeline["stages"], plan.pipeline["micro_batches"]
    transfers = [s for s in pipeline_timeline(plan).slices if s.category is Category.P2P]
    assert len(transfers) == 2 * (v * p - 1) * m
    assert {s.track.thread for s in transfers} == {"pp"}


def test_each_transfer_costs_the_boundary_activation_on_the_pp_link(traced) -> None:
    plan, _, _, _ = traced
    residual = plan.tensors["layers.0.ffn_residual.out"]
    sizes = dict(plan.mesh)
    shards = math.prod(sizes[axis] for axis, placement in
                       zip([a for a, _ in plan.mesh if a != "pp"], residual.placements,
                           strict=True) if placement.startswith("S"))
    local = math.prod(residual.shape) * BYTES[residual.dtype] / shards
    group = MeshLinks.build(Mesh(axes=plan.mesh), resolve_topology(plan.topology),
                            {}).group(("pp",))
    price = float(collective_seconds(CollectiveKind.COLLECTIVE_PERMUTE, local, group))
    transfers = [s for s in pipeline_timeline(plan).slices if s.category is Category.P2P]
    assert transfers
    for piece in transfers:
        assert piece.seconds == pytest.approx(price, rel=1e-12)
        assert piece.args["bytes"] == local


def test_every_collective_is_on_a_mesh_axis_track(traced) -> None:
    plan, _, _, _ = traced
    axes = {name for name, _ in plan.mesh}
    timeline = pipeline_timeline(plan)
    comm = [s for s in timeline.slices if s.category in COMM]
    assert any(s.category is not Category.P2P for s in comm)
    assert {s.track.thread for s in comm} <= axes
    for s in range(plan.pipeline["stages"]):
        threads = {t.thread for t in timeline.tracks if t.process == f"stage {s}"}
        assert {"step", "compute", "pp"} <= threads


def test_ops_and_exposed_collectives_run_inside_their_tasks(traced) -> None:
    """Every compute slice and every exposed collective lies inside one of its stage's task
    slices (a micro-batch's forward or backward, or the tail), and the trace ends at the
    plan's step."""
    plan, trace, _, _ = traced
    timeline = pipeline_timeline(plan)
    tol = 1e-9 * plan.objective.total_s
    for s in range(plan.pipeline["stages"]):
        mine = [x for x in timeline.slices if x.track.process == f"stage {s}"]
        tasks = [x for x in mine if x.track.thread == "step"]
        inside = [x for x in mine if x.track.thread != "step"
                  and x.category in (Category.COMPUTE, Category.EXPOSED, Category.LOCAL)]
        assert inside
        for piece in inside:
            assert any(t.start_s - tol <= piece.start_s and piece.end_s <= t.end_s + tol
                       for t in tasks), piece
        forward = [x for x in inside if x.args.get("phase") == "forward"]
        assert {x.args["micro_batch"] for x in forward} == set(
            range(plan.pipeline["micro_batches"]))
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    end_us = max(e["ts"] + e["dur"] for e in slices)
    assert end_us == pytest.approx(plan.objective.total_s * 1e6, rel=1e-6)


def test_charges_that_do_not_fit_the_records_are_one_line(traced, tmp_path) -> None:
    *_, out = traced
    plan = json.loads((out / "p" / "plan.json").read_text())
    plan["pipeline"]["charges"]["ops"].pop()
    edited = tmp_path / "plan.json"
    edited.write_text(json.dumps(plan))
    result = run("trace", str(edited), "--out", str(tmp_path / "trace.json"))
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "pipeline.charges" in lines[0] and "Traceback" not in lines[0]
