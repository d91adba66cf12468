"""``autoshard bench context-parallel``: Llama-3.1-8B training at 128k tokens, with and without
context parallelism, and the memory that decides it.

One sequence of 131,072 tokens (batch 1), AdamW, no recomputation, on ``dgx-h100``: on 16
devices (``cp=2,tp=8``: two nodes of eight; the axis names mean nothing to the planner) and on
8 (``tp=8``). Per mesh, three searches:

* ``search``: every strategy (ring attention included; Ulysses' all-to-alls are ordinary
  reshards around a head-sharded attention);
* ``no ring``: ring attention left out (:func:`ring_attention`);
* ``tp+sp``: Megatron's tensor + sequence parallelism only: no ring, and no matmul shards the
  sequence (:func:`sequence_sharded_matmul`), so the sequence is split only where Megatron's
  sequence parallelism splits it (norms, residuals, elementwise ops), never for attention.

Each row gives the step time, the peak memory per device and its split at the peak step
(params, grads, optimizer, activations) and the activations saved for backward; a search with
no plan that fits gives the smallest peak any plan reaches (``needed_gib``), which is the
memory that rules it out. ``attention`` is the chosen strategy of a middle layer's attention
(``s*``: ring attention over those axes; ``hk``/``g``: heads).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from autoshard.errors import MemoryTooSmallError
from autoshard.planning.planner import plan
from autoshard.provenance import write_csv
from autoshard.sharding.mesh import Mesh
from autoshard.strategies.derive import Strategy
from graphs import Op, zoo

logger = logging.getLogger(__name__)

MODEL, SEQ = "llama3.1-8b", 131072
MESHES = ("cp=2,tp=8", "tp=8")
GIB = 2.0**30


def ring_attention(op: Op, strategy: Strategy) -> bool:
    """Ring attention: an attention (or its backward) with its sequence hand-sharded."""
    return op.kind.startswith("attention") and "s*" in strategy.per_axis


def sequence_sharded_matmul(op: Op, strategy: Strategy) -> bool:
    """A zoo matmul (einsum whose letter ``s`` is the sequence) sharding the sequence: what
    context parallelism does and Megatron's sequence parallelism does not."""
    return op.kind == "einsum" and "s" in op.attrs["equation"].split("->")[0] \
        and "s" in strategy.per_axis


VARIANTS: dict[str, Callable[[Op, Strategy], bool] | None] = {
    "search": None,
    "no ring": ring_attention,
    "tp+sp": lambda op, s: ring_attention(op, s) or sequence_sharded_matmul(op, s),
}


def _row(mesh_text: str, variant: str, graph: Any) -> dict[str, Any]:
    mesh = Mesh.parse(mesh_text)
    row: dict[str, Any] = {"model": MODEL, "seq": SEQ, "mesh": mesh_text, "devices": mesh.size,
                           "variant": variant}
    start = time.perf_counter()
    try:
        result = plan(graph, mesh, training=True, exclude=VARIANTS[variant],
                      model_name=MODEL)
    except MemoryTooSmallError as exc:
        row.update(feasible=False, needed_gib=round(exc.needed_bytes / GIB, 2),
                   plan_s=round(time.perf_counter() - start, 2))
        return row
    breakdown = result.memory_breakdown
    middle = next(name for name in result.ops if name.endswith(".attn.core")
                  and name.startswith("layers.") and not name.startswith("layers.0."))
    row.update(
        feasible=True, step_s=result.objective.total_s, compute_s=result.objective.compute_s,
        comm_s=result.objective.comm_s, hidden_s=result.objective.hidden_s,
        optimal=result.objective.optimal, peak_gib=round(result.peak_bytes_per_device / GIB, 2),
        **{f"{k}_gib": round(breakdown.get(k, 0.0) / GIB, 2)
           for k in ("params", "grads", "optimizer", "activations", "activations_saved")},
        attention=result.ops[middle].strategy,
        ulysses_all_to_alls=sum(1 for r in result.reshards if r.consumer == middle
                                for c in r.collectives if c.kind == "all_to_all"),
        plan_s=round(time.perf_counter() - start, 2))
    return row


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    seq = 8192 if quick else SEQ
    graph = zoo.build(MODEL, seq=seq, batch=1, layers=2 if quick else None)
    rows = []
    for mesh_text in MESHES:
        for variant in VARIANTS:
            rows.append({**_row(mesh_text, variant, graph), "seq": seq})
            logger.info("context-parallel bench %s", rows[-1])
    path = out_dir / "context_parallel.csv"
    return [write_csv(path, pd.DataFrame(rows))]
