"""The exported scripts' runtimes on random reshards: every priced step runs as exactly one
collective (torch: ``CommDebugMode``; JAX: XLA's compiled HLO), with only the substitutions the
runtime states, and the value survives unchanged.

The plans of test_scripts_run.py never price a collective-permute (two equal-sized axes) or a
max reduction; random layout pairs of a ``[8, 16]`` tensor on ``a=2,b=2,c=2`` (JAX, 8 host
devices) and ``dp=2,tp=2`` (torchrun, 4 Gloo processes) do
(:mod:`tests.support.random_reshards`). Independent truths: the source value (a reshard moves
data, it never changes it; sums of one share and zeros are exact) and the priced steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from autoshard.export import dtensor_runtime, jax_runtime
from autoshard.sharding.mesh import Mesh
from tests.support import REPO_ROOT

SCRIPT = REPO_ROOT / "tests" / "support" / "random_reshards.py"


def _run(command: list[str], env: dict[str, str]) -> list[dict]:
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, timeout=600,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **env}, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _check(rows: list[dict], mesh: str, executed) -> Counter:
    names = Mesh.parse(mesh).axis_names
    kinds: Counter = Counter()
    for row in rows:
        priced = sorted([executed(kind, op), sorted(axes, key=names.index)]
                        for kind, axes, _, _, op in row["steps"]
                        if kind not in jax_runtime.LOCAL_KINDS)
        assert row["ran"] == priced, row
        assert row["equal"], row
        assert row.get("counted", len(row["ran"])) == len(row["ran"]), row
        kinds.update((kind, len(axes), op) for kind, axes, _, _, op in row["steps"])
    return kinds


@pytest.mark.jax
def test_jax_runtime_runs_random_reshards_as_priced() -> None:
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    rows = _run([sys.executable, str(SCRIPT), "jax", "a=2,b=2,c=2", "60"], env)
    kinds = _check(rows, "a=2,b=2,c=2", jax_runtime.executed_kind)
    assert {k for k, _, _ in kinds} >= {"all_gather", "all_reduce", "reduce_scatter",
                                        "all_to_all", "collective_permute", "all_slice"}
    assert any(op == "max" for kind, _, op in kinds if kind == "reduce_scatter")
    assert any(n > 1 for kind, n, _ in kinds if kind not in ("collective_permute", "all_slice"))


@pytest.mark.torch
def test_dtensor_runtime_runs_random_reshards_as_priced() -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc-per-node=4", str(SCRIPT), "dtensor", "dp=2,tp=2", "80"]
    rows = _run(command, {})
    kinds = _check(rows, "dp=2,tp=2", dtensor_runtime.executed_kind)
    assert {k for k, _, _ in kinds} >= {"all_gather", "all_reduce", "reduce_scatter",
                                        "all_to_all", "collective_permute"}
    assert any(n == 2 for kind, n, _ in kinds if kind != "collective_permute")
    assert any(op == "max" for kind, _, op in kinds if kind == "reduce_scatter")
