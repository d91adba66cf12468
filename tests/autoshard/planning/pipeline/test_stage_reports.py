"""A pipelined plan's costs.csv and reshards.csv describe the whole step, stage by stage.

Oracles, none of them the report code: the step parts in plan.json's objective (the
simulated schedule's critical stage, :func:`pipeline_objective`), the stage cut in its
``pipeline`` record, and a count of the stage model's own ops (every layer of the whole
model appears once, each a copy of one stage-model layer: ``|ops| − k·c + n·c`` rows for
``c`` ops per layer, ``k`` stage-model layers and ``n`` model layers).

The interleaved case's stage-model layers do not all price alike (checked below), so the
rows add up only if every layer copies the stage-model layer its price was taken from.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from tests.support.cli import run

SMALL = ("--model", "llama3-8b", "--layers", "8", "--seq", "128", "--hidden", "256", "--ffn",
         "512", "--heads", "8", "--training", "--global-batch", "32", "--micro-batch", "2")
CASES = {
    "1f1b": ("--mesh", "dp=2,pp=2,tp=2", "--schedule", "1f1b"),
    # the stage model's first layer chose other strategies than the rest here
    "interleaved": ("--mesh", "pp=2,tp=2", "--schedule", "interleaved"),
}
LAYER = re.compile(r"(?<![^./])(\d+)(?=[./])")
CSV_REL = 1e-8  # the CSVs hold 9 significant digits


@pytest.fixture(scope="module", params=sorted(CASES))
def written(request, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp(request.param)
    result = run("plan", *SMALL, *CASES[request.param], "--out", str(out))
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "plan.json").read_text())


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as handle:
        return list(csv.DictReader(handle))


def _sum(rows: list[dict[str, str]], column: str) -> float:
    return sum(float(r[column]) * int(r["count"]) for r in rows)


def test_the_critical_stage_rows_add_up_to_the_step(written) -> None:
    out, plan = written
    objective, stage = plan["objective"], str(plan["pipeline"]["critical_stage"])
    costs = [r for r in _rows(out / "costs.csv") if r["stage"] == stage]
    reshards = [r for r in _rows(out / "reshards.csv") if r["stage"] == stage]
    compute = _sum(costs, "compute_s")
    comm = _sum(costs, "comm_s") + _sum(reshards, "seconds")
    assert compute == pytest.approx(objective["compute_s"], rel=CSV_REL)
    assert comm == pytest.approx(objective["comm_s"], rel=CSV_REL)
    step = (compute + comm - objective["hidden_s"] - objective["concurrent_s"]
            + objective["bubble_s"])
    assert step == pytest.approx(objective["total_s"], rel=CSV_REL)


def test_each_stage_holds_its_layers_once_and_every_layer_is_there(written) -> None:
    out, plan = written
    record = plan["pipeline"]
    costs = _rows(out / "costs.csv")
    model_layers = sum(record["layers_per_chunk"])
    for row in record["stage"]:
        want = {layer for start, end in row["layers"] for layer in range(start, end)}
        got = {int(found.group(1)) for r in costs if r["stage"] == str(row["stage"])
               if (found := LAYER.search(r["op"]))}
        assert got == want
        ops = {r["op"] for r in costs if r["stage"] == str(row["stage"])}
        assert ("embed.lookup" in ops) is row["embedding"]
        assert ("head" in ops) is row["head"]
    k = record["stage_model_layers"]
    per_layer = sum(1 for name in plan["ops"] if name.startswith("layers.0.")
                    or "/layers.0." in name)
    assert len(costs) == len(plan["ops"]) - k * per_layer + model_layers * per_layer
    assert len({r["op"] for r in costs}) == len(costs)  # every copy renamed to its layer


def test_the_rows_say_what_they_copy(written) -> None:
    out, plan = written
    for r in _rows(out / "costs.csv"):
        source = plan["ops"][r["stage_model_op"]]
        assert float(r["compute_s"]) == pytest.approx(source["compute_s"], rel=CSV_REL)
        assert int(r["count"]) == source["count"]
    pairs = {(r["tensor"], r["consumer"]) for r in plan["reshards"]}
    for r in _rows(out / "reshards.csv"):
        assert (r["stage_model_tensor"], r["stage_model_consumer"]) in pairs
        assert r["phase"] in ("forward", "backward", "weight", "tail")



@pytest.mark.parametrize("written", ["interleaved"], indirect=True)
def test_the_interleaved_case_has_stage_model_layers_that_differ(written) -> None:
    """What makes the sums above a test of which layer each copy copies."""
    _, plan = written
    assert plan["pipeline"]["schedule"] == "interleaved"
    sums = [0.0] * plan["pipeline"]["stage_model_layers"]
    for name, op in plan["ops"].items():
        if found := LAYER.search(name):
            sums[int(found.group(1))] += op["compute_s"] * op["count"]
    assert max(sums) - min(sums) > 1e-6 * max(sums)
