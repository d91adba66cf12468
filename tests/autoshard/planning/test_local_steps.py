"""A reshard's local steps (``all_slice``: each device keeps a slice of what it holds) move no
bytes over any link: the summary, plan.json's objective, the CSVs and the trace all count
them as compute, and the step's parts still add up.

The user walk's plan (the zoo MLP's training step on dp=2,tp=2) has one: an all_slice of
``layers.1.mlp.gelu.out`` over dp,tp. The oracles are the written files read back (the CSVs
with pandas, the trace with the format-document reader of ``tests/support``), and the local
kinds are named here from the reshard search's moves, not taken from the code.
"""

from __future__ import annotations

import functools
import json

import pandas as pd
import pytest

import autoshard
from autoshard.planning.record import Plan
from autoshard.planning.summary import format_seconds, summary_text
from autoshard.timeline import write_trace
from graphs import zoo
from tests.support.trace_format import read_trace

LOCAL = ("all_slice", "replicated_to_partial")  # the search's moves that send nothing


@functools.cache
def walk_plan() -> Plan:
    return autoshard.plan(zoo.build("mlp"), autoshard.Mesh.parse("dp=2,tp=2"), training=True)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("walk")
    walk_plan().save(out)
    write_trace(walk_plan(), out / "trace.json")
    return {"costs": pd.read_csv(out / "costs.csv", keep_default_na=False),
            "reshards": pd.read_csv(out / "reshards.csv", keep_default_na=False),
            "objective": json.loads((out / "plan.json").read_text())["objective"],
            "trace": read_trace(out / "trace.json")}


def test_the_walk_has_a_local_step(written) -> None:
    kinds = list(written["reshards"]["collective"])
    assert "all_slice" in kinds


def test_the_csvs_mark_local_steps_and_split_like_the_objective(written) -> None:
    costs, reshards, objective = written["costs"], written["reshards"], written["objective"]
    assert list(reshards["local"]) == [kind in LOCAL for kind in reshards["collective"]]
    local = reshards[reshards["collective"].isin(LOCAL)]
    moved = reshards[~reshards["collective"].isin(LOCAL)]
    compute = (costs["compute_s"] * costs["count"]).sum() + (
        local["seconds"] * local["count"]).sum()
    comm = (costs["comm_s"] * costs["count"]).sum() + (moved["seconds"] * moved["count"]).sum()
    assert objective["compute_s"] == pytest.approx(compute, rel=1e-9)
    assert objective["comm_s"] == pytest.approx(comm, rel=1e-9, abs=1e-15)
    assert objective["compute_s"] + objective["comm_s"] - objective["hidden_s"] \
        - objective["concurrent_s"] + objective["bubble_s"] == pytest.approx(
            objective["total_s"], rel=1e-9)


def test_the_trace_draws_local_steps_as_compute_work(written) -> None:
    trace, objective = written["trace"], written["objective"]
    slices = [e for e in trace.events if e.name.startswith(LOCAL)]
    assert slices and all(e.thread == "compute" for e in slices)
    work = [e for e in trace.events if e.thread == "compute" and e.cat in ("compute", "local")]
    assert sum(e.end_ns - e.start_ns for e in work) == pytest.approx(
        objective["compute_s"] * 1e9, abs=len(work))


def test_the_summary_counts_local_steps_as_compute(written) -> None:
    text = summary_text(walk_plan())
    reshards = written["reshards"]
    local = reshards[reshards["collective"].isin(LOCAL)]
    top = [line for line in text.splitlines() if line.startswith("  ") and " over " in line]
    assert not [line for line in top if any(kind in line for kind in LOCAL)], text
    seconds = format_seconds(float((local["seconds"] * local["count"]).sum()))
    assert f"local      {len(local)} reshard step" in text
    assert f"(all_slice), {seconds} per step, counted as compute" in text
    objective = written["objective"]
    assert (f"(compute {format_seconds(objective['compute_s'])}, communication "
            f"{format_seconds(objective['comm_s'])} ") in text
