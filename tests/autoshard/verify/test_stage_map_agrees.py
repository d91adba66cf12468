"""The emulator runs the layouts the pipelined plan priced: for every op of the whole model,
the stage-model op whose layouts ``verify`` runs it with (``verify.stage_map``) is the one
whose record the plan's per-stage ``costs.csv`` says it copies (``stage_model_op``, written
by the pricing's attribution, ``planning.pipeline.stage_rows``): two modules that must agree.

The interleaved case's stage model has layers that chose other strategies (checked in
tests/autoshard/planning/pipeline/test_stage_reports.py), so a layer mapped to another
stage-model layer than the priced one runs other layouts.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from autoshard.planning.planner import training_step_graph
from autoshard.verify.stage_map import StageMap
from graphs import zoo
from tests.support.cli import run

SHAPE = {"layers": 8, "seq": 128, "hidden": 256, "ffn": 512, "heads": 8}
ARGS = ("--model", "llama3-8b", *(f"--{k}={v}" for k, v in SHAPE.items()), "--training",
        "--global-batch", "32", "--micro-batch", "2", "--mesh", "pp=2,tp=2", "--schedule",
        "interleaved")


def test_every_layer_op_runs_the_stage_model_op_it_was_priced_as(tmp_path: Path) -> None:
    result = run("plan", *ARGS, "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    pipeline = json.loads((tmp_path / "plan.json").read_text())["pipeline"]
    k = int(pipeline["stage_model_layers"])
    forward = zoo.build("llama3-8b", **SHAPE, batch=4)
    stage = training_step_graph(zoo.build("llama3-8b", **{**SHAPE, "layers": k}, batch=4),
                                "adamw", "none")
    mapping = StageMap(forward, pipeline, stage)
    with (tmp_path / "costs.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    layer_rows = [r for r in rows if r["op"] != r["stage_model_op"]]
    assert layer_rows  # copies renamed onto the model's layers
    wrong = [(r["op"], r["stage_model_op"], mapping.mapped(r["op"])) for r in layer_rows
             if mapping.mapped(r["op"]) != r["stage_model_op"]]
    assert not wrong, wrong[:5]
