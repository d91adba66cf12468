"""``autoshard bench pipeline``: pipelined plans of the issue's jobs, against a published recipe.

Rows (each planned in its own process; wall seconds around the whole ``plan``, and its CPU
seconds, which a machine shared with other jobs inflates less):

* ``target-70b``: ``plan --model llama3-70b --mesh dp=4,pp=4,tp=4 --training --global-batch
  256 --micro-batch 1`` on dgx-h100 (target: ≤ 15 s, no stage more than one layer's time
  above the mean);
* ``recipe-70b``: the Megatron-Bridge Llama-3-70B pre-training recipe on 64 H100
  (NVIDIA-NeMo/Megatron-Bridge, src/megatron/bridge/recipes/llama/llama3_70b.py at commit
  3594df948093cdb3c5ef4846e5d95f8c4a8584eb: tensor_parallelism 4, pipeline_parallelism 4,
  virtual_pipeline_parallelism 5, context_parallelism 2, sequence_parallelism True,
  global_batch_size 512, micro_batch_size 1, seq_length 8192, use_distributed_optimizer),
  evaluated with pins: the ``megatron-sp-distopt`` hand plan (tensor + sequence parallel,
  distributed optimizer) inside each stage, the interleaved
  schedule with 5 chunks per stage of 4 layers each (Megatron splits the layers evenly).
  autoshard has no context-parallel axis, so the recipe's CP 2 is folded into data
  parallelism (dp = 64 / (4·4) = 4): same devices, same micro-batch per replica, sequence
  whole on each replica;
* ``search-70b-*``: the planner's own choice (schedule auto, layouts searched) for the same
  model and batch on 64 devices over (dp, pp, tp) shapes. The recipe and search rows use
  selective recomputation: without context parallelism each device holds twice the recipe's
  activations, and with none recomputed no 70B plan fits 80 GB on these shapes (the
  ``target-70b`` row shows the shortfall);
* ``target-405b``: llama3.1-405b on ``dp=16,pp=8,tp=8`` (target: fits 80 GB, ≤ 60 s).

``--quick`` runs a small llama-shaped model on 8 devices instead (for the tests).
"""

from __future__ import annotations

import json
import logging
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from autoshard.provenance import write_csv

logger = logging.getLogger(__name__)

JOB_TIMEOUT_S = 900.0  # a job still planning after this is recorded as a timeout
RECIPE = ("NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/recipes/llama/llama3_70b.py "
          "@3594df948093cdb3c5ef4846e5d95f8c4a8584eb")


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    args: tuple[str, ...]
    limit_s: float | None = None


def jobs(quick: bool) -> list[Job]:
    if quick:
        small = ("--model", "llama3-8b", "--layers", "8", "--seq", "128", "--hidden", "256",
                 "--ffn", "512", "--heads", "8", "--training", "--global-batch", "32",
                 "--micro-batch", "2")
        return [Job("quick-pp2", (*small, "--mesh", "dp=2,pp=2,tp=2")),
                Job("quick-recipe", (*small, "--mesh", "dp=2,pp=2,tp=2", "--strategy",
                                     "megatron-sp", "--schedule", "interleaved"))]
    batch70 = ("--model", "llama3-70b", "--training", "--global-batch", "512",
               "--micro-batch", "1", "--recompute", "selective")
    target70 = ("--model", "llama3-70b", "--mesh", "dp=4,pp=4,tp=4", "--training",
                "--global-batch", "256", "--micro-batch", "1")
    return [
        Job("target-70b", target70, 15.0),
        Job("target-70b-selective", (*target70, "--recompute", "selective"), 15.0),
        Job("recipe-70b", (*batch70, "--mesh", "dp=4,pp=4,tp=4", "--strategy",
                           "megatron-sp-distopt",
                           "--schedule", "interleaved", "--virtual-stages", "5",
                           "--stages", ",".join(["4"] * 20))),
        Job("search-70b-dp4-pp4-tp4", (*batch70, "--mesh", "dp=4,pp=4,tp=4")),
        Job("search-70b-dp2-pp4-tp8", (*batch70, "--mesh", "dp=2,pp=4,tp=8")),
        Job("target-405b", ("--model", "llama3.1-405b", "--mesh", "dp=16,pp=8,tp=8",
                            "--training", "--global-batch", "512", "--micro-batch", "1"), 60.0),
    ]


def run_job(job: Job, out_dir: Path) -> dict[str, object]:
    """Plan one job in a fresh process; the row holds the wall time and the plan's numbers."""
    with tempfile.TemporaryDirectory() as scratch:
        return _run_in(job, Path(scratch) / job.name)


def _run_in(job: Job, plan_dir: Path) -> dict[str, object]:
    command = [str(Path(sys.executable).with_name("autoshard")), "plan", *job.args, "--out",
               str(plan_dir), "--force", "--quiet"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"job": job.name, "args": " ".join(job.args), "wall_s": JOB_TIMEOUT_S,
                "limit_s": job.limit_s, "exit": "timeout"}
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row: dict[str, object] = {"job": job.name, "args": " ".join(job.args), "wall_s": wall,
                              "cpu_s": cpu, "limit_s": job.limit_s, "exit": done.returncode}
    if done.returncode != 0:
        row["error"] = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
        return row
    plan = json.loads((plan_dir / "plan.json").read_text())
    pipe = plan.get("pipeline", {})
    stages = pipe.get("stage", [])
    busy = [s["busy_s"] for s in stages]
    layer_s = (stages[1]["busy_s"] / (stages[1]["layers"][0][1] - stages[1]["layers"][0][0])
               if len(stages) > 1 and pipe.get("chunks_per_stage") == 1 else float("nan"))
    row.update({
        "step_s": plan["objective"]["total_s"], "schedule": pipe.get("schedule"),
        "chunks_per_stage": pipe.get("chunks_per_stage"),
        "micro_batches": pipe.get("micro_batches"),
        "layers_per_chunk": " ".join(map(str, pipe.get("layers_per_chunk", []))),
        "bubble_fraction": pipe.get("bubble_fraction"),
        "busiest_minus_mean_s": max(busy) - sum(busy) / len(busy) if busy else None,
        "one_layer_s": layer_s,
        "peak_gib": plan["memory"]["peak_bytes_per_device"] / 2**30,
        "limit_gib": plan["memory"]["limit_bytes"] / 2**30,
        "mfu": (plan.get("throughput") or {}).get("mfu"),
        "intra_optimal": plan["objective"]["optimal"],
    })
    return row


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    rows = []
    for job in jobs(quick):
        logger.info("pipeline bench: %s", job.name)
        rows.append(run_job(job, out_dir))  # plans go to a scratch folder
    frame = pd.DataFrame(rows)
    path = out_dir / ("pipeline_quick.csv" if quick else "pipeline.csv")
    return [write_csv(path, frame, (f"recipe: {RECIPE}",), float_format="%.6g")]
