"""``autoshard bench fidelity``: the planner's step time against published training runs.

Each row of ``results/fidelity/measured.csv`` (torchtitan, llm-foundry, NeMo, Megatron-Bridge,
Megatron-LM tables, every figure as published with its source) becomes a planning job
(:mod:`.fidelity_setup`): the run's model, its mesh and named hand plan (``--strategy``), its
recompute and micro-batching on the matching preset. The plan's tokens per second per GPU is
compared with the measured one (``ratio`` = predicted / measured), and the step is split into
compute, exposed and hidden communication; ``compute_scale_to_match`` is the factor the compute
term would need (communication held) to reproduce the measured step. Rows the planner cannot
express are written with ``skipped: <reason>``.

Writes ``fidelity.csv`` (one row per measured row), ``fidelity_summary.txt`` (median
|ratio − 1| against the 25 % target, Spearman per group of ≥ 4 runs on one model, GPU and GPU
count against 0.8, skip reasons) and ``fidelity.png`` (predicted vs measured, log-log, y = x and
±25 % bands). Nothing is tuned to the rows: the prices are the presets' as shipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

import autoshard
from autoshard.bench.fidelity_models import model_config, model_key
from autoshard.bench.fidelity_report import summary_text, write_plot
from autoshard.bench.fidelity_rows import MeasuredRow, read_measured
from autoshard.bench.fidelity_setup import Job, job_for
from autoshard.errors import AutoshardError, MemoryTooSmallError, UsageError
from autoshard.provenance import header_lines, write_csv
from autoshard.sharding.mesh import Mesh
from costmodel import format_bytes, get_preset, with_attention_kernel
from graphs import zoo

logger = logging.getLogger(__name__)

MEASURED = Path("fidelity") / "measured.csv"
QUICK_ROWS = (
    "llmfoundry-a10080gb-ampbf16-mpt125m-s2048-g8-mb40",
    "llmfoundry-a10080gb-ampbf16-mpt125m-s8192-g8-mb8",
    "tt2412-t5-1f1b",
    "tt2412-t1-float8",
)
"""``--quick``: two small runnable rows and two skipped ones (fp8, one of them pipelined)."""
TIME_LIMIT_S = 120.0
_INT_COLUMNS = ("gpus", "micro_batches", "params_published", "params_model")
UNBOUNDED_BYTES = 1e15


def measured_path(out_dir: Path) -> Path:
    """``OUT/fidelity/measured.csv`` when it exists (``--out results`` in a checkout), else
    the repository's copy next to the package sources."""
    given = Path(out_dir) / MEASURED
    if given.is_file():
        return given
    checkout = Path(__file__).resolve().parents[2] / "results" / MEASURED
    if checkout.is_file():
        return checkout
    raise UsageError(f"no measured runs at {given} or {checkout}; run the bench from a checkout "
                     "of the repository (results/fidelity/measured.csv)")


def run(out_dir: Path, quick: bool = False, measured: Path | None = None) -> list[Path]:
    """Predict every measured row (``quick``: :data:`QUICK_ROWS` only) and write the CSV,
    summary and plot under ``out_dir``."""
    rows = read_measured(measured or measured_path(out_dir))
    if quick:
        rows = [row for row in rows if row.row_id in QUICK_ROWS]
    frame = pd.DataFrame([evaluate(row) for row in rows])
    for column in _INT_COLUMNS:
        frame[column] = frame[column].astype("Int64")
    out_dir = Path(out_dir)
    csv_path = out_dir / "fidelity.csv"
    write_csv(csv_path, frame)
    text = summary_text(frame)
    summary = out_dir / "fidelity_summary.txt"
    summary.write_text("\n".join(header_lines()) + "\n\n" + text)
    print(text)  # the bench's verdict on stdout, as the issue asks
    return [csv_path, summary, write_plot(frame, out_dir / "fidelity.png")]


def evaluate(row: MeasuredRow) -> dict[str, Any]:
    """One output row: the prediction and its decomposition, or the reason for a skip."""
    job = job_for(row)
    record = _base(row)
    if isinstance(job, str):
        return {**record, "skipped": f"skipped: {job}"}
    logger.info("planning %s: %s on %s, %s", row.row_id, job.model, job.mesh, job.strategy)
    try:
        plan, memory_note = plan_job(job)
    except AutoshardError as exc:
        return {**record, "skipped": f"skipped: the planner refused the job: {exc}"}
    return {**record, **_prediction(job, plan),
            "approximations": "; ".join(filter(None, (*job.approximations, memory_note))),
            "skipped": ""}


def plan_job(job: Job) -> tuple[Any, str]:
    """The plan of ``job`` (the run's hand plan on its preset) and a note when the planner's
    memory model needed more than the preset's HBM (then it plans without the limit: the run
    did fit on its hardware, and the step time is what is compared)."""
    row = job.row
    graph = zoo.build_config(model_config(job.model, seq=int(row.seq or 0),
                                          batch=job.graph_batch))
    topology = get_preset(job.topology)
    if job.attention_kernel:
        topology = with_attention_kernel(topology, job.attention_kernel)
    options = {"topology": topology, "training": True, "recompute": job.recompute,
               "strategy": job.strategy, "micro_batches": job.micro_batches,
               "time_limit": TIME_LIMIT_S, "model_name": job.model}
    mesh = Mesh.parse(job.mesh)
    try:
        return autoshard.plan(graph, mesh, **options), ""
    except MemoryTooSmallError as exc:
        plan = autoshard.plan(graph, mesh, memory_limit=UNBOUNDED_BYTES, **options)
        needs = "needs" if exc.exact else "needs at least"
        return plan, (f"the memory model {needs} {format_bytes(exc.needed_bytes)} per device, "
                      f"over the preset's {format_bytes(exc.limit_bytes)}; planned without "
                      "the limit")


def group_of(row: MeasuredRow) -> str:
    """Runs compared for ranking: one model on one GPU type and count."""
    return f"{model_key(row.model) or row.model} on {row.gpus} x {row.gpu}"


def _base(row: MeasuredRow) -> dict[str, Any]:
    return {"row_id": row.row_id, "source_id": row.source_id, "group": group_of(row),
            "model": row.model, "gpu": row.gpu, "gpus": row.gpus, "mesh": "", "strategy": "",
            "recompute": row.recompute, "topology": "", "attention_kernel": "",
            "micro_batches": None,
            "measured": row.measured, "predicted": None, "ratio": None,
            "measured_step_s": _measured_step_s(row), "predicted_step_s": None,
            "compute_s": None, "exposed_comm_s": None, "hidden_comm_s": None,
            "compute_scale_to_match": None, "predicted_mfu": None,
            "params_published": row.params, "params_model": None,
            "memory_gib_published": row.memory_gib, "predicted_peak_gib": None,
            "approximations": "", "skipped": ""}


def _measured_step_s(row: MeasuredRow) -> float | None:
    """Seconds per step implied by the published tokens/s/GPU (global batch × seq tokens)."""
    if not (row.global_batch and row.seq and row.gpus and row.measured):
        return None
    return round(row.global_batch * row.seq / (row.measured * row.gpus), 6)


def _prediction(job: Job, plan: Any) -> dict[str, Any]:
    objective, throughput = plan.objective, plan.throughput
    predicted = float(throughput["tokens_per_s_per_device"])
    exposed = objective.total_s - objective.compute_s
    measured_step = _measured_step_s(job.row)
    scale = None
    if measured_step is not None and objective.compute_s > 0:
        scale = round((measured_step - exposed) / objective.compute_s, 4)
    config = model_config(job.model, seq=int(job.row.seq or 0), batch=job.graph_batch)
    return {"mesh": job.mesh, "strategy": job.strategy, "recompute": job.recompute,
            "topology": job.topology, "attention_kernel": job.attention_kernel,
            "micro_batches": job.micro_batches,
            "predicted": round(predicted, 3), "ratio": round(predicted / job.row.measured, 4),
            "predicted_step_s": round(objective.total_s, 6),
            "compute_s": round(objective.compute_s, 6), "exposed_comm_s": round(exposed, 6),
            "hidden_comm_s": round(objective.hidden_s, 6), "compute_scale_to_match": scale,
            "predicted_mfu": round(float(throughput["mfu"]), 4),
            "params_model": zoo.param_count(config),
            "predicted_peak_gib": round(plan.peak_bytes_per_device / 2**30, 2)}
