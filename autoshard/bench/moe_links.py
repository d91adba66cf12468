"""``autoshard bench moe-links``: where the search puts Mixtral's experts as the network between
nodes gets faster.

Mixtral 8x7B training (AdamW, full activation recomputation so every batch fits, sequences of
4096 tokens, dropless with balanced load) on 64 H100 of ``dgx-h100`` as the mesh ``x=8,y=8``:
``y`` is the eight GPUs of a node (NVLink), ``x`` the eight nodes. The names mean nothing to
the planner; both axes can shard the 8 experts. Two things are swept: the link of ``x``, from
a slow network to one as fast as NVLink (``--link x=alpha:…,bw:…``, alpha kept at the preset's
inter-node value), and the batch (tokens per step), because the two costs that decide where
the experts go scale differently: the dispatch/combine all-to-alls grow with the tokens, the
gradient synchronisation of expert weights replicated across nodes does not. For each point
the row says which axes shard the experts' weights (dim 0 of ``w2``: expert parallelism),
which shard their FFN width (dim 1: tensor parallelism inside the experts), which carry the
dispatch all-to-all, the attention's strategy and the step time.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd

from autoshard.planning.planner import plan
from autoshard.provenance import header_lines
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from costmodel import get_preset
from graphs import zoo

logger = logging.getLogger(__name__)

MODEL, MESH, TOPOLOGY = "mixtral-8x7b", "x=8,y=8", "dgx-h100"
BANDWIDTHS_GBPS = (6.25, 12.5, 25.0, 50.0, 100.0, 200.0, 450.0)
BATCHES = (8, 64, 256)
LAYER = "layers.5"


def _axes_of_dim(placements: tuple[str, ...], names: tuple[str, ...], dim: int) -> str:
    axes = [name for name, p in zip(names, placements, strict=True) if p == f"S({dim})"]
    return ",".join(axes) or "-"


def _where(axes: str, inner: str) -> str:
    if axes == "-":
        return "not sharded"
    parts = set(axes.split(","))
    if parts == {inner}:
        return "inside the node"
    return "across nodes" if inner not in parts else "both"


def point(graph: Any, batch: int, bw_gbps: float, alpha_us: float) -> dict[str, Any]:
    """One planned point of the sweep."""
    mesh = Mesh.parse(MESH)
    names = mesh.axis_names
    start = time.perf_counter()
    result = plan(graph, mesh, topology=TOPOLOGY, training=True, model_name=MODEL,
                  recompute="full", links={"x": f"alpha:{alpha_us:g}us,bw:{bw_gbps:g}GB/s"})
    w2 = result.tensors[f"{LAYER}.moe.experts.w2"].placements
    experts = _axes_of_dim(w2, names, 0)
    a2a = [c for r in result.reshards if r.tensor == f"{LAYER}.moe.dispatch.out"
           for c in r.collectives if c.kind == "all_to_all"]
    return {
        "model": MODEL, "mesh": MESH, "batch": batch, "tokens": batch * 4096,
        "inter_node_bw_GBps": bw_gbps,
        "inter_node_alpha_us": alpha_us, "step_s": result.objective.total_s,
        "comm_s": result.objective.comm_s, "optimal": result.objective.optimal,
        "expert_axes": experts, "experts_placed": _where(experts, names[-1]),
        "expert_ffn_axes": _axes_of_dim(w2, names, 1),
        "dispatch_all_to_all_axes": ";".join(sorted({",".join(c.axes) for c in a2a})) or "-",
        "attention": result.ops[f"{LAYER}.attn.core"].strategy,
        "peak_gib": round(result.peak_bytes_per_device / 2**30, 2),
        "plan_s": round(time.perf_counter() - start, 2)}


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    links = MeshLinks.build(Mesh.parse(MESH), get_preset(TOPOLOGY))
    alpha_us = float(links.describe()[0]["alpha_s"]) * 1e6   # the preset's inter-node alpha
    rows = []
    for batch in (BATCHES[::2] if quick else BATCHES):
        graph = zoo.build(MODEL, batch=batch, layers=4 if quick else None)
        for bw in (BANDWIDTHS_GBPS[:: 6] if quick else BANDWIDTHS_GBPS):
            rows.append(point(graph, batch, bw, alpha_us))
            logger.info("moe-links bench %s", rows[-1])
    path = out_dir / "moe_links.csv"
    with path.open("w") as handle:
        handle.write("\n".join(header_lines()) + "\n")
        pd.DataFrame(rows).to_csv(handle, index=False)
    return [path]
