"""How autoshard logs on stderr: one format for the command line and for the sweep's worker
processes, which the forkserver starts without the driver's logging."""

from __future__ import annotations

import logging

LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


def configure_logging(level: int) -> None:
    """Log records at ``level`` and above to stderr, one line each."""
    logging.basicConfig(level=level, format=LOG_FORMAT)


def driver_log_level() -> int | None:
    """The level a worker should log at: the root logger's, when this process configured
    logging; ``None`` when it has no handler (a library caller's logging is its own)."""
    root = logging.getLogger()
    return root.level if root.handlers else None
