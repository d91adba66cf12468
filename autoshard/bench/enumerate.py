"""``autoshard bench enumerate``: how many strategies each op kind has, and how fast we list them.

For every zoo model (full size) on a 1-D, a 2-D and a 3-D mesh, enumeration runs cold (caches
cleared) over every op of the graph; the rows give ops, distinct op structures, strategies in
total, wall seconds and ops per second. A second table lists strategies per op kind.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from autoshard.bench.plots import save_bar_plot
from autoshard.planning.node_costs import attrs_key
from autoshard.provenance import write_csv
from autoshard.sharding.mesh import Mesh
from autoshard.strategies.derive import enumerate_strategies
from graphs import OpGraph, zoo

MESHES = ("x=8", "dp=2,tp=4", "dp=4,fsdp=4,tp=4")
QUICK_MODELS = ("gpt2", "llama3-8b")


def _enumerate_graph(graph: OpGraph, mesh: Mesh) -> tuple[float, int, int, dict[str, int]]:
    enumerate_strategies.cache_clear()
    start = time.perf_counter()
    total, structures, per_kind = 0, set(), {}
    for op in graph.ops:
        ins, outs = graph.specs(op)
        strategies = enumerate_strategies(op.kind, ins, outs, op.attrs, mesh)
        structures.add((op.kind, ins, outs, attrs_key(op.attrs)))
        total += len(strategies)
        per_kind[op.kind] = max(per_kind.get(op.kind, 0), len(strategies))
    return time.perf_counter() - start, len(structures), total, per_kind


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    models = QUICK_MODELS if quick else zoo.names()
    rows, kind_rows = [], []
    for model in models:
        graph = zoo.build(model, layers=2) if quick else zoo.build(model)
        for mesh_text in MESHES:
            seconds, structures, total, per_kind = _enumerate_graph(graph, Mesh.parse(mesh_text))
            rows.append({"model": model, "mesh": mesh_text, "ops": len(graph.ops),
                         "distinct_structures": structures, "strategies": total,
                         "seconds": round(seconds, 6),
                         "ops_per_s": round(len(graph.ops) / seconds, 1)})
            kind_rows.extend({"model": model, "mesh": mesh_text, "kind": kind,
                              "max_strategies": count} for kind, count in sorted(per_kind.items()))
    paths = [out_dir / "enumerate.csv", out_dir / "enumerate_kinds.csv"]
    for path, frame in zip(paths, (pd.DataFrame(rows), pd.DataFrame(kind_rows)), strict=True):
        write_csv(path, frame)
    paths.append(save_bar_plot(pd.DataFrame(rows), x="model", y="seconds", hue="mesh",
                               path=out_dir / "enumerate.png", ylabel="seconds (cold cache)",
                               title="Strategy enumeration per graph, caches cleared"))
    return paths
