"""The human summary printed by ``autoshard plan``: what a planner user reads first.

Model, mesh and links; the objective split into compute and communication; memory per device
against the limit; whether the plan is proven optimal; the costliest collectives; and each
parameter's placement, grouped across layers when the layers agree.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

from autoshard.planning.record import Plan
from autoshard.sharding.links import MeshLinks
from costmodel import Link, format_bytes

_LAYER = re.compile(r"(?<=\.)\d+(?=\.)")


def layer_pattern(name: str) -> str:
    """``layers.3.attn.wq`` → ``layers.*.attn.wq``: how reports group a model's layers.

    Example:
        >>> layer_pattern("opt/layers.12.mlp.w1.m"), layer_pattern("final_norm.weight")
        ('opt/layers.*.mlp.w1.m', 'final_norm.weight')
    """
    return _LAYER.sub("*", name)


def format_seconds(seconds: float) -> str:
    """Seconds in s, ms or us, chosen by magnitude (a negative value scales like its
    positive: ``-1.224 s``, not ``-1224494.113 us``)."""
    if abs(seconds) >= 1:
        return f"{seconds:.3f} s"
    if abs(seconds) >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.3f} us"


def link_text(link: Link, ranks: int | None = None) -> str:
    """One link, compactly: name (and ``x ranks``, the part of an axis on it), bandwidth,
    per-step alpha and the measured-curve terms it has (NCCL launch, pipeline fill, bus
    efficiency; a textbook link has none).

    Example:
        >>> from costmodel import get_preset
        >>> link_text(get_preset("dgx-h100").levels[0].link)
        'nvlink 450 GB/s, alpha 0.89 us, launch 6.8 us, fill 17.4 us, bus eff 0.822'
        >>> link_text(Link.from_bandwidth(5e-6, 100e9))
        'written 100 GB/s, alpha 5 us'
    """
    bandwidth = 1.0 / link.beta_s_per_byte if link.beta_s_per_byte else math.inf
    share = "" if ranks is None else f" x{ranks}"
    parts = [f"{link.name or 'written'}{share} {bandwidth / 1e9:.4g} GB/s",
             f"alpha {link.alpha_s * 1e6:.3g} us"]
    if link.launch_s:
        parts.append(f"launch {link.launch_s * 1e6:.3g} us")
    if link.pipeline_s:
        parts.append(f"fill {link.pipeline_s * 1e6:.3g} us")
    if link.bus_efficiency != 1.0:
        parts.append(f"bus eff {link.bus_efficiency:.3g}")
    return ", ".join(parts)


def link_lines(links: MeshLinks) -> list[str]:
    """Per mesh axis: its size and every level its collectives cross, inner first, e.g.
    ``dp (16): nvlink x8 ... + ib x2 ...`` for an axis spanning two nodes of 8."""
    lines = []
    for axis in links.axes:
        levels = [link_text(link, None if len(axis.levels) == 1 else size)
                  for size, link in axis.levels]
        lines.append(f"  {axis.axis} ({axis.size}): {' + '.join(levels) or 'local'}")
    return lines


def summary_text(plan: Plan, outputs: list[str] | None = None,
                 links: MeshLinks | None = None) -> str:
    """What ``autoshard plan`` prints. ``links``: the mesh's links as the plan was priced
    on them, shown with their curve terms (without, the plan's own link rows: axis, size,
    link, alpha and bandwidth of the slowest level)."""
    params = plan.model_parameters  # a pipelined plan's tensors are one stage model's
    if params is None:  # a plan written before the count was recorded
        params = sum(math.prod(rec.shape) for rec in plan.tensors.values()
                     if rec.role == "param")
    lines = [f"model      {plan.model}  ({params:,} parameters)",
             "mesh       " + ", ".join(f"{n}={s}" for n, s in plan.mesh)
             + f"  on {plan.topology}"]
    if links is not None:
        lines.extend(link_lines(links))
    else:
        lines.extend("  " + "  ".join(f"{k}={v}" for k, v in link.items())
                     for link in plan.links)
    lines.append(_step_line(plan))
    if plan.throughput:
        rate = plan.throughput
        mfu = "" if rate.get("mfu") is None else f", MFU {rate['mfu']:.1%}"
        devices = math.prod(size for _, size in plan.mesh)
        whole = rate["tokens_per_s_per_device"] * devices
        lines.append(f"throughput {rate['tokens_per_s_per_device']:,.0f} tokens/s per device "
                     f"({whole:,.0f} tokens/s on all {devices} devices; "
                     f"{rate['tokens_per_step']:,} tokens per step{mfu})")
    lines.append(_solver_line(plan.objective, pipelined=bool(plan.pipeline)))
    limit = format_bytes(plan.limit_bytes) if plan.limit_bytes else "none"
    lines.append(f"memory     {format_bytes(plan.peak_bytes_per_device)} per device "
                 f"(limit {limit})" + _breakdown(plan.memory_breakdown))
    if plan.pins is not None:
        sync = (", gradients reduced at the optimizer step"
                if plan.pins.get("gradient_sync") == "deferred" else "")
        lines.append(f"pinned     {plan.stats.get('pinned_tensors', 0)} tensors by "
                     f"{', '.join(plan.pins.get('sources', ()))}{sync}")
    if plan.verification is not None:
        verdict = "passed" if plan.verification.get("passed") else "FAILED"
        lines.append(f"verified   {plan.verification.get('message') or verdict}")
    lines.extend(_pipeline_lines(plan.pipeline))
    lines.extend(_top_collectives(plan))
    lines.extend(_param_placements(plan))
    if outputs:
        lines.append("wrote      " + ", ".join(outputs))
    return "\n".join(lines)


def _step_line(plan: Plan) -> str:
    """The step time and parts that add up to it: compute, plus communication less what hid
    behind compute or ran beside another axis's, plus a pipeline's idle time (a pipelined
    plan's parts are those of the stage that finishes last, which the line names)."""
    obj = plan.objective
    exposed = obj.comm_s - obj.hidden_s - obj.concurrent_s
    share = exposed / obj.total_s if obj.total_s else 0.0
    beside = (f" and {format_seconds(obj.concurrent_s)} beside other mesh axes' communication"
              if obj.concurrent_s else "")
    pipeline = plan.pipeline if plan.pipeline and "critical_stage" in plan.pipeline else None
    idle = ("" if pipeline is None else
            f", idle {format_seconds(obj.bubble_s)} in the pipeline's bubble and transfers")
    notes = [f"{share:.1%} of the step exposed"]
    if obj.micro_batches > 1:
        notes.append(f"{obj.micro_batches} micro-batches")
    if pipeline is not None:
        notes.append(f"stage {pipeline['critical_stage']}, which finishes last")
    return (f"step time  {format_seconds(obj.total_s)}  (compute "
            f"{format_seconds(obj.compute_s)}, communication {format_seconds(obj.comm_s)}"
            f" of which {format_seconds(obj.hidden_s)} hidden behind compute{beside}{idle}; "
            f"{'; '.join(notes)})")


BREAKDOWN_ORDER = ("params", "grads", "optimizer", "activations", "inputs", "reserve")


def _solver_line(obj: Any, pipelined: bool = False) -> str:
    """The solver's verdict; a solve stopped before any lower bound says so instead of
    printing an infinite gap. A pipelined plan's solve is its stage model's (the busiest
    stage's layers, see plan.json's notes): the gap is that solve's, and the bound is the
    busiest stage's work, which the step exceeds by the pipeline's bubble and transfers."""
    solve = f"solve {format_seconds(obj.solve_s)}"
    whose = "the stage model" if pipelined else ""
    if not math.isfinite(obj.lower_bound_s) or not math.isfinite(obj.gap):
        return (f"solver     {obj.status}, {whose + ': ' if whose else ''}no lower bound proven "
                f"(the gap to the optimum is unknown); {solve}")
    if not pipelined:
        proof = "proven optimal" if obj.optimal else f"gap {obj.gap:.4%} to the lower bound"
        return (f"solver     {obj.status}, {proof}; lower bound "
                f"{format_seconds(obj.lower_bound_s)}; {solve}")
    proof = ("proven optimal" if obj.optimal
             else f"within {obj.gap:.4%} of its own lower bound")
    return (f"solver     {obj.status}, {whose} {proof}; the busiest stage's work "
            f"{format_seconds(obj.lower_bound_s)} (the step adds the pipeline's bubble and "
            f"transfers); {solve}")


def _breakdown(breakdown: Any) -> str:
    """Categories at the peak step in a fixed order; the saved-for-backward total (which may
    be partly freed by the peak) after them."""
    if not breakdown:
        return ""
    parts = [f"{k} {format_bytes(breakdown[k])}" for k in BREAKDOWN_ORDER
             if breakdown.get(k)]
    parts += [f"{k} {format_bytes(v)}" for k, v in breakdown.items()
              if k not in BREAKDOWN_ORDER and k != "activations_saved" and v]
    text = ": " + ", ".join(parts) if parts else ""
    if breakdown.get("activations_saved"):
        text += f"\n           saved for backward {format_bytes(breakdown['activations_saved'])}"
    return text


def _top_collectives(plan: Plan, count: int = 10) -> list[str]:
    """The costliest collectives, then one line for the reshards' local steps, which move no
    bytes and count as compute (as the step line and the trace's compute track count them)."""
    every = plan.collectives()
    local = every[every["local"].astype(bool)] if not every.empty else every
    frame = every.drop(local.index)
    lines = ["collectives none"] if frame.empty else []
    if not frame.empty:
        top = frame.sort_values(["seconds", "tensor"], ascending=[False, True], kind="stable")
        lines.append(f"top {min(count, len(top))} collectives of {len(frame)}:")
    for row in ([] if frame.empty else top.head(count).itertuples()):
        lines.append(f"  {format_seconds(row.seconds):>11}  {row.collective:<15} "
                     f"over {row.mesh_axes:<8} {format_bytes(row.bytes):>10}  {row.tensor} "
                     f"({row.src} -> {row.dst})")
    if not local.empty:
        kinds = ", ".join(sorted(set(local["collective"])))
        seconds = float((local["seconds"] * local["count"]).sum())
        lines.append(f"local      {len(local)} reshard step{'s' if len(local) != 1 else ''} "
                     f"({kinds}), {format_seconds(seconds)} per step, counted as compute "
                     "(no bytes cross a link)")
    return lines


def _param_placements(plan: Plan) -> list[str]:
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = defaultdict(list)
    for name, rec in plan.tensors.items():
        if rec.role == "param":
            pattern = layer_pattern(name)
            groups[(pattern, rec.placements)].append(name)
    if not groups:
        return []
    lines = ["parameters:"]
    for (pattern, placements), names in groups.items():
        label = pattern if len(names) > 1 else names[0]
        count = f" ({len(names)} layers)" if len(names) > 1 else ""
        lines.append(f"  {label:<40} {' '.join(placements)}{count}")
    return lines


def _boundary(pipeline: Any) -> str:
    """The reshards a stage boundary pays besides the transfer (plans written before they
    were priced have none)."""
    found = pipeline.get("boundary_reshard")
    if not found:
        return ""
    return (f", boundary reshard {format_seconds(found['forward_s'])} fwd + "
            f"{format_seconds(found['backward_s'])} bwd")


def _pipeline_lines(pipeline: Any) -> list[str]:
    """The schedule and one row per stage: layers, devices, memory, busy time, tail, end."""
    if not pipeline:
        return []
    v = pipeline["chunks_per_stage"]
    chunks = f" x {v} chunks" if v > 1 else ""
    lines = [f"pipeline   {pipeline['schedule']} ({pipeline['torch_schedule']}), "
             f"{pipeline['stages']} stages{chunks}, {pipeline['micro_batches']} "
             f"micro-batch{'es' if pipeline['micro_batches'] != 1 else ''}, "
             f"bubble {pipeline['bubble_fraction']:.1%}, p2p "
             f"{format_seconds(pipeline['p2p_send_s'])} per transfer{_boundary(pipeline)}",
             "  " + "  ".join(f"{k}={v}" for k, v in pipeline.get("pp_link", {}).items()),
             f"  {'stage':>5}  {'layers':<18} {'devices':<12} {'memory':>10} {'busy':>11} "
             f"{'sync+opt':>11} {'ends':>11}"]
    for row in pipeline["stage"]:
        layers = " ".join(f"{a}-{b - 1}" for a, b in row["layers"])
        extras = "".join(x for x, on in ((" +emb", row["embedding"]), (" +head", row["head"]))
                         if on)
        devices = row["devices"]
        shown = ",".join(map(str, devices)) if len(devices) <= 4 else f"{len(devices)} devices"
        lines.append(f"  {row['stage']:>5}  {layers + extras:<18} {shown:<12} "
                     f"{format_bytes(row['memory_bytes']):>10} "
                     f"{format_seconds(row['busy_s']):>11} {format_seconds(row['tail_s']):>11} "
                     f"{format_seconds(row['finish_s']):>11}")
    return lines
