"""``autoshard bench prices``: planning time under measured-curve prices against alpha-beta ones.

The calibration issue's speed target ("planning speed unchanged within 10 %") compares the same
job priced two ways: the preset's links as they ship (measured-curve terms: latency floor,
bandwidth ramp, NCCL's algorithm choice) and every mesh axis overridden with a pure alpha-beta
link (``ALPHA_BETA``, the preset's NVLink latency and link rate without the curve terms). Each
plan runs in a fresh Python process (no shared caches), the two pricings interleaved so both
see the same machine load, and the median of ``runs`` wall times is kept per pricing (phases
from the median run, as in ``autoshard bench scale``). ``ratio`` is curves over alpha-beta.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd

from autoshard.provenance import write_csv

ALPHA_BETA = "alpha:0.89us,bw:450GB/s"
PRICINGS = ("curves", "alpha-beta")
JOBS = (("gpt2", "dp=2,tp=4", 12), ("llama3-8b", "dp=8,tp=8", None),
        ("llama3-70b", "dp=8,tp=8", None))
QUICK_JOBS = (("gpt2", "dp=2,tp=4", 2),)


def plan_once(model: str, mesh: str, layers: int | None, pricing: str) -> dict[str, Any]:
    """Plan one training job in this process; wall seconds per phase and the certificate."""
    import solver
    from autoshard.planning.planner import plan, training_step_graph
    from autoshard.sharding.mesh import Mesh
    from graphs import zoo

    answers: list[Any] = []
    original = solver.solve

    def recording(*args: Any, **kwargs: Any) -> Any:
        answers.append(original(*args, **kwargs))
        return answers[-1]

    solver.solve = recording
    try:
        start = time.perf_counter()
        graph = zoo.build(model, **({} if layers is None else {"layers": layers}))
        graph = training_step_graph(graph, "adamw", "none")
        parsed = Mesh.parse(mesh)
        links = None if pricing == "curves" else dict.fromkeys(parsed.axis_names, ALPHA_BETA)
        result = plan(graph, parsed, training=True, time_limit=120.0, model_name=model,
                      links=links)
        wall = time.perf_counter() - start
    finally:
        solver.solve = original
    answer = answers[-1]
    phases = {f"{p}_s": float(result.stats.get(f"{p}_s", 0.0))
              for p in ("enumerate", "cost", "solve")}
    return {"wall_s": wall, **phases, "periodic_lp_s": answer.stats.phase("periodic_lp"),
            "status": answer.status.name.lower(), "objective_s": answer.objective,
            "gap": answer.gap, "options_after": answer.stats.options_after}


def _spawn(model: str, mesh: str, layers: int | None, pricing: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "autoshard.bench.prices",
               json.dumps([model, mesh, layers, pricing])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"status": f"failed: {tail[:120]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    """Write ``prices.csv`` under ``out_dir``: one row per job and pricing, with the ratio."""
    runs = 1 if quick else 3
    rows = []
    for model, mesh, layers in QUICK_JOBS if quick else JOBS:
        measured: dict[str, list[dict[str, Any]]] = {p: [] for p in PRICINGS}
        for _ in range(runs):
            for pricing in PRICINGS:  # interleaved: both see the same load
                measured[pricing].append(_spawn(model, mesh, layers, pricing))
        medians = {}
        for pricing, results in measured.items():
            timed = [r for r in results if "wall_s" in r] or results[:1]
            wall = statistics.median_low(r.get("wall_s", float("nan")) for r in timed)
            chosen = next(r for r in timed if r.get("wall_s", float("nan")) == wall
                          or "wall_s" not in r)
            medians[pricing] = wall
            rows.append({"model": model, "mesh": mesh, "layers": layers, "pricing": pricing,
                         "runs": len(timed), **chosen})
        for row in rows[-len(PRICINGS):]:
            row["ratio_to_alpha_beta"] = medians["curves"] / medians["alpha-beta"]
    path = out_dir / "prices.csv"
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(path, pd.DataFrame(rows), [f"alpha-beta links: every axis {ALPHA_BETA}"])
    return [path]


if __name__ == "__main__":
    model_arg, mesh_arg, layers_arg, pricing_arg = json.loads(sys.argv[1])
    print(json.dumps(plan_once(model_arg, mesh_arg, layers_arg, pricing_arg)))
