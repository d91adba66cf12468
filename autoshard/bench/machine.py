"""What every benchmark file records about where and how it was made."""

from __future__ import annotations

import os
import platform
import shlex
import sys
from datetime import UTC, datetime


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
