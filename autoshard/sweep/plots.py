"""Plots of a sweep: step time, memory, best throughput and the time-memory frontier,
byte-stable PNGs.

The same ``sweep.csv`` always gives the same bytes: matplotlib's Agg backend, fixed figure
sizes and DPI, no date or software version in the PNG metadata, and a caption holding the
command (not the machine or the time). One subplot per *study*: the points sharing model,
mode, batch, seq, topology and links, so that bars side by side differ only by the mesh.
matplotlib is imported inside the functions that draw.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from autoshard.sweep.table import COLUMNS

STUDY_KEYS = ("model", "mode", "batch", "seq", "topology", "links")
NUMERIC = ("devices", "axes", "batch", "seq", "total_s", "compute_s", "comm_s", "hidden_s",
           "concurrent_s", "bubble_s", "comm_share",
           "tokens_per_s", "peak_bytes_per_device", "limit_bytes", "gap", "top_collective_s",
           "solve_s", "wall_s", "micro_batch", "micro_batches", "bubble_fraction")
GIB = 2.0**30
_PNG_METADATA = {"Software": None}


def frame(rows: Sequence[dict[str, str]]) -> pd.DataFrame:
    """Rows as read from ``sweep.csv`` (strings) → typed columns, in file order."""
    table = pd.DataFrame(list(rows), columns=list(COLUMNS))
    for column in NUMERIC:
        table[column] = pd.to_numeric(table[column].replace("", None), errors="coerce")
    for column in ("feasible", "optimal", "training"):
        table[column] = table[column] == "True"
    table["batch"] = table["batch"].astype("Int64")
    table["seq"] = table["seq"].astype("Int64")
    return table


def studies(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(label, rows) per study, in order of first appearance."""
    keys = study_keys(table)
    return [(_label(table[keys == key].iloc[0]), table[keys == key])
            for key in dict.fromkeys(keys)]


def study_keys(table: pd.DataFrame) -> pd.Series:
    """One text key per row naming its study. A missing cell (the batch of a graph file or
    of a config swept without --batch) becomes "": pandas 3's ``astype(str)`` keeps it a
    float NaN, which ``str.join`` refuses."""
    cells = table[list(STUDY_KEYS)]
    return cells.astype(object).where(cells.notna(), "").astype(str).agg("|".join, axis=1)


UNKNOWN = "unknown"
"""How a batch or sequence length the sweep was not told is shown: never a guessed number."""


def shown(value: Any) -> str:
    """A cell as text, :data:`UNKNOWN` when it is missing."""
    return UNKNOWN if pd.isna(value) else str(value)


def _label(row: pd.Series) -> str:
    text = f"{row['model']} {'training' if row['mode'] == 'train' else 'inference'}"
    text += f", batch {shown(row['batch'])}, seq {shown(row['seq'])}"
    text += f", {row['topology']}"
    if row["links"] != "default":
        text += f", links {row['links']}"
    return text


def _bar_labels(rows: pd.DataFrame) -> list[str]:
    return [f"{int(d)}: {m}" + ("" if pd.isna(mb) else f" mb{int(mb)}")
            + ("" if ok else " (infeasible)")
            for d, m, mb, ok in zip(rows["devices"], rows["mesh"], rows["micro_batch"],
                                    rows["feasible"], strict=True)]


def _pipelined(rows: pd.DataFrame) -> pd.Series:
    """Rows whose mesh has a pp axis (any point may have a micro-batch size)."""
    return rows["mesh"].astype(str).str.contains(r"(?:^|,)pp=", regex=True)


def _figure(count: int, width: float, height: float) -> tuple[Any, list[Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(count, 1, figsize=(width, height * count), squeeze=False)
    return fig, [row[0] for row in axes]


def _save(fig: Any, path: Path, caption: str) -> Path:
    import matplotlib.pyplot as plt

    fig.text(0.01, 0.005, "\n".join(textwrap.wrap(caption, 180)), fontsize=6, color="gray",
             va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=100, metadata=_PNG_METADATA)
    plt.close(fig)
    return path


def _width(table: pd.DataFrame) -> float:
    largest = max(len(rows) for _, rows in studies(table))
    return min(24.0, max(8.0, 0.35 * largest + 3))


def plot_step_time(table: pd.DataFrame, path: Path, caption: str) -> Path:
    """Stacked compute + exposed communication milliseconds per mesh (the step time; the
    communication hidden behind compute or beside another axis's is not drawn), one subplot
    per study."""
    groups = studies(table)
    fig, axes = _figure(len(groups), _width(table), 3.6)
    for ax, (label, rows) in zip(axes, groups, strict=True):
        positions = range(len(rows))
        compute = rows["compute_s"].fillna(0.0) * 1e3
        hidden = rows["hidden_s"].fillna(0.0) if "hidden_s" in rows else 0.0
        beside = rows["concurrent_s"].fillna(0.0) if "concurrent_s" in rows else 0.0
        comm = (rows["comm_s"].fillna(0.0) - hidden - beside) * 1e3
        ax.bar(positions, compute, color="#4c72b0", label="compute")
        ax.bar(positions, comm, bottom=compute, color="#dd8452", label="exposed communication")
        bubble = (rows["total_s"].fillna(0.0) * 1e3 - compute - comm).clip(lower=0.0)
        if _pipelined(rows).any():  # the schedule's idle time
            ax.bar(positions, bubble, bottom=compute + comm, color="#8172b3",
                   label="pipeline bubble and transfers")
        ax.set_xticks(list(positions), _bar_labels(rows), rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("step time (ms)")
        ax.set_title(label, fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
    return _save(fig, path, caption)


LOG_SPREAD = 20.0
"""When the largest value drawn (a peak or the limit) is more than this many times the smallest
peak, the memory axis is logarithmic: on a linear one the peaks of a small model under an
80 GB device's limit (74.5 GiB) are flat bars."""


def plot_memory(table: pd.DataFrame, path: Path, caption: str) -> Path:
    """Peak memory per device per mesh against the limit (infeasible: the smallest peak),
    one subplot per study (:func:`draw_memory`)."""
    groups = studies(table)
    fig, axes = _figure(len(groups), _width(table), 3.6)
    for ax, (label, rows) in zip(axes, groups, strict=True):
        draw_memory(ax, rows)
        ax.set_title(label, fontsize=9)
    return _save(fig, path, caption)


def draw_memory(ax: Any, rows: pd.DataFrame) -> None:
    """One study's peaks as bars with their values, and the limit as a dashed line named in
    the legend (never a label on the line, which bars and values would overlap); when the
    limit is far above the peaks the axis is logarithmic, so both stay readable."""
    from matplotlib.patches import Patch

    peak = rows["peak_bytes_per_device"].fillna(0.0) / GIB
    colors = ["#55a868" if ok else "#c44e52" for ok in rows["feasible"]]
    bars = ax.bar(range(len(rows)), peak, color=colors)
    ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1)
    limits = sorted(rows["limit_bytes"].dropna().unique() / GIB)
    for limit, style in zip(limits, ("--", ":", "-."), strict=False):
        ax.axhline(limit, color="black", linestyle=style, linewidth=1,
                   label=f"limit {limit:.1f} GiB per device")
    positive = peak[peak > 0]
    _memory_scale(ax, float(peak.max()) if len(peak) else 0.0, limits,
                  float(positive.min()) if len(positive) else 0.0)
    handles = [Patch(color="#55a868", label="peak (fits)")]
    if not rows["feasible"].all():
        handles.append(Patch(color="#c44e52", label="smallest peak (does not fit)"))
    ax.legend(handles=[*handles, *ax.get_legend_handles_labels()[0]], fontsize=7, loc="best",
              framealpha=0.9)
    ax.set_xticks(list(range(len(rows))), _bar_labels(rows), rotation=60, ha="right",
                  fontsize=7)
    ax.set_ylabel("peak GiB per device" + (" (log)" if ax.get_yscale() == "log" else ""))


def _memory_scale(ax: Any, largest: float, limits: list[float], smallest: float) -> None:
    """Log scale when the values span more than :data:`LOG_SPREAD`; room above the top for
    the legend."""
    top = max([largest, *limits]) if limits or largest else 1.0
    if smallest > 0 and top > LOG_SPREAD * smallest:
        ax.set_yscale("log")
        ax.set_ylim(smallest / 2.0, top * 20.0)
    else:
        ax.set_ylim(0.0, top * 1.35)


def best_per_devices(rows: pd.DataFrame) -> pd.DataFrame:
    """The fastest feasible point per device count (ties: fewer axes, then file order)."""
    feasible = rows[rows["feasible"]]
    if feasible.empty:
        return feasible
    ranked = feasible.assign(_order=range(len(feasible))).sort_values(
        ["devices", "total_s", "axes", "_order"], kind="mergesort")
    return ranked.groupby("devices", sort=True).head(1).drop(columns="_order")


def plot_throughput(table: pd.DataFrame, path: Path, caption: str) -> Path:
    """Best throughput per device count, one line per study, each point named by its mesh."""
    tokens = table["tokens_per_s"].notna().any()
    fig, (ax,) = _figure(1, 8.0, 4.5)
    for label, rows in studies(table):
        best = best_per_devices(rows)
        if best.empty:
            continue
        values = best["tokens_per_s"] if tokens else 1.0 / best["total_s"]
        ax.plot(best["devices"], values, marker="o", label=label)
        for x, y, mesh in zip(best["devices"], values, best["mesh"], strict=True):
            ax.annotate(mesh, (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    devices = sorted(int(d) for d in table["devices"].dropna().unique())
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(devices, [str(d) for d in devices])
    ax.set_xlabel("devices")
    ax.set_ylabel("tokens per second" if tokens else "steps per second")
    ax.set_title("Best mesh per device count")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    return _save(fig, path, caption)


def frontier(rows: pd.DataFrame) -> pd.DataFrame:
    """The feasible points no other beats in both step time and peak memory (ties: file
    order), by increasing memory."""
    feasible = rows[rows["feasible"]].assign(_order=range(int(rows["feasible"].sum())))
    ranked = feasible.sort_values(["peak_bytes_per_device", "total_s", "_order"],
                                  kind="mergesort")
    previous = ranked["total_s"].cummin().shift(fill_value=float("inf"))
    return ranked[ranked["total_s"] < previous].drop(columns="_order")


def plot_frontier(table: pd.DataFrame, path: Path, caption: str) -> Path:
    """Step time against peak memory per device, one subplot per study: every feasible mesh
    (pipelined ones, with a pp axis, as triangles) and the frontier of meshes no other beats
    in both."""
    groups = studies(table)
    fig, axes = _figure(len(groups), 8.0, 4.0)
    for ax, (label, rows) in zip(axes, groups, strict=True):
        feasible = rows[rows["feasible"]]
        piped = _pipelined(feasible)
        for mask, marker, name in ((~piped, "o", "without pp"), (piped, "^", "with pp")):
            part = feasible[mask]
            if not part.empty:
                ax.scatter(part["peak_bytes_per_device"] / GIB, part["total_s"] * 1e3,
                           marker=marker, label=name, alpha=0.7)
        edge = frontier(rows)
        if not edge.empty:
            ax.step(edge["peak_bytes_per_device"] / GIB, edge["total_s"] * 1e3, where="post",
                    color="black", linewidth=1, label="frontier")
            for _, row in edge.iterrows():
                text = row["mesh"] + ("" if pd.isna(row["micro_batch"])
                                      else f" mb{int(row['micro_batch'])}")
                ax.annotate(text, (row["peak_bytes_per_device"] / GIB, row["total_s"] * 1e3),
                            fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("peak GiB per device")
        ax.set_ylabel("step time (ms)")
        ax.set_title(label, fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return _save(fig, path, caption)


def write_plots(table: pd.DataFrame, out_dir: Path, caption: str) -> list[Path]:
    """``step_time.png``, ``memory.png``, ``throughput.png`` and ``frontier.png`` under
    ``out_dir``."""
    if table.empty:
        return []
    return [plot_step_time(table, out_dir / "step_time.png", caption),
            plot_memory(table, out_dir / "memory.png", caption),
            plot_throughput(table, out_dir / "throughput.png", caption),
            plot_frontier(table, out_dir / "frontier.png", caption)]
