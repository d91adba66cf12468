"""``diff``: two plans side by side. The oracles recount from the plans themselves: which
tensors differ, what each plan's collectives cost, and the identity that what B adds minus
what B removes is B's reshard time minus A's."""

from __future__ import annotations

import csv

import pytest

import autoshard
from autoshard.errors import UsageError
from autoshard.explain import diff_plans
from autoshard.explain.diff_render import diff_text, write_csv
from graphs import zoo

MESH = autoshard.Mesh.parse("dp=2,tp=2")
SHAPE = {"layers": 2, "batch": 8, "seq": 64, "hidden": 128, "heads": 4, "vocab": 256}


@pytest.fixture(scope="module")
def plans():
    graph = zoo.build("gpt2", **SHAPE)
    return (autoshard.plan(graph, MESH, training=True),
            autoshard.plan(graph, MESH, training=True, strategy="megatron"))


def test_a_plan_against_itself_differs_in_nothing(plans) -> None:
    diff = diff_plans(plans[0], plans[0])
    assert not diff.placements and not diff.added and not diff.removed
    assert all(row.delta == 0 for row in (*diff.time, *diff.memory))


def test_placements_time_memory_and_collectives_add_up(plans) -> None:
    a, b = plans
    diff = diff_plans(a, b)
    differing = [n for n in a.tensors if a.tensors[n].placements != b.tensors[n].placements]
    assert sum(p.tensors for p in diff.placements) == len(differing)
    wq = [p for p in diff.placements if p.pattern == "layers.*.attn.wq"]
    assert wq and wq[0].b == "R S(1)" and wq[0].tensors == 2
    rows = {r.item.strip(): r for r in diff.time}
    assert rows["step"].b == pytest.approx(rows["compute"].b + rows["communication"].b
                                           + rows["hidden behind compute"].b
                                           + rows["beside other axes' communication"].b
                                           + rows["pipeline idle"].b)
    kinds = [r for r in diff.time if r.item.startswith("  ")]
    assert sum(r.b for r in kinds) == pytest.approx(b.objective.comm_s, rel=1e-9)
    assert sum(r.a for r in kinds) == pytest.approx(a.objective.comm_s, rel=1e-9)
    reshard_a = sum(r.count * r.seconds for r in a.reshards)
    reshard_b = sum(r.count * r.seconds for r in b.reshards)
    net = sum(c.seconds for c in diff.added) - sum(c.seconds for c in diff.removed)
    assert net == pytest.approx(reshard_b - reshard_a, rel=1e-9)
    memory = {r.item.strip(): r for r in diff.memory}
    assert memory["peak per device"].delta == \
        b.peak_bytes_per_device - a.peak_bytes_per_device
    text = diff_text(diff)
    assert "layers.*.attn.wq (2)" in text and "collectives B adds" in text


def test_plans_of_different_problems_are_refused_unless_forced(plans, tmp_path) -> None:
    other = autoshard.plan(zoo.build("gpt2", **{**SHAPE, "hidden": 256}), MESH, training=True)
    with pytest.raises(UsageError, match="tensors") as error:
        diff_plans(plans[0], other)
    assert "--force" in str(error.value)
    wider = autoshard.plan(zoo.build("gpt2", **SHAPE), autoshard.Mesh.parse("dp=4,tp=2"),
                           training=True)
    with pytest.raises(UsageError, match="mesh dp=2,tp=2 vs dp=4,tp=2"):
        diff_plans(plans[0], wider)
    forced = diff_plans(plans[0], wider, force=True)
    assert forced.differs and forced.time
    write_csv(forced, tmp_path / "diff.csv")
    with (tmp_path / "diff.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(forced.rows())
    assert {r["section"] for r in rows} >= {"time", "memory"}


@pytest.mark.parametrize(("seconds", "text"), [
    (-1.224494113, "-1.224 s"), (-0.095587761, "-95.588 ms"), (-1.9e-6, "-1.900 us"),
    (1.129, "1.129 s"), (0.0, "0.000 us"), (-0.001, "-1.000 ms")])
def test_negative_seconds_scale_like_positive_ones(seconds, text) -> None:
    from autoshard.planning.summary import format_seconds
    assert format_seconds(seconds) == text


def test_diff_time_rows_are_scaled_and_aligned(plans) -> None:
    """The hidden and beside-other-axes rows are negative (they come off the step time):
    they print in ms like the rest, and every time and memory row's columns line up."""
    from dataclasses import replace
    a, b = plans  # seconds of hidden/beside communication, as a big model has
    a = replace(a, objective=replace(a.objective, hidden_s=1.224494113, concurrent_s=3.1e-3))
    b = replace(b, objective=replace(b.objective, hidden_s=0.095587761, concurrent_s=3.5e-5))
    diff = diff_plans(a, b)
    lines = diff_text(diff).splitlines()
    header = next(i for i, line in enumerate(lines) if line.rstrip().endswith("B - A"))
    rows = lines[header + 1:header + 1 + len(diff.time) + len(diff.memory)]
    assert all(len(line) == len(lines[header]) for line in rows), "\n".join(rows)
    for line in rows[:len(diff.time)]:
        for value in line.split()[-6:][::2]:  # the A, B and B - A numbers
            assert abs(float(value)) < 1000, line
