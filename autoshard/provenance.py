"""Where a written file came from: the command, the code (git commit) and the machine.

Every benchmark CSV states all three and every sweep the command and machine, so a number
never travels without its provenance and results/ can be checked against the code it
describes (the sweep's plots state the command only, to stay byte-stable across machines).
"""

from __future__ import annotations

import logging
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


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


def commit_line() -> str:
    """The git commit of the running code, ``+changes`` when the checkout differs from it, or
    ``unknown`` outside a git checkout (an installed wheel)."""
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", "autoshard",
                      "graphs", "costmodel", "solver")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + (" +changes" if changed else "")


def header_lines() -> list[str]:
    """Comment lines to put at the top of a CSV (pandas reads them with comment='#')."""
    return [f"# command: {command_line()}", f"# commit: {commit_line()}",
            f"# machine: {machine_line()}"]


def write_csv(path: Path, frame: Any, notes: Sequence[str] = (), **to_csv: Any) -> Path:
    """``frame`` (a pandas DataFrame) written as CSV under the provenance header, then one
    ``# `` line per note; ``to_csv`` goes to ``DataFrame.to_csv`` (``index=False`` always)."""
    path = Path(path)
    with path.open("w") as handle:
        handle.write("\n".join([*header_lines(), *(f"# {note}" for note in notes)]) + "\n")
        frame.to_csv(handle, index=False, **to_csv)
    logger.info("wrote %s", path)
    return path
