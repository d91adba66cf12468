"""``autoshard bench sweep``: what a sweep saves over planning each point on its own.

The same points are planned twice, each way as a fresh process as a user would run them:
one ``autoshard sweep`` over all of them (one import, the graph built once per worker, caches
warm from one mesh to the next), then one ``autoshard plan --out`` per point of that sweep's
table (every run pays the interpreter, the imports, the graph build and cold strategy/cost
caches; a training sweep's pipelined points with the global batch and micro-batch it gave
them). Rows
give wall seconds per method and the ratio; ``same_objectives`` checks that both ways found
plans of the same cost point by point (both ways stop at the sweep's gap).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from autoshard.provenance import write_csv
from autoshard.sweep.runner import SWEEP_GAP
from autoshard.sweep.table import read_rows

logger = logging.getLogger(__name__)

FULL = ({"model": "gpt2", "devices": "8,16", "axes": "1-2", "shape": ()},
        {"model": "gpt2", "devices": "8,16", "axes": "1-2",
         "shape": ("--training", "--layers", "4")})
QUICK = ({"model": "gpt2", "devices": "4,8", "axes": "1-2",
          "shape": ("--layers", "2", "--batch", "4", "--seq", "256")},)


def _autoshard() -> list[str]:
    script = Path(sys.executable).with_name("autoshard")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from autoshard.cli import main; main()"]


def _timed(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([*_autoshard(), *args], check=True, capture_output=True, text=True)
    return time.perf_counter() - start


def _independent(config: dict, work: Path, rows: list[dict[str, str]]
                 ) -> tuple[float, dict[str, float]]:
    """One ``autoshard plan`` per point of the sweep (``rows``: its table), pipelined points
    with the same global batch and micro-batch as the sweep gave them."""
    seconds, objectives = 0.0, {}
    for row in rows:
        out = work / "plans" / row["point"]
        pipelined = ["--global-batch", row["batch"], "--micro-batch", row["micro_batch"]] \
            if row.get("micro_batch") else []
        seconds += _timed(["plan", "--model", config["model"], "--mesh", row["mesh"],
                           *config["shape"], *pipelined, "--gap", repr(SWEEP_GAP),
                           "--out", str(out), "--force", "--quiet"])
        objective = json.loads((out / "plan.json").read_text())["objective"]["total_s"]
        objectives[row["mesh"]] = objective
    return seconds, objectives


def _swept(config: dict, work: Path, jobs: int
           ) -> tuple[float, dict[str, float], list[dict[str, str]]]:
    out = work / f"sweep-j{jobs}"
    seconds = _timed(["sweep", "--model", config["model"], "--devices", config["devices"],
                      "--axes", config["axes"], *config["shape"], "--plans", "none",
                      "-j", str(jobs), "--out", str(out), "--force", "--no-progress"])
    rows = sorted(read_rows(out / "sweep.csv").values(), key=lambda row: row["point"])
    return seconds, {row["mesh"]: float(row["total_s"]) for row in rows}, rows


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    """Write ``sweep_bench.csv`` under ``out_dir``; return its path."""
    rows = []
    for config in QUICK if quick else FULL:
        rows.extend(_compare(config, jobs=(1,) if quick else (1, 2)))
    path = out_dir / "sweep_bench.csv"
    return [write_csv(path, pd.DataFrame(rows))]


def _compare(config: dict, jobs: tuple[int, ...]) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        swept = [(j, *_swept(config, work, j)) for j in jobs]
        alone_s, alone = _independent(config, work, swept[0][3])  # the sweep's own points
        methods = [("independent autoshard plan runs", alone_s, alone)]
        methods += [(f"autoshard sweep -j {j}", seconds, found)
                    for j, seconds, found, _ in swept]
    return [{"model": config["model"], "devices": config["devices"], "axes": config["axes"],
             "shape": " ".join(config["shape"]) or "default", "method": method,
             "points": len(found), "seconds": round(seconds, 3),
             "seconds_per_point": round(seconds / max(1, len(found)), 3),
             "speedup_vs_independent": round(alone_s / seconds, 3),
             "same_objectives": _same(found, alone)}
            for method, seconds, found in methods]


def _same(found: dict[str, float], reference: dict[str, float]) -> bool:
    return found.keys() == reference.keys() and all(
        abs(found[k] - reference[k]) <= 1e-9 * max(1.0, abs(reference[k])) for k in reference)
