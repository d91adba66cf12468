"""A one-line status on stderr while a long phase of planning runs (the solve, reshard pricing).

Why: the solve is one call into the solver that can take tens of seconds on a large model, with
nothing to count, so a progress bar has no total; a status line with the elapsed time (tqdm
without a total, refreshed by a background thread) shows the command is working. It appears
only after ``delay_s`` (short phases print nothing), is erased when the phase ends, and is
shown only when asked (the CLI asks on a terminal, never with ``-q``), like the per-op bars.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

DELAY_S = 1.0
INTERVAL_S = 0.5


@contextmanager
def status(label: str, enabled: bool, *, delay_s: float = DELAY_S,
           interval_s: float = INTERVAL_S) -> Iterator[None]:
    """While the body runs: ``label: 12s`` on stderr, refreshed every ``interval_s`` after
    ``delay_s``; nothing when not ``enabled``."""
    if not enabled:
        yield
        return
    from tqdm import tqdm

    bar = tqdm(total=None, desc=label, bar_format="{desc}: {elapsed}", file=sys.stderr,
               leave=False, delay=delay_s)
    stop = threading.Event()

    def tick() -> None:
        if stop.wait(delay_s):
            return
        while True:
            bar.refresh()
            if stop.wait(interval_s):
                return

    thread = threading.Thread(target=tick, name="autoshard-status", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.close()
