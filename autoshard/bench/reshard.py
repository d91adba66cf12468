"""``autoshard bench reshard``: how many sharding transitions we price per second.

Planning a large model asks for millions of reshard prices, so this measures the two regimes
that matter: cold (every memo cleared, each search runs) and cached (the same matrix asked
again, as structurally repeated layers do). For 1-D, 2-D and 3-D meshes on ``dgx-h100`` it
enumerates every evenly divisible sharding (Replicate, Shard in every axis order, Partial sum)
of a bf16 tensor and prices the full all-pairs matrix. ``results/reshard.csv`` states the
command and machine that made it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from autoshard.bench.plots import save_bar_plot
from autoshard.provenance import write_csv
from autoshard.reshard.convert import to_sharding
from autoshard.reshard.find import clear_caches, find_reshard, reshard_cost_matrix
from autoshard.reshard.state import enumerate_states
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from costmodel import get_preset

logger = logging.getLogger(__name__)

CASES = (
    ("x=8", (("x", 8),), (8192, 8192)),
    ("dp=2,tp=4", (("dp", 2), ("tp", 4)), (8192, 8192)),
    ("dp=2,tp=4", (("dp", 2), ("tp", 4)), (8, 2048, 4096)),
    ("dp=4,fsdp=2,tp=8", (("dp", 4), ("fsdp", 2), ("tp", 8)), (8192, 8192)),
    ("x=2,y=2,z=2", (("x", 2), ("y", 2), ("z", 2)), (8, 2048, 4096)),
)
QUICK_CASES = CASES[:3]
ITEMSIZE = 2


def _measure(mesh_text: str, axes: tuple[tuple[str, int], ...],
             shape: tuple[int, ...]) -> dict[str, object]:
    mesh = Mesh(axes=axes)
    links = MeshLinks.build(mesh, get_preset("dgx-h100"))
    sizes = tuple(size for _, size in axes)
    shardings = [to_sharding(mesh, len(shape), state) for state in enumerate_states(sizes, shape)]
    clear_caches()
    start = time.perf_counter()
    matrix = reshard_cost_matrix(shardings, shardings, shape, ITEMSIZE, links)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    reshard_cost_matrix(shardings, shardings, shape, ITEMSIZE, links)
    cached = time.perf_counter() - start
    sample = shardings[:: max(1, len(shardings) // 20)]
    start = time.perf_counter()
    paths = [find_reshard(a, b, shape, ITEMSIZE, links) for a in sample for b in sample]
    decode = time.perf_counter() - start
    pairs = matrix.size
    finite = np.isfinite(matrix)
    return {
        "mesh": mesh_text, "shape": "x".join(map(str, shape)), "itemsize": ITEMSIZE,
        "shardings": len(shardings), "pairs": pairs,
        "cold_s": round(cold, 6), "cold_pairs_per_s": round(pairs / cold, 1),
        "cached_s": round(cached, 6), "cached_pairs_per_s": round(pairs / cached, 1),
        "find_reshard_per_s": round(len(paths) / decode, 1),
        "unreachable_pairs": int(pairs - finite.sum()),
        "max_steps": max(len(p.steps) for p in paths),
        "median_cost_s": float(np.median(matrix[finite])),
    }


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    """Write ``reshard.csv`` under ``out_dir``; returns the paths written."""
    rows = [_measure(text, axes, shape) for text, axes, shape in
            (QUICK_CASES if quick else CASES)]
    path = Path(out_dir) / "reshard.csv"
    write_csv(path, pd.DataFrame(rows))
    frame = pd.DataFrame(rows)
    frame["case"] = frame["mesh"] + " " + frame["shape"]
    long = frame.melt(id_vars=["case"], value_vars=["cold_pairs_per_s", "cached_pairs_per_s"],
                      var_name="regime", value_name="pairs_per_s")
    plot = save_bar_plot(long, x="case", y="pairs_per_s", hue="regime",
                         path=Path(out_dir) / "reshard.png", ylabel="sharding pairs priced / s",
                         title="Reshard cost matrix throughput, cold vs cached")
    return [path, plot]
