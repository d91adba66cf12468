"""The dual simplex of a mid-size LP started beside PDLP's capped try, on the second core.

``lp._pdlp_then_simplex`` tries PDLP for at most ``lp.PDLP_TRY_ITERATIONS`` and goes to the
dual simplex only when PDLP did not converge. PDLP runs on one thread there
(``lp.PDLP_TRY_THREADS``), so on a machine with a second core the simplex can start at the
same moment instead of after the miss: when PDLP converges the simplex is interrupted and its
answer never looked at; when PDLP misses, the simplex has already run for as long as the try
took. The answer used is the one the sequential path uses, by construction (PDLP's when it
converged, else the simplex's, which is deterministic and does not depend on when it started),
so the plan's bytes are the same either way; only the wall time changes.

OR-Tools' MathOpt solve releases the GIL for the solve itself (measured with OR-Tools 9.15: a
Python thread sleeping in 1 ms steps beside a Glop or PDLP solve on another thread of the same
process never stalled for longer than the model proto's conversion, 15-34 ms, during 0.3-0.9 s
solves), so a thread is enough: no fork, no pickled LP. MathOpt's ``SolveInterrupter`` stops
Glop within ~10 ms (measured: an interrupt 0.3 s into llama3-70b's 1 s dual simplex returned
after 12 ms).

Measured in the idle moments of a shared 2-core machine (wall s, medians, the captured
periodic LPs of ``autoshard bench prices``' curve jobs, every answer drawn): llama3-70b dp=8,
tp=8 (PDLP misses) 1.092 sequential, 0.886 raced; gpt2 12 layers dp=2,tp=4 (PDLP converges)
0.491 and 0.528 (the two solvers share caches and the memory bus).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from solver.backends.lp_answer import LPAnswer


def runnable_elsewhere() -> int | None:
    """Threads runnable on the machine right now besides the caller's (``/proc/loadavg``'s
    fourth field, which counts the caller), or ``None`` where that is not known.

    The race costs nothing only where a core is idle: on a 2-core machine loaded by other
    processes (5-7 runnable threads), the simplex thread started beside a PDLP try that
    converges took the CPU PDLP needed (gpt2 12 layers dp=2,tp=4 under curves: plan CPU 0.84-
    0.88 s -> 1.16 s and the periodic LP's wall 0.39-0.56 -> 0.81-0.95 s in ``autoshard bench
    prices``). So ``lp`` races only when the cores it may use outnumber the threads runnable
    elsewhere. The answer does not depend on it; only the wall time does."""
    try:
        running = Path("/proc/loadavg").read_text().split()[3].split("/")[0]
        return max(int(running) - 1, 0)
    except (OSError, IndexError, ValueError):
        return None


# the longest the simplex waits for ``release`` (PDLP's solve call) before starting anyway
RELEASE_WAIT_S = 1.0


class SimplexRace:
    """``solve(interrupter)`` on a daemon thread of its own, from ``release`` on (or
    ``RELEASE_WAIT_S`` after construction); ``result`` waits for its answer, ``cancel``
    interrupts it and waits for the thread to end (an interrupted answer is dropped). An
    exception of ``solve`` is raised by ``result``.

    Why wait for ``release``: converting a model proto for MathOpt holds the GIL (15-34 ms on
    these LPs), so a simplex thread that starts converting first delays PDLP's own start by
    as much; PDLP's caller calls ``release`` right before its solve, whose conversion then
    comes first: the LPs where PDLP converges lose no start time to the race."""

    __slots__ = ("_answer", "_error", "_go", "_interrupter", "_thread")

    def __init__(self, solve: Callable[[Any], LPAnswer]) -> None:
        from ortools.util.python.pybind_solve_interrupter import PySolveInterrupter

        self._interrupter = PySolveInterrupter()
        self._go = threading.Event()
        self._answer: LPAnswer | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(solve,), daemon=True,
                                        name="simplex-race")
        self._thread.start()

    def _run(self, solve: Callable[[Any], LPAnswer]) -> None:
        self._go.wait(RELEASE_WAIT_S)
        try:
            self._answer = solve(self._interrupter)
        except BaseException as error:  # handed to ``result``'s caller, who owns the LP
            self._error = error

    def result(self) -> LPAnswer:
        """The simplex's answer, once it has finished."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._answer is not None
        return self._answer

    def release(self) -> None:
        """Let the simplex start (PDLP is about to)."""
        self._go.set()

    def interrupt(self) -> None:
        """Tell the simplex to stop, without waiting for it (Glop notices within ~10 ms on
        an idle core, 40-65 ms on a loaded machine): the caller goes on at once and
        ``cancel`` later ends the thread."""
        self._interrupter.interrupt()

    def cancel(self) -> None:
        """Stop the simplex (if still running) and wait for its thread: no solver work is
        left behind."""
        self._interrupter.interrupt()
        self._go.set()
        self._thread.join()

    def running(self) -> bool:
        """Whether the thread is still alive (tests)."""
        return self._thread.is_alive()
