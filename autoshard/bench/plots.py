"""The bar chart the benchmarks share, captioned with the machine that made it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autoshard.provenance import machine_line


def save_bar_plot(frame: Any, *, x: str, y: str, hue: str, path: Path, title: str,
                  ylabel: str, log: bool = True) -> Path:
    """A grouped bar chart of ``y`` per ``x``, one bar per ``hue`` value; captioned with the
    machine so a plot never travels without its provenance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = frame.pivot_table(index=x, columns=hue, values=y, aggfunc="median", sort=False)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    table.plot.bar(ax=ax, logy=log, rot=45)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("")
    fig.text(0.01, 0.01, machine_line(), fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
