"""A pipelined step's parts add up to it: the stage that finishes last, split into compute,
communication (less what hid behind compute or beside another axis's) and idle time.

Hand example, GPipe over p = 2 equal stages and m = 4 micro-batches, each stage one chunk
with F = 1 and B = 2 per micro-batch (made of 2.5 of compute and 0.5 exposed of 1.0 of
communication, 0.2 of it beside another axis) and a tail of 0.5 after its last task (0.3 of
compute and 0.2 exposed of 0.4 of communication). GPipe's step is (m + p − 1)(F + B) = 15
(Huang et al. 2019), stage 0 finishes last (its last backward) at 15 and its tail ends the step
at 15.5; it worked m(F + B) + 0.5 = 12.5, so it idled (p − 1)(F + B) = 3. Its compute is
4·2.5 + 0.3 = 10.3, communication 4·1.0 + 0.4 = 4.4, beside another axis 4·0.2 = 0.8 and
hidden 4·0.3 + 0.2 = 1.4: 10.3 + 4.4 − 1.4 − 0.8 + 3 = 15.5.
"""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import pytest

from autoshard.planning.pipeline.layer_costs import PartCost
from autoshard.planning.pipeline.partition import Cut
from autoshard.planning.pipeline.record import critical_stage, pipeline_objective
from autoshard.planning.pipeline.schedules import Schedule
from autoshard.planning.pipeline.search import Choice, Setting
from autoshard.planning.pipeline.simulate import ChunkCost, simulate
from autoshard.planning.record import Objective
from tests.support.cli import run

CHUNK = PartCost(forward_s=1.0, backward_s=2.0, tail_s=0.5, ops_compute_s=2.5, comm_s=1.0,
                 concurrent_s=0.2, tail_compute_s=0.3, tail_comm_s=0.4)


def test_the_hand_example_adds_up() -> None:
    p, m = 2, 4
    timeline = simulate(Schedule.GPIPE, [ChunkCost(1.0, 2.0)] * p, m, p, [0.5] * p)
    choice = Choice(schedule=Schedule.GPIPE, chunks_per_stage=1,
                    cut=Cut(layers=(1, 1), chunks=(CHUNK, CHUNK)), timeline=timeline,
                    stage_bytes=(0.0, 0.0), stage_parts=(CHUNK, CHUNK), held_bytes=(0.0, 0.0))
    setting = Setting(stages=p, micro_batches=m, send_s=0.0, limit_bytes=math.inf,
                      transient_bytes=0.0)
    intra = SimpleNamespace(objective=Objective(
        total_s=0.0, compute_s=0.0, comm_s=0.0, lower_bound_s=0.0, optimal=True, gap=0.0,
        status="optimal", solve_s=0.0, micro_batches=m))
    obj = pipeline_objective(intra, choice, setting)  # type: ignore[arg-type]
    assert critical_stage(choice) == 0
    got = (obj.total_s, obj.compute_s, obj.comm_s, obj.hidden_s, obj.concurrent_s, obj.bubble_s)
    assert got == pytest.approx((15.5, 10.3, 4.4, 1.4, 0.8, 3.0), rel=1e-12)


SMALL = ("--model", "llama3-8b", "--layers", "8", "--seq", "128", "--hidden", "256", "--ffn",
         "512", "--heads", "8", "--training", "--mesh", "dp=2,pp=2,tp=2", "--global-batch",
         "32", "--micro-batch", "2")
UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
NUMBER = r"([\d.]+) (s|ms|us)"
LINE = re.compile(rf"step time  {NUMBER}  \(compute {NUMBER}, communication {NUMBER} of which "
                  rf"{NUMBER} hidden behind compute(?: and {NUMBER} beside other mesh axes' "
                  rf"communication)?, idle {NUMBER} in the pipeline's bubble and transfers; "
                  rf".*stage (\d+), which finishes last\)")


def _seconds(groups: tuple, index: int) -> float:
    value, unit = groups[2 * index], groups[2 * index + 1]
    return 0.0 if value is None else float(value) * UNIT[unit]


@pytest.mark.parametrize("schedule", [("--schedule", "gpipe"), ("--schedule", "1f1b"),
                                      ("--schedule", "interleaved", "--stages", "2,2,2,2")],
                         ids=["gpipe", "1f1b", "interleaved"])
def test_the_printed_parts_sum_to_the_printed_step(tmp_path, schedule) -> None:
    result = run("plan", *SMALL, *schedule, "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    found = LINE.search(result.output)
    assert found, result.output
    groups = found.groups()
    step, compute, comm, hidden, beside, idle = (_seconds(groups, i) for i in range(6))
    shown = step * 5e-4 + 5e-7  # each value is printed to 3 decimals of its unit
    assert compute + comm - hidden - beside + idle == pytest.approx(step, abs=6 * shown)
    assert hidden <= compute
    # the idle time is the critical stage's own, read off its row of the simulated timeline
    plan = json.loads((tmp_path / "plan.json").read_text())
    stage = plan["pipeline"]["stage"][int(groups[12])]
    obj = plan["objective"]
    assert stage["finish_s"] == pytest.approx(obj["total_s"], rel=1e-12)
    assert obj["bubble_s"] == pytest.approx(stage["finish_s"] - stage["busy_s"]
                                            - stage["tail_s"], rel=1e-9, abs=1e-15)
    assert obj["compute_s"] + obj["comm_s"] - obj["hidden_s"] - obj["concurrent_s"] \
        + obj["bubble_s"] == pytest.approx(obj["total_s"], rel=1e-12)
