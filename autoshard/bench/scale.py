"""``autoshard bench scale``: end-to-end planning time and peak memory as models grow.

Each job (model, layers, mesh, training) runs in its own Python process, so jobs share no
caches and each peak RSS (``resource.getrusage`` ``ru_maxrss``) is that job's alone. Per phase
the worker records wall seconds (graph = zoo build + training step; enumerate, cost, solve and
decode come from ``plan.stats``) and the peak RSS reached by the end of the phase. The solver's
certificate (status, objective, bound, gap) and its node/option/edge counts before and after
the exact reductions come from the last ``solver.solve`` call of the plan. Wall time is the
median of ``runs`` repetitions (3 when the first run is short, else 1, and 1 with ``--quick``;
the column says which). ``decode_s`` is the wall time left after the other phases (decoding
plus the planner's glue), because ``plan.stats`` is written before decoding finishes.
Per mesh, the time-vs-layers exponent is the slope of a log-log least-squares fit.
"""

from __future__ import annotations

import json
import logging
import math
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from autoshard.provenance import machine_line, write_csv

logger = logging.getLogger(__name__)

REPEAT_BELOW_S = 20.0  # repeat a job 3 times (median) when its first run is shorter
BASE_MODEL = "llama3-8b"
SERIES_MESHES = ("dp=8", "dp=2,tp=4", "dp=8,tp=8", "dp=4,fsdp=4,tp=4")
SERIES_LAYERS = (1, 2, 4, 8, 16, 32, 80)
THREE_D_LIMIT_S = 300.0  # 3-axis jobs: the periodic LP is ~0.4M variables, ~50 s (results/README)


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One planning run: a zoo model (optionally with fewer layers) on a mesh."""

    model: str
    mesh: str
    layers: int | None = None
    training: bool = True
    time_limit_s: float = 120.0
    series: bool = False  # part of the layers sweep used for the exponent fit
    baseline: bool = False  # layers not detected: the whole graph solved at once
    target_s: float | None = None  # the wall-time target, when the job is one
    target_rss_mb: float | None = None

    @property
    def name(self) -> str:
        layers = "" if self.layers is None else f" layers={self.layers}"
        mode = "training" if self.training else "inference"
        return f"{self.model}{layers} {self.mesh} {mode}{' baseline' if self.baseline else ''}"


def jobs(quick: bool) -> list[Job]:
    """The issues' target jobs (Mixtral's included), the baselines, then the
    llama3-8b-shaped layer sweep."""
    if quick:
        return [Job(model="gpt2", mesh="dp=2,tp=4", layers=1, time_limit_s=60.0),
                *(Job(model=BASE_MODEL, mesh="dp=2,tp=4", layers=n, time_limit_s=60.0,
                      series=True) for n in (1, 2))]
    out = [Job(model="gpt2", mesh="dp=2,tp=4", layers=12, target_s=2.0, target_rss_mb=500.0),
           Job(model=BASE_MODEL, mesh="dp=8,tp=8", target_s=5.0, target_rss_mb=1000.0),
           Job(model="llama3-70b", mesh="dp=8,tp=8", target_s=10.0, target_rss_mb=1500.0),
           Job(model="llama3.1-405b", mesh="dp=8,fsdp=8,tp=8", time_limit_s=300.0,
               target_s=30.0, target_rss_mb=3000.0),
           # mixture of experts on 64 H100: expert, tensor and data axes (names mean nothing
           # to the planner), and the 2-axis mesh without the data axis
           Job(model="mixtral-8x7b", mesh="dp=2,ep=4,tp=8", time_limit_s=300.0, target_s=10.0,
               target_rss_mb=1500.0),
           Job(model="mixtral-8x7b", mesh="ep=8,tp=8", target_s=10.0, target_rss_mb=1500.0),
           Job(model="gpt2", mesh="dp=2,tp=4", layers=12, baseline=True),
           Job(model=BASE_MODEL, mesh="dp=8,tp=8", layers=32, time_limit_s=240.0,
               baseline=True)]
    for mesh in SERIES_MESHES:
        three_d = mesh.count(",") == 2
        # 80 layers of llama3-8b width need more than 8 devices' HBM (83.8 GiB each at best)
        counts = [n for n in SERIES_LAYERS if (n <= 8 if three_d else
                                               n <= 32 or mesh == "dp=8,tp=8")]
        out += [Job(model=BASE_MODEL, mesh=mesh, layers=n, series=True,
                    time_limit_s=THREE_D_LIMIT_S if three_d else 120.0) for n in counts]
    return out


def _rss_mb() -> float:
    """Peak resident set of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_job(job: Job) -> dict[str, Any]:
    """Plan ``job`` in this process and return its measurements (the worker's body)."""
    import solver
    from autoshard.planning import planner
    from autoshard.planning.layers import repeated_blocks

    if job.baseline:  # the solver as it was before the periodic chain: whole graph at once
        planner.repeated_blocks = lambda names, keys: None
    calls: list[Any] = []
    original = solver.solve

    def recording_solve(*args: Any, **kwargs: Any) -> Any:
        calls.append((time.perf_counter(), _rss_mb()))
        answer = original(*args, **kwargs)
        calls.append(answer)
        return answer

    solver.solve = recording_solve
    try:
        return _timed_plan(job, calls)
    finally:
        solver.solve = original
        planner.repeated_blocks = repeated_blocks


def _timed_plan(job: Job, calls: list[Any]) -> dict[str, Any]:
    from autoshard.planning.planner import plan, training_step_graph
    from autoshard.sharding.mesh import Mesh
    from graphs import zoo

    start = time.perf_counter()
    graph = zoo.build(job.model, **({} if job.layers is None else {"layers": job.layers}))
    if job.training:
        graph = training_step_graph(graph, "adamw", "none")
    graph_s, graph_rss = time.perf_counter() - start, _rss_mb()
    result = plan(graph, Mesh.parse(job.mesh), training=job.training,
                  time_limit=job.time_limit_s, model_name=job.model)
    wall = time.perf_counter() - start
    phases = {f"{p}_s": float(result.stats.get(f"{p}_s", 0.0))
              for p in ("enumerate", "cost", "solve")}
    # plan.stats is frozen before decoding ends: decode is the rest of the wall time
    phases["decode_s"] = max(wall - graph_s - sum(phases.values()), 0.0)
    solution = calls[-1]
    stats = solution.stats
    return {
        "wall_s": wall, "graph_s": graph_s,
        **phases,
        "rss_graph_mb": graph_rss, "rss_cost_mb": calls[0][1], "rss_peak_mb": _rss_mb(),
        "solver_calls": len(calls) // 2, "backend": stats.backend,
        "status": solution.status.name.lower(), "objective_s": solution.objective,
        "bound_s": solution.bound, "gap": solution.gap,
        "ops": result.stats.get("ops"), "nodes_before": stats.nodes_before,
        "nodes_after": stats.nodes_after, "options_before": stats.options_before,
        "options_after": stats.options_after, "edges_before": stats.edges_before,
        "edges_after": stats.edges_after,
        "ilp_s": stats.phase("highs") + stats.phase("cpsat") + stats.phase("restricted_highs"),
        "dp_s": stats.phase("dp"), "reduce_s": stats.phase("reduce"),
        "periodic_lp_s": stats.phase("periodic_lp"), "restricted": solution.restricted or "",
        "target_s": job.target_s, "target_rss_mb": job.target_rss_mb,
        "meets_target": (None if job.target_s is None else bool(
            wall <= job.target_s and _rss_mb() <= (job.target_rss_mb or math.inf)
            and solution.gap <= 1e-6)),
    }


def _spawn(job: Job) -> dict[str, Any]:
    """One job in a fresh interpreter; a crash or time-out becomes a row that says so."""
    command = [sys.executable, "-m", "autoshard.bench.scale", json.dumps(asdict(job))]
    budget = max(3 * job.time_limit_s + 120.0, 600.0)  # the time limit binds the solver only
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=budget,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"status": f"killed after {budget:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": f"failed: {tail[:120]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(job: Job, repeat: bool = True) -> dict[str, Any]:
    """Median over repeated runs of ``job`` (phases and RSS from the median-wall run)."""
    first = _spawn(job)
    runs = [first]
    if repeat and "wall_s" in first and first["wall_s"] < REPEAT_BELOW_S:
        runs += [_spawn(job), _spawn(job)]
    runs = [r for r in runs if "wall_s" in r] or [first]
    if "wall_s" not in runs[0]:
        return {**_describe(job), "runs": 1, **runs[0]}
    median = statistics.median_low(r["wall_s"] for r in runs)
    chosen = next(r for r in runs if r["wall_s"] == median)
    return {**_describe(job), "runs": len(runs), **chosen}


def _describe(job: Job) -> dict[str, Any]:
    return {"job": job.name, "model": job.model, "layers": job.layers, "mesh": job.mesh,
            "baseline": job.baseline,
            "devices": int(np.prod([int(a.split("=")[1]) for a in job.mesh.split(",")])),
            "training": job.training,
            "time_limit_s": job.time_limit_s, "series": job.series}


def layer_exponents(frame: pd.DataFrame, column: str = "wall_s") -> dict[str, float]:
    """Per mesh, the slope k of log(column) = k·log(layers) + c over the layers sweep.

    Example:
        >>> frame = pd.DataFrame({"series": [True] * 3, "mesh": ["m"] * 3,
        ...                       "layers": [1, 2, 4], "wall_s": [1.0, 4.0, 16.0]})
        >>> layer_exponents(frame)
        {'m': 2.0}
    """
    out: dict[str, float] = {}
    sweep = frame[frame["series"] & frame.get(column, pd.Series(dtype=float)).notna()]
    for mesh, part in sweep.groupby("mesh", sort=True):
        if part["layers"].nunique() < 2:
            continue
        slope = np.polyfit(np.log(part["layers"].astype(float)),
                           np.log(part[column].astype(float)), 1)[0]
        out[str(mesh)] = round(float(slope), 3)
    return out


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    """Write ``scale.csv`` and ``scale.png`` under ``out_dir``; return their paths."""
    rows = []
    for job in jobs(quick):
        row = measure(job, repeat=not quick)
        logger.info("scale bench %s", row)
        rows.append(row)
    frame = pd.DataFrame(rows)
    exponents = layer_exponents(frame)
    frame["layers_exponent"] = [exponents.get(m) if s else math.nan
                                for m, s in zip(frame["mesh"], frame["series"], strict=True)]
    csv_path, png_path = out_dir / "scale.csv", out_dir / "scale.png"
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(csv_path, frame, [f"wall time vs layers ({BASE_MODEL}-shaped, {mesh}): "
                                f"layers^{slope}" for mesh, slope in exponents.items()])
    _plot(frame, png_path)
    return [csv_path, png_path]


def _plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    sweep = frame[frame["series"] & frame["wall_s"].notna()] if "wall_s" in frame else frame[:0]
    for mesh, part in sweep.groupby("mesh", sort=True):
        (line,) = left.plot(part["layers"], part["wall_s"], marker="o", label=f"{mesh} wall")
        left.plot(part["layers"], part["solve_s"], marker=".", linestyle=":",
                  color=line.get_color(), label=f"{mesh} solve")
        right.plot(part["layers"], part["rss_peak_mb"], marker="o", color=line.get_color(),
                   label=mesh)
    for ax, label in ((left, "seconds"), (right, "peak RSS (MB)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(f"layers ({BASE_MODEL}-shaped, training)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    left.set_title("plan wall time (median)")
    right.set_title("peak RSS per job")
    fig.text(0.01, 0.01, machine_line(), fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def _worker(argv: list[str]) -> None:
    from autoshard.errors import AutoshardError

    job = Job(**json.loads(argv[0]))
    try:
        print(json.dumps(run_job(job)))
    except AutoshardError as error:  # e.g. no plan fits: a result, not a crash
        print(json.dumps({"status": f"no plan: {error}"}))


if __name__ == "__main__":
    _worker(sys.argv[1:])
