"""``autoshard diff`` output: the two plans side by side, as a table or CSV rows."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

from autoshard.explain.diff import CollectiveChange, PlanDiff, Row
from autoshard.explain.render import signed_bytes, signed_seconds
from autoshard.planning.summary import format_seconds
from costmodel import format_bytes

SHOWN = 20


def diff_text(diff: PlanDiff, shown: int = SHOWN) -> str:
    lines = [f"A  {diff.a}", f"B  {diff.b}"]
    if diff.differs:
        lines.append(f"compared anyway (--force): {'; '.join(diff.differs)}")
    label = max([32, *(len(_label(r)) for r in (*diff.time, *diff.memory))])
    lines.append(f"{'':<{label}} {'A':>12} {'B':>12} {'B - A':>13}")
    lines += [_row(r, format_seconds, signed_seconds, label) for r in diff.time]
    lines += [_row(r, format_bytes, signed_bytes, label) for r in diff.memory]
    count = sum(p.tensors for p in diff.placements)
    if not diff.placements:
        lines.append("placements: identical")
    else:
        lines.append(f"placements that differ: {count} tensors in {len(diff.placements)} "
                     "groups (A -> B)")
        width = min(48, max(len(f"{p.pattern} ({p.tensors})") for p in diff.placements))
        for p in diff.placements[:shown]:
            lines.append(f"  {p.pattern + f' ({p.tensors})':<{width}}  {p.a}  ->  {p.b}")
        lines += _more(len(diff.placements), shown)
    lines += _collectives("collectives B adds", diff.added, shown)
    lines += _collectives("collectives B removes", diff.removed, shown)
    return "\n".join(lines)


def _label(row: Row) -> str:
    return row.item if row.item.startswith("  ") else f"{row.section} {row.item}"


def _row(row: Row, fmt: Callable[[float], str], signed: Callable[[float], str],
         width: int) -> str:
    return f"{_label(row):<{width}} {fmt(row.a):>12} {fmt(row.b):>12} {signed(row.delta):>13}"


def _collectives(title: str, changes: tuple[CollectiveChange, ...], shown: int) -> list[str]:
    if not changes:
        return [f"{title}: none"]
    total = sum(c.seconds for c in changes)
    lines = [f"{title}: {sum(c.count for c in changes)} ({format_seconds(total)})"]
    for c in changes[:shown]:
        lines.append(f"  {format_seconds(c.seconds):>11}  {c.count}x {c.kind:<15} over "
                     f"{c.axes:<8} {format_bytes(c.bytes):>10} each  {c.tensor} -> {c.consumer}")
    return lines + _more(len(changes), shown)


def _more(total: int, shown: int) -> list[str]:
    return [f"  … and {total - shown} more (--csv writes all)"] if total > shown else []


def write_csv(diff: PlanDiff, path: Path) -> None:
    """Every row of the diff: ``section, item, a, b, delta`` (seconds, bytes or placements)."""
    rows = diff.rows()
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["section", "item", "a", "b", "delta"])
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.9g}" if isinstance(v, float) else v)
                             for k, v in row.items()})
