"""What is exported runs, and runs exactly what was priced: the DTensor and JAX scripts of real
training plans, executed.

For ``mlp``, ``transformer`` and ``gpt2`` (2 layers) training plans on ``dp=2,tp=2`` and
``dp=2,tp=4`` (planned at their own sizes, run on the verifier's scaled copy of the graph,
:mod:`tests.support.exported_scripts`):

* the DTensor script runs under ``torchrun`` with Gloo on CPU; ``CommDebugMode`` counts the
  collectives of every reshard, per kind and per mesh axes (from the process group each one
  ran on);
* the JAX script runs on 8 host CPU devices; the collectives of every reshard are read from
  XLA's compiled HLO (device groups mapped back to mesh axes).

Independent truths: the plan's own priced list (kind and axes of each collective, from
``plan.json``) and the unsharded model's values (the NumPy reference in float64 on the same
inputs). A substitution is accepted only where the export states it (``executed_kind`` of the
runtime the script carries: a collective-permute is an ``all_to_all_single`` in torch, a max/min
reduce-scatter an all-to-all in JAX). One subprocess per (framework, mesh).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from autoshard.export import dtensor_runtime, jax_runtime
from autoshard.sharding.mesh import Mesh
from tests.support.exported_scripts import (
    MESHES,
    MODELS,
    Case,
    build_case,
    run_dtensor,
    run_jax,
)

_BUILT: dict[str, list[Case]] = {}


def _cases(mesh: str, root: Path) -> list[Case]:
    if mesh not in _BUILT:
        _BUILT[mesh] = [build_case(model, mesh, root) for model in MODELS]
    return _BUILT[mesh]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("exported")


def _priced(case: Case, executed: Callable[[str, str | None], str]) -> list[list]:
    """Per reshard of the plan file, the collectives it must run: (kind, mesh axes in mesh
    order), sorted, with only the substitutions the script's runtime states."""
    names = Mesh.parse(case.mesh).axis_names
    out = []
    for record, lowered in zip(case.plan.reshards, case.reshards, strict=True):
        assert [(c.kind, tuple(c.axes)) for c in record.collectives] == \
            [(c.kind, c.axes) for c in lowered.collectives]
        out.append(sorted([executed(c.kind, c.reduce_op),
                           sorted(c.axes, key=names.index)]
                          for c in lowered.collectives if c.kind not in jax_runtime.LOCAL_KINDS))
    return out


def _rtol(dtype: str) -> float:
    """Element-wise rounding of one cast (bf16: 8 significant bits) and nothing else: every
    step moves or sums values with zeros, or averages equal copies over 2^k devices."""
    return {"bf16": 2.0**-8, "f16": 2.0**-10, "f32": 2.0**-22}.get(dtype, 0.0)


def _check_values(case: Case, fmt: str) -> list[str]:
    values, results, problems = case.values(), case.results(fmt), []

    def compare(key: str, tensor: str) -> None:
        got, want = results[key], values[tensor]
        rtol = _rtol(case.plan.tensors[tensor].dtype)
        if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=1e-30):
            err = np.max(np.abs(got - want)) if got.shape == want.shape else "shape"
            problems.append(f"{case.name} {fmt} {key} ({tensor}): off by {err}")

    placed = [k.removeprefix("placed/") for k in results if k.startswith("placed/")]
    assert placed, "nothing placed"
    for name in placed:
        compare(f"placed/{name}", name)
    for index, record in enumerate(case.plan.reshards):
        compare(f"reshard/{index}", record.tensor)
    return problems


def _check_collectives(case: Case, fmt: str, runtime: object) -> list[str]:
    report = case.report(fmt)
    assert len(report) == len(case.plan.reshards)
    problems = []
    for row, record, priced in zip(report, case.plan.reshards, _priced(case, runtime.executed_kind),
                                   strict=True):
        assert (row["tensor"], row["producer"], row["consumer"]) == \
            (record.tensor, record.producer, record.consumer)
        if row["ran"] != priced:
            problems.append(f"{case.name} {fmt} reshard {row['index']} {record.tensor} "
                            f"{record.producer}->{record.consumer}: ran {row['ran']}, "
                            f"priced {priced}")
        if fmt == "dtensor" and row["comm_debug_mode"] != len(row["ran"]):
            problems.append(f"{case.name}: CommDebugMode counted {row['comm_debug_mode']} "
                            f"collectives, the log {len(row['ran'])}")
    return problems


def _check(cases: list[Case], fmt: str, runtime: object) -> None:
    problems = []
    for case in cases:
        assert case.scaled_dims, f"{case.name} ran at its planned sizes"
        problems += _check_collectives(case, fmt, runtime)
        problems += _check_values(case, fmt)
        if case.exit_code(fmt) != 0:
            problems.append(f"{case.name} {fmt}: the script reported a mismatch")
    ran = [tuple(c[0:1]) + tuple(c[1]) for case in cases for row in case.report(fmt)
           for c in row["ran"]]
    assert len(ran) > 50, "too few collectives to be a test"
    kinds = {c[0] for c in ran}
    assert {"all_gather", "all_reduce", "reduce_scatter", "all_to_all"} <= kinds, kinds
    assert any(len(c) > 2 for c in ran), "no step over two mesh axes"
    assert not problems, "\n".join(problems)


@pytest.mark.jax
@pytest.mark.parametrize("mesh", MESHES)
def test_jax_scripts_run_the_priced_collectives(mesh: str, root: Path) -> None:
    cases = _cases(mesh, root)
    result = run_jax(cases)
    assert result.returncode == 0, result.stderr[-4000:]
    _check(cases, "jax", jax_runtime)


@pytest.mark.torch
@pytest.mark.parametrize("mesh", MESHES)
def test_dtensor_scripts_run_the_priced_collectives(mesh: str, root: Path) -> None:
    cases = _cases(mesh, root)
    result = run_dtensor(cases)
    assert result.returncode == 0, result.stderr[-4000:]
    _check(cases, "dtensor", dtensor_runtime)

