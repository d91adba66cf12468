"""``autoshard explain`` output: a table a person reads, or the same facts as JSON."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

from autoshard.explain.alternatives import NOT_RESOLVED, Alternative, Explanation
from autoshard.explain.fragile import Fragility
from autoshard.planning.summary import format_seconds
from costmodel import format_bytes


def signed_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return "impossible"
    text = format_seconds(abs(value))
    return ("-" if value < 0 else "+") + text


def signed_bytes(value: float | None) -> str:
    if value is None:
        return "-"
    return ("-" if value < 0 else "+") + format_bytes(abs(value))


def explanation_text(result: Explanation) -> str:
    facts = result.facts
    lines = [f"{result.kind:<10} {result.name}"]
    if result.kind == "tensor":
        lines.append(f"placement  {result.placement}  ({facts['role']}, "
                     f"{'x'.join(map(str, facts['shape'])) or 'scalar'} {facts['dtype']}, local "
                     f"{'x'.join(map(str, facts['local_shape'])) or 'scalar'}, "
                     f"{format_bytes(facts['memory_bytes'])} per device)")
        if facts["pinned_by"]:
            lines.append(f"pinned by  {'; '.join(facts['pinned_by'])}")
        lines.append(f"producer   {facts['producer']} ({facts['producer_strategy']}): compute "
                     f"{format_seconds(facts['compute_s'])}, intra-op comm "
                     f"{format_seconds(facts['comm_s'])}")
    else:
        lines.append(f"strategy   {result.placement}  ({facts['kind']}): compute "
                     f"{format_seconds(facts['compute_s'])}, intra-op comm "
                     f"{format_seconds(facts['comm_s'])}, working set "
                     f"{format_bytes(facts['working_set_bytes'])}")
        for tensor, placement in facts["outputs"].items():
            lines.append(f"  writes   {tensor}  {placement}")
    lines += _reshard_lines("reshards into it", result.reshards_in)
    lines += _reshard_lines("reshards of it", result.reshards_out)
    lines.append(f"plan       step {format_seconds(result.total_s)}, peak "
                 f"{format_bytes(result.peak_bytes)} per device")
    lines.append(f"alternatives ({result.note}):")
    lines += alternative_table(result.alternatives, "placement" if result.kind == "tensor"
                               else "strategy")
    return "\n".join(lines)


def _reshard_lines(title: str, rows: tuple[dict[str, Any], ...]) -> list[str]:
    if not rows:
        return [f"{title:<10} none"]
    total = sum(r["seconds"] for r in rows)
    lines = [f"{title} ({len(rows)}, {format_seconds(total)}):"]
    for r in rows:
        lines.append(f"  {format_seconds(r['seconds']):>11}  {r['tensor']} {r['producer']} -> "
                     f"{r['consumer']} ({r['src']} -> {r['dst']}): {r['collectives']}")
    return lines


UNSOLVED_SHOWN = 5


def alternative_table(alternatives: tuple[Alternative, ...], label: str) -> list[str]:
    """Every re-solved alternative, then the first few that were only bounded."""
    if not alternatives:
        return ["  none: this is the only layout"]
    solved = [a for a in alternatives if a.status != NOT_RESOLVED]
    bounded = [a for a in alternatives if a.status == NOT_RESOLVED]
    hidden = len(bounded) - UNSOLVED_SHOWN
    alternatives = (*solved, *bounded[:UNSOLVED_SHOWN])
    width = max(len(label), *(len(a.placement) for a in alternatives))
    lines = [f"  {label:<{width}}  {'Δ step time':>13}  {'Δ peak memory':>14}  "
             f"{'bound':>13}  status"]
    for a in alternatives:
        lines.append(f"  {a.placement:<{width}}  {signed_seconds(a.delta_s):>13}  "
                     f"{signed_bytes(a.delta_peak_bytes):>14}  {signed_seconds(a.bound_s):>13}"
                     f"  {a.status}")
    if hidden > 0:
        lines.append(f"  … and {hidden} more not re-solved (--json lists all; --limit 0 "
                     "re-solves all)")
    return lines


def fragility_text(result: Fragility) -> str:
    lines = [f"plan       step {format_seconds(result.total_s)}, peak "
             f"{format_bytes(result.peak_bytes)} per device",
             f"fragile decisions ({result.note}):"]
    if not result.decisions:
        return "\n".join([*lines, "  none: no tensor has another layout"])
    width = max(len("tensor"), *(len(d.tensor) for d in result.decisions))
    cell = max(len("placement"), *(len(d.placement) for d in result.decisions))
    alt = max(len("closest alternative"),
              *(len(d.alternative.placement) for d in result.decisions))
    lines.append(f"  {'tensor':<{width}}  {'placement':<{cell}}  {'closest alternative':<{alt}}"
                 f"  {'Δ step time':>13}  {'Δ peak memory':>14}  {'bound':>13}  tensors")
    for d in result.decisions:
        a = d.alternative
        lines.append(f"  {d.tensor:<{width}}  {d.placement:<{cell}}  {a.placement:<{alt}}  "
                     f"{signed_seconds(a.delta_s):>13}  {signed_bytes(a.delta_peak_bytes):>14}  "
                     f"{signed_seconds(a.bound_s):>13}  {d.tensors}"
                     + ("" if a.delta_s is not None else f"  ({a.status})"))
    return "\n".join(lines)


def as_json(result: Explanation | Fragility) -> str:
    return json.dumps(_finite(asdict(result)), indent=1, sort_keys=True)


def _finite(value: Any) -> Any:
    """JSON has no infinity: an impossible alternative's bound is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
