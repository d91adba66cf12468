"""``autoshard bench solver``: time to proven optimality (or gap at a limit) per backend.

Synthetic transformer-shaped problems as in docs/solver-backends.md: layers of 16 ops (ln1, q, k, v,
scores, softmax, dropout, av, out-proj, add1, ln2, fc1, gelu, fc2, dropout, add2; 20 edges per
layer including the two residual skips) with 5–29 options per op. Every option has an output
layout; an edge costs 0 when the producer's layout is what the consumer needs and a resharding
price otherwise; memory falls with parallelism. The memory limit sits 43.7% of the way from the
leanest plan to the memory of the unconstrained optimum, so it binds. Rows compare backends,
with and without the exact reductions, against the reference points of the issue.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd

from autoshard.provenance import write_csv
from solver import ChoiceProblem, solve

logger = logging.getLogger(__name__)

LAYER_OPTIONS = (5, 19, 19, 19, 29, 11, 11, 29, 19, 11, 5, 19, 11, 19, 11, 11)
# (producer, consumer) inside a layer; -1 is the previous layer's add2 (or the embedding)
LAYER_EDGES = ((-1, 0), (0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (4, 5), (5, 6), (6, 7), (3, 7),
               (7, 8), (8, 9), (-1, 9), (9, 10), (10, 11), (11, 12), (12, 13), (13, 14),
               (14, 15), (9, 15))
LAYOUTS = 8
BUDGET_POSITION = 0.437
REFERENCE = {("cpsat", 100): 6.4, ("highs", 5000): 49.0, ("dp", 1000): 0.7, ("dp", 20000): 13.0}


def _op_table(rng: np.random.Generator, options: int) -> tuple[np.ndarray, ...]:
    parallel = rng.choice([1, 2, 4, 8], size=options)
    parallel[0] = 1
    cost = rng.uniform(50, 150) / parallel + rng.uniform(0, 20, options)
    memory = np.ceil(rng.uniform(2e8, 6e8) / parallel + rng.uniform(0, 5e7, options))
    return cost, memory, rng.integers(0, LAYOUTS, options), rng.integers(0, LAYOUTS, options)


def _edge(rng: np.random.Generator, out_layout: np.ndarray, in_layout: np.ndarray) -> np.ndarray:
    price = rng.uniform(5, 60, (LAYOUTS, LAYOUTS))
    np.fill_diagonal(price, 0.0)
    price[rng.random((LAYOUTS, LAYOUTS)) < 0.2] = 0.0  # slices are free
    return price[out_layout][:, in_layout]


def transformer_problem(nodes: int, seed: int = 0) -> ChoiceProblem:
    """About ``nodes`` nodes: 2 boundary ops plus identical 16-op layers; costs in µs."""
    rng = np.random.default_rng(seed)
    layers = max(1, (nodes - 2) // 16)
    ops = [_op_table(rng, k) for k in LAYER_OPTIONS]
    inner = {pair: _edge(rng, ops[pair[0]][3], ops[pair[1]][2]) for pair in LAYER_EDGES
             if pair[0] >= 0}
    embed = _op_table(rng, 11)
    skip = {c: _edge(rng, ops[15][3], ops[c][2]) for c in (0, 9)}
    first = {c: _edge(rng, embed[3], ops[c][2]) for c in (0, 9)}
    head = _op_table(rng, 19)
    costs, memory, edges = [embed[0]], [embed[1]], []
    for layer in range(layers):
        base = 1 + 16 * layer
        costs += [op[0] for op in ops]
        memory += [op[1] for op in ops]
        for (u, v) in LAYER_EDGES:
            if u >= 0:
                edges.append((base + u, base + v, inner[(u, v)]))
            else:
                source = 0 if layer == 0 else base - 1
                edges.append((source, base + v, (first if layer == 0 else skip)[v]))
    costs.append(head[0])
    memory.append(head[1])
    edges.append((len(costs) - 2, len(costs) - 1, _edge(rng, ops[15][3], head[2])))
    free = solve(ChoiceProblem(node_costs=costs, edges=edges), backend="dp")
    low = sum(float(m.min()) for m in memory)
    high = sum(float(m[c]) for m, c in zip(memory, free.choices, strict=True))
    return ChoiceProblem(node_costs=costs, edges=edges, node_memory=memory,
                         memory_limit=float(np.floor(low + BUDGET_POSITION * (high - low))))


def _plan(quick: bool) -> list[tuple[int, str, bool, float]]:
    if quick:
        return [(100, "auto", True, 10.0), (100, "dp", True, 10.0), (100, "dp", False, 10.0),
                (100, "highs", True, 10.0), (100, "cpsat", True, 10.0),
                (400, "auto", True, 10.0), (400, "dp", True, 10.0)]
    plan = [(100, m, r, 20.0) for m, r in (("auto", True), ("dp", True), ("dp", False),
                                           ("highs", True), ("highs", False), ("cpsat", True),
                                           ("cpsat", False))]
    plan += [(1000, m, r, 30.0) for m, r in (("auto", True), ("dp", True), ("dp", False),
                                            ("highs", True), ("cpsat", True))]
    plan += [(5000, m, True, 45.0) for m in ("auto", "dp", "highs")]
    plan += [(20000, m, r, 90.0) for m, r in (("auto", True), ("dp", True), ("dp", False))]
    return plan


def _measure(problem: ChoiceProblem, backend: str, reductions: bool, limit: float) -> dict:
    start = time.perf_counter()
    sol = solve(problem, time_limit=limit, backend=backend, reductions=reductions)
    seconds = time.perf_counter() - start
    stats = sol.stats
    return {"backend": backend, "reductions": reductions, "time_limit_s": limit,
            "seconds": round(seconds, 3), "status": sol.status.name.lower(),
            "objective": sol.objective, "bound": sol.bound, "gap": sol.gap,
            "used": stats.backend, "nodes_after": stats.nodes_after,
            "options_before": stats.options_before, "options_after": stats.options_after,
            "reduce_s": round(stats.phase("reduce"), 3), "dp_s": round(stats.phase("dp"), 3)}


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    """Write ``solver.csv`` and ``solver.png`` under ``out_dir``; return their paths."""
    rows, problems = [], {}
    for nodes, backend, reductions, limit in _plan(quick):
        if nodes not in problems:
            problems[nodes] = transformer_problem(nodes)
        problem = problems[nodes]
        row = {"nodes": problem.num_nodes, "edges": len(problem.edges)}
        row.update(_measure(problem, backend, reductions, limit))
        ref = REFERENCE.get((backend if backend != "auto" else "", nodes))
        row["reference_s"] = ref
        logger.info("solver bench %s", row)
        rows.append(row)
    frame = pd.DataFrame(rows)
    csv_path, png_path = out_dir / "solver.csv", out_dir / "solver.png"
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(csv_path, frame)
    _plot(frame, png_path)
    return [csv_path, png_path]


def _plot(frame: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (backend, reductions), part in frame.groupby(["backend", "reductions"], sort=True):
        label = f"{backend}{'' if reductions else ' (no reductions)'}"
        ax.plot(part["nodes"], part["seconds"], marker="o", label=label)
    for (backend, nodes), seconds in sorted(REFERENCE.items()):
        ax.scatter([nodes], [seconds], marker="x", color="black")
        ax.annotate(f"ref {backend}", (nodes, seconds), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("seconds (to optimality or the time limit)")
    ax.set_title("solver: synthetic transformer problems, binding memory limit")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
