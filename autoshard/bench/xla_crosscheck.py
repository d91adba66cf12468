"""``autoshard bench xla-crosscheck``: the collectives our plans predict against the ones XLA's
SPMD partitioner inserts when the same plan is applied to the same JAX program.

For each case (model × mesh × forward/value_and_grad) a fresh process with 8 virtual CPU
devices (:mod:`autoshard.bench.xla_case`) imports the plain-JAX model, plans it under a memory
budget squeezed below the unconstrained plan's peak (so weights get sharded, not just data),
applies the plan's PartitionSpecs to arguments, outputs and planned activations, compiles, and
reads the HLO after ``spmd-partitioning``. ``results/xla_crosscheck.csv`` has one row per case ×
collective kind × mesh axes: predicted count (``predicted``: every collective of every planned
reshard; ``predicted_cpu``: each tensor's reshard between two layouts once, reduce-scatter as
the all-reduce XLA's CPU partitioner writes), XLA's count (after partitioning, and in the
final compiled module), whether they match, and the sharded-vs-one-device max relative error.
Each case also records whether its plan is proven optimal (``status``, ``gap``): a squeezed plan
that stops at the time limit is the solver's best so far, which depends on how fast the machine
is, so such cases can differ from run to run. Column ``difference`` names why a row's counts
differ (:func:`difference`); results/README.md explains each name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from autoshard.provenance import write_csv

MESHES = ("x=8", "dp=2,tp=4")
MODES = ("fwd", "grad")
SQUEEZE = (0.3, 0.5, 0.75)
GPT = {"hidden": 768, "heads": 12, "ffn": 3072, "batch": 4, "seq": 64}
MLP = {"hidden": 1024, "ffn": 4096, "batch": 64}
QUICK_GPT = {"hidden": 192, "heads": 12, "ffn": 768, "batch": 4, "seq": 16}
QUICK_MLP = {"hidden": 256, "ffn": 1024, "batch": 64}


def cases(quick: bool) -> list[dict[str, Any]]:
    """Every case as the JSON a child process reads."""
    out: list[dict[str, Any]] = []
    meshes = ("dp=2,tp=4",) if quick else MESHES
    for mesh in meshes:
        for mode in MODES:
            out.append({"model": "mlp", "layers": 0, "mesh": mesh, "mode": mode,
                        **(QUICK_MLP if quick else MLP)})
    for layers in ((1,) if quick else (1, 4, 12)):
        for mesh in meshes:
            for mode in (("fwd",) if quick else MODES):
                out.append({"model": "gpt", "layers": layers, "mesh": mesh, "mode": mode,
                            **(QUICK_GPT if quick else GPT)})
    for case in out:
        case["name"] = f"{case['model']}{case['layers'] or ''}-{case['mode']}-" \
                       f"{case['mesh'].replace('=', '').replace(',', 'x')}"
        case["squeeze"], case["time_limit"] = list(SQUEEZE), 120
    return out


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Run one case in a child process with its own XLA flags and dump directory."""
    with tempfile.TemporaryDirectory(prefix="xla-crosscheck-") as dump_dir:
        env = {**os.environ, "JAX_PLATFORMS": "cpu",
               "XLA_FLAGS": f"--xla_force_host_platform_device_count=8 "
                            f"--xla_dump_to={dump_dir} --xla_dump_hlo_pass_re=spmd-partitioning "
                            f"--xla_dump_hlo_module_re=jit_sharded"}
        payload = json.dumps({**case, "dump_dir": dump_dir})
        result = subprocess.run([sys.executable, "-m", "autoshard.bench.xla_case"],
                                input=payload, capture_output=True, text=True, env=env,
                                timeout=1800, check=False)
    if result.returncode != 0:
        tail = result.stderr.strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"xla-crosscheck case {case['name']} failed: {tail[0]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def rows_of(case: dict[str, Any], answer: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per collective kind × axes seen by either side (one "none" row if neither)."""
    tables = {key: {(k, a): n for k, a, n in answer[key]}
              for key in ("predicted", "predicted_cpu", "xla", "xla_final")}
    keys = sorted(set().union(*tables.values()))
    common = {"case": case["name"], "model": case["model"], "layers": case["layers"],
              "mesh": case["mesh"], "mode": case["mode"], "hidden": case["hidden"],
              "memory_limit_bytes": answer["memory_limit"],
              "sharded_params": f"{answer['sharded_params']}/{answer['params']}",
              "max_rel_err": answer["max_rel_err"], "plan_s": round(answer["plan_s"], 3),
              "compile_s": round(answer["compile_s"], 3), "status": answer["status"],
              "gap": answer["gap"]}
    rows = []
    for kind, axes in keys or [("none", "")]:
        ours = tables["predicted"].get((kind, axes), 0)
        xla = tables["xla"].get((kind, axes), 0)
        cpu = tables["predicted_cpu"].get((kind, axes), 0)
        rows.append({**common, "collective": kind, "axes": axes, "predicted": ours,
                     "predicted_cpu": cpu, "xla": xla,
                     "xla_final": tables["xla_final"].get((kind, axes), 0),
                     "match": ours == xla, "match_cpu": cpu == xla,
                     "difference": difference(kind, axes, ours, cpu, xla)})
    return rows


def difference(kind: str, axes: str, predicted: int, predicted_cpu: int, xla: int) -> str:
    """Why a row's counts differ, from the counts alone (empty when they match):

    * ``cpu-reduce-scatter``: the plan's reduce-scatters, which XLA's CPU partitioner writes as
      all-reduce + dynamic-slice (no reduce-scatter is ever inserted on CPU);
    * ``per-consumer``: equal once each tensor's reshard between two layouts counts once and
      reduce-scatters count as all-reduces (``predicted_cpu``); the plan lists a reshard per
      consumer, XLA shares one;
    * ``sub-axis``: device groups that are no product of mesh axes, which XLA uses for tensors
      the plan keeps in a sub-axis layout (no PartitionSpec, so left unconstrained);
    * ``xla-permute``: collective-permutes, which the plan never prices for these meshes: XLA
      moves blocks after its all-reduce + slice, or between layouts it chose itself;
    * ``xla-path``: the rest: XLA's partitioner implements the layout changes (and reduces the
      Partial values, which cannot be constrained) with other collectives than the plan's path.

    Example:
        >>> difference("reduce-scatter", "tp", 3, 0, 0), difference("all-gather", "x", 9, 8, 8)
        ('cpu-reduce-scatter', 'per-consumer')
    """
    if predicted == xla:
        return ""
    if kind == "reduce-scatter" and xla == 0:
        return "cpu-reduce-scatter"
    if predicted_cpu == xla:
        return "per-consumer"
    if axes == "?":
        return "sub-axis"
    if kind == "collective-permute" and predicted_cpu == 0:
        return "xla-permute"
    return "xla-path"


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    rows: list[dict[str, Any]] = []
    for case in cases(quick):
        rows.extend(rows_of(case, run_case(case)))
    path = out_dir / ("xla_crosscheck_quick.csv" if quick else "xla_crosscheck.csv")
    return [write_csv(path, pd.DataFrame(rows), float_format="%.6g")]
