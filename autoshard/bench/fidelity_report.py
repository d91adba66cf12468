"""The verdict of ``autoshard bench fidelity``: the issue's two targets, and the plot.

Targets (issue 27): over the predicted rows, median |predicted/measured − 1| ≤ 25 %; within
each group of ≥ 4 runs on one model, GPU type and GPU count, Spearman's rank correlation of
predicted and measured tokens/s/GPU ≥ 0.8 (``scipy.stats.spearmanr``; ties share a rank, and a
group whose predictions are all equal has no defined correlation and fails).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from autoshard.provenance import machine_line

MEDIAN_TARGET = 0.25
SPEARMAN_TARGET = 0.8
MIN_GROUP = 4


def predicted_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows with a prediction."""
    if frame.empty or "skipped" not in frame:
        return frame
    return frame[frame["skipped"] == ""]


def median_error(frame: pd.DataFrame) -> float:
    """Median |ratio − 1| of the predicted rows (nan when there are none)."""
    done = predicted_rows(frame)
    return float(np.median(np.abs(done["ratio"].astype(float) - 1))) if len(done) else math.nan


def spearman_by_group(frame: pd.DataFrame) -> pd.DataFrame:
    """Per group of ≥ 2 predicted rows: runs, Spearman rho, and whether the target applies and
    is met (groups of ≥ :data:`MIN_GROUP` runs)."""
    from scipy.stats import spearmanr

    out = []
    for group, rows in predicted_rows(frame).groupby("group", sort=True):
        if len(rows) < 2:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # constant input: rho is nan, reported as such
            rho = float(spearmanr(rows["measured"], rows["predicted"]).statistic)
        applies = len(rows) >= MIN_GROUP
        out.append({"group": group, "runs": len(rows), "spearman": rho,
                    "target_applies": applies,
                    "met": bool(applies and not math.isnan(rho) and rho >= SPEARMAN_TARGET)})
    return pd.DataFrame(out, columns=["group", "runs", "spearman", "target_applies", "met"])


def summary_text(frame: pd.DataFrame) -> str:
    """The summary the bench prints and writes to ``fidelity_summary.txt``."""
    done = predicted_rows(frame)
    error = median_error(frame)
    lines = [f"autoshard bench fidelity: {len(frame)} measured rows, {len(done)} predicted, "
             f"{len(frame) - len(done)} skipped"]
    if len(done):
        verdict = "met" if error <= MEDIAN_TARGET else "NOT met"
        lines += [f"median |predicted/measured - 1| = {100 * error:.1f} % over {len(done)} rows "
                  f"(target <= {100 * MEDIAN_TARGET:.0f} %): {verdict}",
                  f"median predicted/measured = {np.median(done['ratio']):.3f} (> 1: the plan "
                  "is faster than the run)", "", "per source (rows, median ratio, min, max):"]
        for source, rows in done.groupby("source_id", sort=True):
            ratio = rows["ratio"].astype(float)
            lines.append(f"  {source}: {len(rows)}, {ratio.median():.3f}, {ratio.min():.3f}, "
                         f"{ratio.max():.3f}")
    groups = spearman_by_group(frame)
    lines += ["", f"Spearman per group (target >= {SPEARMAN_TARGET} where a group has >= "
                  f"{MIN_GROUP} runs):"]
    for group in groups.itertuples():
        tag = ("met" if group.met else "NOT met") if group.target_applies else "no target"
        lines.append(f"  {group.group}: {group.runs} runs, rho = {group.spearman:.3f} ({tag})")
    applies = groups[groups["target_applies"]]
    if len(applies):
        lines.append(f"groups meeting the target: {int(applies['met'].sum())} of {len(applies)}")
    reasons = frame.loc[frame["skipped"] != "", "skipped"].value_counts() \
        if len(frame) else pd.Series(dtype=int)
    lines += ["", "skipped, by reason:"]
    lines += [f"  {count:4d}  {reason.removeprefix('skipped: ')}"
              for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines) + "\n"


def write_plot(frame: pd.DataFrame, path: Path) -> Path:
    """Predicted vs measured tokens/s/GPU, log-log, one colour per source, with y = x and the
    ±25 % band; captioned with the machine."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = predicted_rows(frame)
    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    if len(done):
        low = float(min(done["measured"].min(), done["predicted"].min())) / 1.5
        high = float(max(done["measured"].max(), done["predicted"].max())) * 1.5
        line = np.geomspace(low, high, 50)
        ax.fill_between(line, line * (1 - MEDIAN_TARGET), line * (1 + MEDIAN_TARGET),
                        color="0.9", label="±25 %")
        ax.plot(line, line, color="0.4", linewidth=1, label="y = x")
        for source, rows in done.groupby("source_id", sort=True):
            ax.scatter(rows["measured"], rows["predicted"], s=14, label=f"{source} "
                       f"({len(rows)})")
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured tokens/s per GPU (published)")
    ax.set_ylabel("predicted tokens/s per GPU (autoshard plan, hand plan pinned)")
    ax.set_title(f"autoshard bench fidelity: median |ratio - 1| = "
                 f"{100 * median_error(frame):.1f} % over {len(done)} runs")
    ax.legend(fontsize=7, loc="upper left")
    fig.text(0.01, 0.01, machine_line(), fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
