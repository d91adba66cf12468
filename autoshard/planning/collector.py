"""Fewer garbage collections while a plan is built.

Planning a 3-axis model allocates hundreds of thousands of long-lived container objects
(strategies, shardings, reshard states, records) and CPython's default collector thresholds
(700, 10, 10) answer that growth with full collections, each one traversing every object
alive: mixtral-8x7b training on dp=2,ep=4,tp=8 ran 6 full and ~880 young collections, 0.54 s
of CPU (``gc.callbacks`` timing, loaded 2-core machine), where thresholds of (50,000, 20, 20)
leave 10 young collections and 0.11 s, at the same peak RSS (595 MB). mypy raises its
thresholds the same way for the same reason (mypy, ``mypy/build.py``, ``build``: "Run gc less
frequently, as otherwise we can spend a large fraction of cpu in gc", 200,000, 30, 30).
Reference cycles are still collected, every 50,000 net allocations of containers.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

THRESHOLDS = (50_000, 20, 20)


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Raise the collector's thresholds to at least ``THRESHOLDS`` for the ``with`` body
    (never lower: a caller that asked for rarer collections keeps them; a threshold of 0,
    collection off, stays off), then put back what was there.

    Example:
        >>> import gc
        >>> before = gc.get_threshold()
        >>> with fewer_collections():
        ...     gc.get_threshold()[0] >= 50_000 or before[0] == 0
        True
        >>> gc.get_threshold() == before
        True
    """
    before = gc.get_threshold()
    if before[0] != 0:
        gc.set_threshold(*(max(old, new) for old, new in zip(before, THRESHOLDS, strict=True)))
    try:
        yield
    finally:
        gc.set_threshold(*before)
