"""What every benchmark file records about where and how it was made."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def machine_line() -> str:
    """One line naming the machine: platform, Python, CPU count."""
    return (f"{platform.platform()}; python {platform.python_version()}; "
            f"{os.cpu_count()} cpus; {datetime.now(UTC).strftime('%Y-%m-%d')}")


def command_line() -> str:
    """The command that is running, as a user would type it."""
    argv = list(sys.argv)
    if argv and argv[0].endswith("autoshard"):
        argv[0] = "autoshard"
    return shlex.join(argv)


def header_lines() -> list[str]:
    """Comment lines to put at the top of a CSV (pandas reads them with comment='#')."""
    return [f"# command: {command_line()}", f"# machine: {machine_line()}"]


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
