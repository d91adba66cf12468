"""Dispatch ``autoshard bench NAME`` to the benchmark module that owns NAME.

Each benchmark module exposes ``run(out_dir, quick=False) -> list[Path]`` and writes CSV (and
plots) that state the command and the machine that made them.
"""

from __future__ import annotations

import difflib
import importlib
from pathlib import Path
from types import ModuleType

from autoshard.errors import UsageError

BENCHMARKS = {
    "calibration": "autoshard.bench.calibration",
    "context-parallel": "autoshard.bench.context_parallel",
    "enumerate": "autoshard.bench.enumerate",
    "fidelity": "autoshard.bench.fidelity",
    "kernels": "autoshard.bench.kernels",
    "moe-links": "autoshard.bench.moe_links",
    "pipeline": "autoshard.bench.pipeline",
    "prices": "autoshard.bench.prices",
    "reshard": "autoshard.bench.reshard",
    "scale": "autoshard.bench.scale",
    "share": "autoshard.bench.share",
    "solver": "autoshard.bench.solver",
    "sweep": "autoshard.bench.sweep",
    "xla-crosscheck": "autoshard.bench.xla_crosscheck",
}


def benchmark_module(name: str) -> ModuleType:
    """The module that owns benchmark ``name`` (its docstring is the benchmark's help).

    Raises:
        UsageError: no such benchmark (naming the choices and the closest ones).
    """
    if name not in BENCHMARKS:
        close = difflib.get_close_matches(name, sorted(BENCHMARKS), n=2)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        choices = ", ".join(sorted(BENCHMARKS))
        raise UsageError(f'unknown benchmark "{name}" (choose one of {choices}){hint}')
    return importlib.import_module(BENCHMARKS[name])


def run_benchmark(name: str, out_dir: Path, *, quick: bool = False) -> list[Path]:
    module = benchmark_module(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    return list(module.run(out_dir, quick=quick))
