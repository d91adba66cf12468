"""Pipelined points of a training sweep: enumerated, planned with their schedule, plotted."""

from __future__ import annotations

import json
from pathlib import Path

from autoshard.planning.pipeline.schedules import parse_schedule
from autoshard.planning.pipeline.simulate import ChunkCost, simulate
from autoshard.sweep.points import SweepSpec, enumerate_points, pipeline_meshes
from autoshard.sweep.study import PlanFiles, sweep


def _mesh_text(mesh) -> str:
    return ",".join(f"{n}={s}" for n, s in mesh)


def test_pipeline_meshes_cover_every_split_around_pp() -> None:
    spec = SweepSpec(model="gpt2", devices=(16,), training=True, pipeline=(2, 4))
    found = {_mesh_text(m) for m in pipeline_meshes(16, spec)}
    # 16 = pp × dp × tp with dp, tp ≥ 1, at most 3 axes: written out by hand
    assert found == {"dp=8,pp=2", "pp=2,tp=8", "dp=2,pp=2,tp=4", "dp=4,pp=2,tp=2",
                     "dp=4,pp=4", "pp=4,tp=4", "dp=2,pp=4,tp=2"}


def test_micro_batches_split_the_batch_per_replica() -> None:
    spec = SweepSpec(model="gpt2", devices=(8,), batches=(16,), training=True,
                     pipeline=(2,), micro_batch_sizes=(1, 4, 3))
    points = [p for p in enumerate_points(spec) if p.pipelined]
    by_id = {(p.mesh_text, p.micro_batch): p.micro_batches() for p in points}
    assert by_id[("dp=4,pp=2", 1)] == (4, 4)  # 4 replicas x 1 sample, 4 micro-batches
    assert by_id[("dp=4,pp=2", 4)] == (16, 1)
    assert by_id[("pp=2,tp=4", 4)] == (4, 4)
    assert ("dp=4,pp=2", 3) not in by_id  # 16 is no multiple of 4 x 3
    assert not [p for p in enumerate_points(SweepSpec(
        model="gpt2", devices=(8,), batches=(16,), pipeline=(2,))) if p.pipelined]  # inference


def test_a_training_sweep_prices_pp_points_with_their_schedule(tmp_path: Path) -> None:
    spec = SweepSpec(model="gpt2", devices=(4,), max_axes=2, batches=(8,), seqs=(32,),
                     training=True, overrides=(("layers", 4),), pipeline=(2, 8))
    result = sweep(spec, tmp_path, plans=PlanFiles.ALL)
    rows = [r for r in result.rows if r["micro_batch"]]
    assert {r["mesh"] for r in rows} == {"dp=2,pp=2", "pp=2,tp=2"}  # pp=8 > 4 layers: dropped
    for row in rows:
        assert row["feasible"] == "True", row["error"]
        record = json.loads((tmp_path / row["plan"]).read_text())["pipeline"]
        assert row["schedule"] == record["schedule"]
        replicas = 2 if row["mesh"].startswith("dp=2") else 1
        assert int(row["micro_batches"]) == record["micro_batches"] == 8 // replicas
        # the row's step is the row's schedule run over the recorded chunk costs ...
        costs = record["chunk_costs"]
        chunks = [ChunkCost(f, b, w, record["p2p_send_s"] if k < len(costs) - 1 else 0.0)
                  for k, (f, b, w) in enumerate(costs)]
        tails = [stage["tail_s"] for stage in record["stage"]]
        m, p = record["micro_batches"], record["stages"]
        timeline = simulate(parse_schedule(row["schedule"]), chunks, m, p, tails)
        assert float(row["total_s"]) == timeline.step_s
        # ... which idles: more than the busiest stage's m micro-batches of work, no bubble
        busiest = max(sum(map(sum, costs[k::p])) * m + tails[k] for k in range(p))
        assert float(row["total_s"]) > busiest
    assert (tmp_path / "frontier.png").exists()
    summary = (tmp_path / "summary.md").read_text()
    assert "--pp 2" in summary and "frontier.png" in summary


def test_the_frontier_is_every_point_nothing_beats_in_both() -> None:
    import itertools

    from autoshard.sweep.plots import frame, frontier
    from tests.autoshard.sweep.test_report import row

    values = [(8, 3.0, 1.0), (4, 2.0, 3.0), (2, 2.5, 2.0), (1, 1.0, 4.0), (16, 1.5, 1.5),
              (32, 2.0, 2.0)]
    rows = [row(f"dp={d}", d, t, 0.0) for d, t, _ in values]
    for r, (_, _, peak) in zip(rows, values, strict=True):
        r["peak_bytes_per_device"] = repr(peak)
    table = frame(rows)
    got = sorted(frontier(table)["mesh"])
    points = [(float(t), float(p), f"dp={d}") for d, t, p in values]
    want = sorted(name for t, p, name in points if not any(
        (t2 <= t and p2 <= p) and (t2, p2) != (t, p) for t2, p2, _ in points))
    assert got == want
    times = list(frontier(table)["total_s"])  # by increasing memory: each step faster
    assert all(a > b for a, b in itertools.pairwise(times))
