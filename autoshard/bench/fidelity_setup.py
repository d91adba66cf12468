"""A published run as a planning job (mesh, named hand plan, preset, recompute, batch), or the
reason it cannot be one.

The planner evaluates the run's own layout through the named strategies
(:mod:`autoshard.planning.named`): FSDP / ZeRO-3 → ``fsdp`` on an ``fsdp`` axis, PyTorch FSDP
``SHARD_GRAD_OP`` → ``zero2``, DDP → ``ddp``; tensor parallelism → ``megatron`` (``megatron-sp``
when the source uses sequence-parallel norms) with the data axis named for its sharding. What
the bench cannot express is skipped with the reason (experts, fp8 matmuls, asynchronous TP,
layer-interval checkpointing, a GPU without a preset, a setup cell the source leaves empty,
then pipeline stages and context parallelism, which no named hand plan places); what it prices
approximately is listed with the row. Each framework's attention kernel is priced as the one
its runs called (:data:`ATTENTION_KERNELS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoshard.bench.fidelity_models import model_key
from autoshard.bench.fidelity_rows import TOKENS_PER_S_PER_GPU, MeasuredRow
from autoshard.errors import UsageError
from autoshard.planning.batch import batch_plan
from autoshard.sharding.mesh import Mesh

_HBM2E_H100 = ("measured on HBM2e H100s at reduced power ({0}); the preset is the 80 GB HBM3 "
               "H100 SXM at 3.35 TB/s and 700 W")
GPU_PRESETS: dict[str, tuple[str, str]] = {
    # published GPU text: (preset, how the measured hardware differs from it; "" = it does not)
    "H100 96GB HBM2e 500W (Grand Teton)": (
        "dgx-h100", _HBM2E_H100.format("96 GB at 2.4 TB/s, 500 W")),
    "H100 94GB HBM2e lower TDP": (
        "dgx-h100", _HBM2E_H100.format("peak between SXM and NVL per the source")),
    "DGX-H100": ("dgx-h100", ""),
    "H100": ("dgx-h100", ""),
    "h100_80gb": ("dgx-h100", ""),
    "A100 80GB": ("dgx-a100", ""),
    "a100_80gb": ("dgx-a100", ""),
    "a100_40gb": ("dgx-a100-40gb", ""),
}
_NO_PRESET: dict[str, str] = {}
SKIP_FEATURES = {
    "async-tp": "async TP (tensor-parallel collectives overlapped with the GEMMs) is not "
                "modelled",
    "activation-cpu-offload": "activation CPU offload is not modelled",
}
APPROXIMATE_FEATURES = {
    "torch.compile": "torch.compile not modelled (priced as eager kernels)",
    "fsdp-mixed-precision-DEFAULT": "FSDP reduces gradients in fp32 (mixed precision "
                                    "DEFAULT); the plan reduces bf16 gradients",
    "sharding-SHARD_GRAD_OP": "FSDP SHARD_GRAD_OP as ZeRO-2 (parameters gathered once per "
                              "step)",
}
_TORCHTITAN_FP32_REDUCE = ("FSDP2 reduces gradients in fp32 (torchtitan's default "
                           "training.mixed_precision_reduce = 'float32'); the plan reduces bf16 "
                           "gradients")
_KNOWN_FEATURES = {"sequence-parallel", "fsdp-mixed-precision-PURE", "sharding-FULL_SHARD"}
RECOMPUTE = {"none": "none", "full": "full", "selective": "selective",
             "selective-op": "selective-op"}
ATTENTION_KERNELS: dict[str, str] = {
    # framework: the attention kernel its benchmark runs called (costmodel.AttentionKernel)
    #
    # llm-foundry: `attn_impl: triton`, the Triton FlashAttention
    # (llmfoundry/models/layers/flash_attn_triton.py). The tables' runs were submitted by
    # scripts/train/benchmarking/sweep.sh, which passes no --attn_impl, so
    # submit_benchmarks.py's default applies: 'triton' from 9fa3ceb9a (2023-04-04) until
    # 7f0fdae66 (2024-03-26); the tables were last changed on 2024-01-06 (5e85bd62d).
    "llm-foundry": "triton",
    # torchtitan: F.scaled_dot_product_attention (torchtitan/models/llama/model.py at
    # 9dec370), whose flash backend is FlashAttention-2 (PyTorch 2.2 release notes), not
    # FlashAttention-3.
    "torchtitan": "fa2",
}
"""The attention kernel per framework; a framework not listed keeps the preset's."""
REQUIRED = ("gpus", "dp", "dp_sharding", "micro_batch", "global_batch", "seq")


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """What the bench plans for one runnable row."""

    row: MeasuredRow
    model: str
    mesh: str
    strategy: str
    recompute: str
    topology: str
    graph_batch: int
    micro_batches: int
    approximations: tuple[str, ...]
    attention_kernel: str = ""


def job_for(row: MeasuredRow) -> Job | str:
    """The planning job of ``row``, or why it has none (a sentence, no "skipped:" prefix)."""
    reason = _unsupported(row)
    if reason:
        return reason
    key = model_key(row.model)
    if key is None:
        return f"no model graph for {row.model}"
    if row.gpu not in GPU_PRESETS:
        return _NO_PRESET.get(row.gpu, f"no topology preset for the GPU {row.gpu}")
    missing = [name for name in REQUIRED if getattr(row, name) in (None, "")]
    if missing:
        return f"{', '.join(missing)} not stated"
    product = row.dp * row.degree("tp") * row.degree("pp") * row.degree("cp")
    if product != row.gpus:
        return f"dp×tp×pp×cp = {product} is not the {row.gpus} GPUs the row states"
    layout = _layout(row)
    if isinstance(layout, str):
        return layout
    mesh, strategy = layout
    try:
        batch = batch_plan(Mesh.parse(mesh), global_batch=row.global_batch,
                           micro_batch=row.micro_batch)
    except UsageError as exc:
        return f"the batch does not divide: {exc}"
    if row.grad_accum is not None and row.grad_accum != batch.micro_batches:
        return (f"grad_accum {row.grad_accum} is not global_batch / (micro_batch × dp) = "
                f"{batch.micro_batches}")
    preset, hardware = GPU_PRESETS[row.gpu]
    return Job(row=row, model=key, mesh=mesh, strategy=strategy,
               recompute=RECOMPUTE[row.recompute], topology=preset,
               graph_batch=int(batch.graph_batch or 0), micro_batches=batch.micro_batches,
               approximations=_approximations(row, hardware),
               attention_kernel=ATTENTION_KERNELS.get(row.framework, ""))


def _unsupported(row: MeasuredRow) -> str | None:
    """The first feature of ``row`` the planner lacks, in a fixed order."""
    if row.unit != TOKENS_PER_S_PER_GPU:
        return (f"{row.unit} is not compared (model-FLOPs figures need the source's own FLOP "
                "count); only tokens/s/GPU rows are")
    if row.degree("ep") > 1:
        return f"expert parallelism (MoE) (EP={row.degree('ep')}) is not modelled"
    precision = row.precision.lower()
    if not precision:
        return "precision not stated"
    if "fp8" in precision or "float8" in precision:
        return ("fp8 matmuls with bf16 elsewhere are not modelled (the graph has one dtype)")
    for feature in row.features:
        if feature in SKIP_FEATURES:
            return SKIP_FEATURES[feature]
    if row.recompute == "selective-layer":
        return "checkpointing every k-th layer (selective layer) is not modelled"
    if row.recompute not in RECOMPUTE:
        return "recompute not stated" if not row.recompute else \
            f"recompute {row.recompute!r} is not modelled"
    return _staged(row)


def _staged(row: MeasuredRow) -> str | None:
    """Why a pipelined or context-parallel row has no job. Checked after every other
    feature, so a row that other features already rule out says so. The planner has both
    (``plan_pipeline`` on a ``pp`` axis; ring attention and Ulysses as strategies) but the
    bench evaluates named hand plans only, and none of them places pipeline stages or shards
    attention over the sequence."""
    if row.degree("pp") > 1:
        return (f"pipeline parallelism (PP={row.degree('pp')}): the bench prices named hand "
                "plans, which place no pipeline stages (plan_pipeline is not driven here)")
    if row.degree("cp") > 1:
        return (f"context parallelism (CP={row.degree('cp')}): no named hand plan shards "
                "attention over the sequence (the search's ring attention is not pinned here)")
    return None


def _layout(row: MeasuredRow) -> tuple[str, str] | str:
    """(mesh, named strategy) for the row's data-parallel sharding and TP degree."""
    dp, tp, sharding = int(row.dp or 1), row.degree("tp"), row.dp_sharding
    if tp == 1:
        table = {"fsdp": ("fsdp", "fsdp"), "zero2": ("dp", "zero2"), "zero1": ("dp", "zero1"),
                 "ddp": ("dp", "ddp")}
        if sharding not in table:
            return f"no named strategy for data-parallel sharding {sharding!r}"
        axis, strategy = table[sharding]
        return f"{axis}={dp}", strategy
    axis = {"fsdp": "fsdp", "ddp": "dp"}.get(sharding)
    if axis is None:
        return f"no named strategy for {sharding!r} with tensor parallelism"
    strategy = "megatron-sp" if "sequence-parallel" in row.features else "megatron"
    return (f"{axis}={dp},tp={tp}" if dp > 1 else f"tp={tp}"), strategy


def _approximations(row: MeasuredRow, hardware: str) -> tuple[str, ...]:
    notes = [hardware] if hardware else []
    if not row.interconnect and row.gpus and row.gpus > 8:
        notes.append("interconnect not stated (priced as the preset's)")
    if row.framework == "torchtitan" and row.dp_sharding == "fsdp" and (row.dp or 1) > 1:
        notes.append(_TORCHTITAN_FP32_REDUCE)
    for feature in row.features:
        if feature in APPROXIMATE_FEATURES:
            notes.append(APPROXIMATE_FEATURES[feature])
        elif feature not in _KNOWN_FEATURES:
            notes.append(f"{feature} not modelled")
    return tuple(notes)
