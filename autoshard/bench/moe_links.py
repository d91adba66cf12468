"""``autoshard bench moe-links``: where the search puts Mixtral's experts as the network between
nodes gets faster.

Mixtral 8x7B training (AdamW, full activation recomputation, micro-batches of 8 sequences of
4096 tokens, dropless with balanced load, every collective exposed) on 64 H100 of
``dgx-h100`` as the mesh ``x=8,y=8``: ``y`` is the eight GPUs of a node (NVLink), ``x`` the
eight nodes. The names mean nothing to the planner; both axes can shard the 8 experts. Two
things are swept: the link of ``x``, from a slow network to one as fast as NVLink (the preset's
inter-node link with only its rate changed: hop latency, launch floor, pipeline fill and bus
efficiency as calibrated), and the micro-batches per step (gradient accumulation: tokens per
optimizer step), because the two costs that decide where the experts go scale differently:
the dispatch/combine all-to-alls run once per micro-batch, the gradient synchronisation of
expert weights replicated across nodes once per step. For each point
the row says which axes shard the experts' weights (dim 0 of ``w2``: expert parallelism; in
one layer, and counted over every layer, since a memory-priced plan may mix two layer plans),
which shard their FFN width (dim 1: tensor parallelism inside the experts), which carry the
dispatch all-to-all, the attention's strategy and the step time.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from autoshard.planning.planner import plan
from autoshard.provenance import write_csv
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from costmodel import Link, get_preset
from graphs import zoo

logger = logging.getLogger(__name__)

MODEL, MESH, TOPOLOGY = "mixtral-8x7b", "x=8,y=8", "dgx-h100"
BANDWIDTHS_GBPS = (6.25, 12.5, 25.0, 50.0, 100.0, 200.0, 450.0)
MICRO_BATCH = 8                  # sequences per micro-batch (the graph's batch)
MICRO_BATCHES = (1, 8, 32)       # 32k, 262k and 1M tokens per optimizer step
SEQ = 4096
# Every collective priced in full: with the op overlap model (the planner's default) one point
# took 175 s and stopped restricted at a 7.6e-5 gap (32k tokens, 6.25 GB/s, 2026-11-26) where
# "none" is proven optimal in 15 s; the sweep is 21 points. The overlap model hides gradient
# reductions behind compute, which helps experts replicated across nodes (EP inside the node,
# gradients all-reduced over the network) more than all-to-alls, which it never hides: it is
# expected to move points towards "inside the node" (at that one point it chose "across" too).
OVERLAP = "none"
# Points whose free optimum overflows HBM (many micro-batches make replicated experts cheap)
# go to the solver's memory price, which can stop above the gap; each point gets this long
# and the row says its status and gap (an unlimited point ran for more than 10 minutes).
TIME_LIMIT_S = 120.0
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


def inter_node_link() -> Link:
    """The preset's link of the axis that spans nodes (``x``), with its measured-curve terms."""
    mesh = Mesh.parse(MESH)
    links = MeshLinks.build(mesh, get_preset(TOPOLOGY))
    return links.axis(mesh.axis_names[0]).levels[-1][1]


def point(graph: Any, micro_batches: int, bw_gbps: float, link: Link) -> dict[str, Any]:
    """One planned point of the sweep: ``link`` at ``bw_gbps`` GB/s on ``x``."""
    mesh = Mesh.parse(MESH)
    names = mesh.axis_names
    swept = dataclasses.replace(link, beta_s_per_byte=1.0 / (bw_gbps * 1e9))
    start = time.perf_counter()
    result = plan(graph, mesh, topology=TOPOLOGY, training=True, model_name=MODEL,
                  recompute="full", links={"x": swept}, micro_batches=micro_batches,
                  overlap=OVERLAP, time_limit=TIME_LIMIT_S)
    w2 = result.tensors[f"{LAYER}.moe.experts.w2"].placements
    experts = _axes_of_dim(w2, names, 0)
    by_layer = Counter(_axes_of_dim(t.placements, names, 0) for name, t in result.tensors.items()
                       if name.startswith("layers.") and name.endswith(".moe.experts.w2"))
    a2a = [c for r in result.reshards if r.tensor == f"{LAYER}.moe.dispatch.out"
           for c in r.collectives if c.kind == "all_to_all"]
    return {
        "model": MODEL, "mesh": MESH, "overlap": OVERLAP, "micro_batch": MICRO_BATCH,
        "micro_batches": micro_batches, "tokens": MICRO_BATCH * SEQ * micro_batches,
        "inter_node_bw_GBps": bw_gbps, "inter_node_alpha_us": round(link.alpha_s * 1e6, 4),
        "inter_node_launch_us": round(link.launch_s * 1e6, 4),
        "step_s": result.objective.total_s, "comm_s": result.objective.comm_s,
        "hidden_s": result.objective.hidden_s, "optimal": result.objective.optimal,
        "status": result.objective.status, "gap": result.objective.gap,
        "expert_axes": experts, "experts_placed": _where(experts, names[-1]),
        # a memory-priced plan may mix two layer plans block by block (solver.block_mix)
        "expert_axes_by_layer": ";".join(f"{axes}:{n}" for axes, n in sorted(by_layer.items())),
        "expert_ffn_axes": _axes_of_dim(w2, names, 1),
        "dispatch_all_to_all_axes": ";".join(sorted({",".join(c.axes) for c in a2a})) or "-",
        "attention": result.ops[f"{LAYER}.attn.core"].strategy,
        "peak_gib": round(result.peak_bytes_per_device / 2**30, 2),
        "plan_s": round(time.perf_counter() - start, 2)}


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    link = inter_node_link()
    graph = zoo.build(MODEL, batch=MICRO_BATCH, seq=SEQ, layers=4 if quick else None)
    rows = []
    for micro_batches in (MICRO_BATCHES[::2] if quick else MICRO_BATCHES):
        for bw in (BANDWIDTHS_GBPS[:: 6] if quick else BANDWIDTHS_GBPS):
            rows.append(point(graph, micro_batches, bw, link))
            logger.info("moe-links bench %s", rows[-1])
    path = out_dir / "moe_links.csv"
    return [write_csv(path, pd.DataFrame(rows))]
