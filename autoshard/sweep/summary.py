"""``summary.md``: the best mesh per device count of every study, and why it wins.

"Why" is read off the plan's own numbers: whether compute or communication dominates the
step, which collective (kind over mesh axes, summed over the plan) costs the most, and by how
much the runner-up mesh is slower and what its communication costs instead. The summary
states the exact command that made the sweep, so a reader can redo it.
"""

from __future__ import annotations

import math

import pandas as pd

from autoshard.sweep.plots import UNKNOWN, best_per_devices, studies

MAX_INFEASIBLE_LISTED = 20


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _collective(row: pd.Series) -> str:
    if pd.isna(row["top_collective_s"]) or not row["top_collective"]:
        return "no collectives"
    return (f"{row['top_collective']} over {row['top_collective_axes']} "
            f"{_ms(row['top_collective_s'])}")


def why(best: pd.Series, runner_up: pd.Series | None) -> str:
    """One sentence: what dominates the best mesh's step, and what the runner-up loses on."""
    share = float(best["comm_share"]) if not pd.isna(best["comm_share"]) else 0.0
    dominant = "compute" if share < 0.5 else "communication"
    text = (f"{dominant} dominates ({1 - share:.0%} compute, {share:.0%} communication; "
            f"largest collective: {_collective(best)})")
    if runner_up is not None:
        slower = float(runner_up["total_s"]) / float(best["total_s"])
        pace = (f"is {slower:.2f}x slower" if slower >= 1.005
                else f"is within {max(slower - 1, 0):.2%}")
        text += (f"; runner-up {runner_up['mesh']} {pace} with "
                 f"{_ms(runner_up['comm_s'])} of communication ({_collective(runner_up)})")
    return text


def _study_table(rows: pd.DataFrame) -> list[str]:
    lines = ["| devices | best mesh | step time | tokens/s, all devices | tokens/s per device | "
             "peak / limit GiB | optimal | why |",
             "|---:|---|---:|---:|---:|---:|---|---|"]
    best = best_per_devices(rows)
    for devices in sorted(int(d) for d in rows["devices"].unique()):
        chosen = best[best["devices"] == devices]
        if chosen.empty:
            lines.append(f"| {devices} | none feasible | | | | | | see the infeasible points |")
            continue
        row = chosen.iloc[0]
        others = rows[(rows["devices"] == devices) & rows["feasible"]
                      & (rows["point"] != row["point"])].sort_values("total_s", kind="mergesort")
        runner = None if others.empty else others.iloc[0]
        tokens, per_device = (UNKNOWN, UNKNOWN) if pd.isna(row["tokens_per_s"]) else (
            f"{row['tokens_per_s']:,.0f}", f"{row['tokens_per_s'] / devices:,.0f}")
        limit = row["limit_bytes"] / 2**30 if not pd.isna(row["limit_bytes"]) else math.nan
        optimal = "yes" if row["optimal"] else f"gap {row['gap']:.2%}"
        lines.append(f"| {devices} | `{row['mesh']}` | {_ms(row['total_s'])} | {tokens} | "
                     f"{per_device} | "
                     f"{row['peak_bytes_per_device'] / 2**30:.2f} / {limit:.2f} | {optimal} | "
                     f"{why(row, runner)} |")
    return lines


def _infeasible(table: pd.DataFrame) -> list[str]:
    bad = table[~table["feasible"]]
    if bad.empty:
        return ["Every point has a feasible plan."]
    lines = [f"{len(bad)} of {len(table)} points have no plan (recorded in `sweep.csv`, "
             "column `error`):", "", "| point | reason |", "|---|---|"]
    for _, row in bad.head(MAX_INFEASIBLE_LISTED).iterrows():
        lines.append(f"| `{row['point']}` | {row['error_kind']}: {row['error']} |")
    if len(bad) > MAX_INFEASIBLE_LISTED:
        lines.append(f"| … | {len(bad) - MAX_INFEASIBLE_LISTED} more in `sweep.csv` |")
    return lines


def _unproven(table: pd.DataFrame) -> list[str]:
    """Warnings for plans not proven optimal: their step times are upper bounds, so a mesh may
    lose only because its plan was not found in time (status ``time_limit``) or because the
    solver restricted its search to repeat the layers (status ``feasible``, gap stated)."""
    unproven = table[table["feasible"] & ~table["optimal"]]
    lines: list[str] = []
    for status, what, advice in (
            ("time_limit", "stopped at the time limit before proving the plan optimal",
             "rerun with a larger --time-limit (and --force) to settle them"),
            ("feasible", "planned with the search restricted to repeating the layers, "
             "within the `gap` column of a proven bound of the whole problem",
             "each plan's notes say what was restricted")):
        rows = unproven[unproven["status"] == status]
        if rows.empty:
            continue
        meshes = ", ".join(f"`{m}`" for m in rows["mesh"].head(MAX_INFEASIBLE_LISTED))
        count = f"{len(rows)} point{'s' if len(rows) != 1 else ''}"
        lines += [f"**{count} {what}** ({meshes}): step times are upper bounds; {advice}.",
                  ""]
    return lines


def summary_markdown(table: pd.DataFrame, *, command: str, machine: str,
                     plots: list[str]) -> str:
    """The whole ``summary.md`` text."""
    feasible = int(table["feasible"].sum())
    lines = ["# autoshard sweep", "", "Made by:", "", "```", command, "```", "",
             f"Machine: {machine}.", "",
             f"{len(table)} points, {feasible} with a plan. The best mesh of each device "
             "count is the feasible one with the shortest step (the highest tokens per "
             "second at that batch and sequence length). Times are the planner's predicted "
             "step (the topology's collective and compute models, with overlap and "
             "micro-batches), not measurements.", ""]
    lines += _unproven(table)
    for label, rows in studies(table):
        lines += [f"## {label}", "", *_study_table(rows), ""]
    lines += ["## Points without a plan", "", *_infeasible(table), ""]
    if plots:
        lines += ["## Plots", ""] + [f"![{name}]({name})" for name in plots] + [""]
    return "\n".join(lines)
