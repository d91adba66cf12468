"""Plans exported as DTensor and JAX scripts, run for real, and read back.

A case plans a zoo model's training step at its own sizes (round-tripped through
``plan.json``, as ``autoshard plan --out`` writes it), lowers the reshards as ``autoshard
export`` does, and writes both scripts for the verifier's scaled copy of the graph
(:func:`autoshard.verify.verification.scaled_graph`: same ops, same strategies, every mesh-axis
product dividing the same dims, so every priced step is valid on it), plus the unsharded
model's value of every tensor the scripts read (``values.npz``, float64 from the NumPy
reference). :func:`run_jax` runs every case's JAX script in one process on 8 host devices;
:func:`run_dtensor` runs the DTensor scripts of one mesh under ``torchrun`` with Gloo (CPU).
Each script writes ``report_<fmt>.json`` (planned and executed collectives per reshard) and
``results_<fmt>.npz`` (every placed tensor and reshard result, full).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import autoshard
from autoshard.export.lowering import LoweredReshard, lower_plan_reshards
from autoshard.export.plan_export import export_plan
from autoshard.export.plan_view import plan_links, plan_shardings
from autoshard.planning.record import Plan
from autoshard.sharding.mesh import Mesh
from autoshard.verify.reference import reference_values
from autoshard.verify.verification import scaled_graph
from graphs import OpGraph, zoo
from tests.support import REPO_ROOT

MODELS = {"mlp": {}, "transformer": {}, "gpt2": {"layers": 2}}
MESHES = ("dp=2,tp=2", "dp=2,tp=4")
# dgx-h100 with the flat compute roofline: these cases were chosen so that their plans run every
# collective kind (all_to_all included); the kernel model prices small local GEMMs higher and
# its dp=2,tp=4 plans use no all_to_all. What the scripts check (they run what was priced) does
# not depend on how compute is priced. Same name, same links: plan_links rebuilds them.
_H100 = autoshard.get_preset("dgx-h100")
FLAT_H100 = replace(_H100, device=replace(_H100.device, kernels=None))
FORMATS = ("dtensor", "jax")
RUNNER = REPO_ROOT / "tests" / "support" / "run_scripts.py"


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    mesh: str
    directory: Path
    plan: Plan
    small: OpGraph
    scaled_dims: dict[str, tuple[int, int]]
    reshards: tuple[LoweredReshard, ...]

    def script(self, fmt: str) -> Path:
        return self.directory / f"plan_{fmt}.py"

    def report(self, fmt: str) -> list[dict[str, Any]]:
        return json.loads((self.directory / f"report_{fmt}.json").read_text())

    def results(self, fmt: str) -> dict[str, np.ndarray]:
        return dict(np.load(self.directory / f"results_{fmt}.npz"))

    def values(self) -> dict[str, np.ndarray]:
        return dict(np.load(self.directory / "values.npz"))

    def exit_code(self, fmt: str) -> int:
        return int((self.directory / f"exit_{fmt}.txt").read_text())


def build_case(model: str, mesh_text: str, root: Path) -> Case:
    """Plan, scale, export and write the values of one (model, mesh) case under ``root``."""
    name = f"{model}-{mesh_text.replace('=', '').replace(',', 'x')}"
    directory = root / name
    planned = autoshard.plan(zoo.build(model, **MODELS[model]), Mesh.parse(mesh_text),
                             training=True, topology=FLAT_H100)
    planned.save(directory)
    plan = Plan.load(directory / "plan.json")
    small, dims = scaled_graph(plan, zoo.build(model, **MODELS[model]))
    view = plan_shardings(plan)
    topology, links = plan_links(plan, view.mesh)
    reshards = lower_plan_reshards(plan, view, links, topology.device.hbm_bw_bytes_per_s)
    small_view = replace(view, shapes={n: tuple(small.tensors[n].shape) for n in view.shapes})
    for fmt in FORMATS:
        (directory / f"plan_{fmt}.py").write_text(export_plan(plan, small_view, reshards, fmt))
    values = reference_values(small)
    read = {r.tensor for r in reshards} | {n for n, r in view.roles.items()
                                           if r in ("param", "optimizer_state", "input")}
    np.savez(directory / "values.npz", **{n: values[n] for n in sorted(read)})
    return Case(name=name, model=model, mesh=mesh_text, directory=directory, plan=plan,
                small=small, scaled_dims=dims, reshards=reshards)


def _run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env}, timeout=900,
                          check=False)


def run_jax(cases: list[Case]) -> subprocess.CompletedProcess:
    """Every case's JAX script in one process with 8 host CPU devices."""
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    return _run([sys.executable, str(RUNNER), "jax", *(str(c.directory) for c in cases)], env)


def run_dtensor(cases: list[Case]) -> subprocess.CompletedProcess:
    """The DTensor scripts of cases on one mesh, under ``torchrun`` with Gloo on CPU."""
    devices = {Mesh.parse(c.mesh).size for c in cases}
    assert len(devices) == 1, "one torchrun per mesh size"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc-per-node={devices.pop()}", str(RUNNER), "dtensor",
               *(str(c.directory) for c in cases)]
    return _run(command, {})
