"""Run several exported plan scripts in one process: ``run_scripts.py FORMAT DIR...``.

Each ``DIR`` holds ``plan_<FORMAT>.py`` and ``values.npz``; the script's own ``main`` runs with
``--values``, ``--report`` and ``--results`` pointing into ``DIR`` and its exit code goes to
``DIR/exit_<FORMAT>.txt``. One process for all scripts because start-up (importing torch or
jax, Gloo's rendezvous) costs more than the scripts. Under ``torchrun`` every rank runs every
script; this runner initializes the process group (so the scripts leave it alone) and destroys it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def run(fmt: str, directory: Path) -> int:
    spec = importlib.util.spec_from_file_location(f"plan_{directory.name}", directory /
                                                  f"plan_{fmt}.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return int(script.main(["--values", str(directory / "values.npz"),
                            "--report", str(directory / f"report_{fmt}.json"),
                            "--results", str(directory / f"results_{fmt}.npz")]))


def main(argv: list[str]) -> int:
    fmt, *directories = argv
    rank = 0
    if fmt == "dtensor":
        import torch.distributed as dist

        dist.init_process_group("gloo")  # one group for every script (they leave it alone)
        rank = dist.get_rank()
    for directory in map(Path, directories):
        code = run(fmt, directory)
        if rank == 0:
            (directory / f"exit_{fmt}.txt").write_text(f"{code}\n")
    if fmt == "dtensor":
        dist.barrier()  # no rank tears the group down while another still talks to it
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
