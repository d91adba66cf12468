"""``verify`` shows a progress bar of the emulated ops on stderr when asked (the CLI asks on a
terminal): llama3-70b's scaled copy still runs ~8,000 ops on 64 devices for minutes.

The emulation is made slow by the clock (each op sleeps), not by size, so the bar's delay is
passed on a model that emulates in milliseconds; the verdict is the emulator's own.
"""

from __future__ import annotations

import time

import autoshard
from autoshard.verify import emulator
from autoshard.verify.verification import verify
from graphs import zoo

MESH = autoshard.Mesh.parse("tp=2")


def _slow_ops(monkeypatch, seconds: float) -> None:
    run_op = emulator._Run._op

    def slow(self, op):
        time.sleep(seconds)
        return run_op(self, op)

    monkeypatch.setattr(emulator._Run, "_op", slow)


def test_a_slow_emulation_shows_its_progress_when_asked(monkeypatch, capfd) -> None:
    graph = zoo.build("mlp", layers=1, hidden=8, ffn=16, batch=2, seq=4)
    plan = autoshard.plan(graph, MESH)
    _slow_ops(monkeypatch, 0.25)
    result = verify(plan, graph, progress=True)
    assert result.passed and result.seconds > 1.0  # past the bar's delay
    err = capfd.readouterr().err
    assert "emulating" in err and "op" in err


def test_no_progress_unless_asked(monkeypatch, capfd) -> None:
    graph = zoo.build("mlp", layers=1, hidden=8, ffn=16, batch=2, seq=4)
    plan = autoshard.plan(graph, MESH)
    _slow_ops(monkeypatch, 0.25)
    assert verify(plan, graph).passed
    assert "emulating" not in capfd.readouterr().err
