"""The schedule simulator against closed forms from the papers and an independent longest path.

Closed forms: GPipe and 1F1B bubble ``(p-1)/(m+p-1)`` with equal stages (Huang et al. 2019;
Narayanan et al. 2021 §2.2); interleaved 1F1B ``(p-1)/(v·m+p-1)`` (Narayanan et al. 2021
§2.2.2: the bubble shrinks by ``v``); 1F1B holds ``p`` micro-batches on stage 0, GPipe ``m``;
ZB-H1's bubble ``(p-1)(T_F+T_B-T_W)`` is a third of 1F1B's ``(p-1)(T_F+T_B+T_W)`` when the
three are equal (Qi et al. 2023, arXiv:2401.10241 §2.1). Unequal stages: GPipe is two
permutation flow shops of identical jobs, whose makespan is ``Σ t_s + (m-1)·max t_s`` plus
the transfer lags along the path (Johnson 1954). The longest-path oracle rebuilds each
fixed-order schedule as a networkx DAG and asks networkx for its critical path.
"""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest

from autoshard.errors import PipelineError
from autoshard.planning.pipeline.schedules import Kind, Schedule, stage_orders
from autoshard.planning.pipeline.simulate import ChunkCost, simulate

SHAPES = [(2, 2), (2, 8), (4, 4), (4, 8), (4, 16), (8, 8), (8, 32)]


@pytest.mark.parametrize(("p", "m"), SHAPES)
@pytest.mark.parametrize("schedule", [Schedule.GPIPE, Schedule.ONE_F_ONE_B])
def test_bubble_of_gpipe_and_1f1b(schedule: Schedule, p: int, m: int) -> None:
    timeline = simulate(schedule, [ChunkCost(1.0, 2.0)] * p, m, p)
    assert timeline.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
    assert timeline.step_s == pytest.approx((m + p - 1) * 3.0)


@pytest.mark.parametrize(("p", "m"), [s for s in SHAPES if s[1] % s[0] == 0])
@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaved_bubble_shrinks_by_v(p: int, m: int, v: int) -> None:
    chunk = ChunkCost(1.0 / v, 2.0 / v)
    timeline = simulate(Schedule.INTERLEAVED, [chunk] * (p * v), m, p)
    assert timeline.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1))


@pytest.mark.parametrize(("p", "m"), SHAPES)
def test_in_flight_activations(p: int, m: int) -> None:
    one_f_one_b = simulate(Schedule.ONE_F_ONE_B, [ChunkCost(1.0, 2.0)] * p, m, p)
    assert one_f_one_b.peak_in_flight == tuple(min(p - s, m) for s in range(p))
    gpipe = simulate(Schedule.GPIPE, [ChunkCost(1.0, 2.0)] * p, m, p)
    assert gpipe.peak_in_flight == (m,) * p
    zb = simulate(Schedule.ZB_H1, [ChunkCost(1.0, 1.0, 1.0)] * p, m, p)
    assert zb.peak_in_flight == one_f_one_b.peak_in_flight


@pytest.mark.parametrize(("p", "m"), SHAPES)
def test_zb_h1_bubble_is_a_third_of_1f1b(p: int, m: int) -> None:
    chunks = [ChunkCost(1.0, 1.0, 1.0)] * p
    zb = simulate(Schedule.ZB_H1, chunks, m, p)
    base = simulate(Schedule.ONE_F_ONE_B, chunks, m, p)
    work = 3.0 * m  # every stage's F, B and W per micro-batch
    assert base.step_s - work == pytest.approx(3.0 * (p - 1))
    assert zb.step_s - work == pytest.approx((p - 1) * (1.0 + 1.0 - 1.0))
    assert (zb.step_s - work) / (base.step_s - work) == pytest.approx(1 / 3)


def test_interleaved_holds_more_than_1f1b_on_stage_0() -> None:
    """Megatron's warm-up of ``2(p-1) + (v-1)p`` chunk-forwards, plus one before the first
    backward: more than 1F1B's ``p`` micro-batches, measured in whole-stage units."""
    p, m, v = 4, 8, 2
    timeline = simulate(Schedule.INTERLEAVED, [ChunkCost(0.5, 1.0)] * (p * v), m, p)
    assert timeline.peak_in_flight[0] == 2 * (p - 1) + (v - 1) * p + 1
    assert timeline.peak_in_flight[0] / v > p


def test_gpipe_unequal_stages_is_two_flow_shops() -> None:
    forward = [1.0, 3.0, 2.0, 1.5]
    backward = [2.0, 5.0, 4.5, 3.0]
    hop, m, p = 0.25, 6, 4
    chunks = [ChunkCost(f, b, send_s=hop) for f, b in zip(forward, backward, strict=True)]
    expected = (sum(forward) + (m - 1) * max(forward) + sum(backward)
                + (m - 1) * max(backward) + 2 * (p - 1) * hop)
    assert simulate(Schedule.GPIPE, chunks, m, p).step_s == pytest.approx(expected)


def _longest_path(schedule: Schedule, chunks: list[ChunkCost], m: int, p: int) -> float:
    """The makespan of the fixed orders as the critical path of their DAG (no ZB-H1: its W
    placement is decided while simulating)."""
    v = len(chunks) // p
    orders = stage_orders(schedule, p, m, v)
    graph = nx.DiGraph()
    graph.add_node("end")

    def length(k: int, kind: Kind) -> float:
        return chunks[k].forward_s if kind is Kind.F else chunks[k].backward_s

    for s, order in enumerate(orders):
        for before, after in itertools.pairwise(order):
            k = before.chunk * p + s
            graph.add_edge((before.kind, k, before.micro), (after.kind, after.chunk * p + s,
                                                              after.micro),
                           weight=length(k, before.kind))
        last = order[-1]
        graph.add_edge((last.kind, last.chunk * p + s, last.micro), "end",
                       weight=length(last.chunk * p + s, last.kind))
    for k in range(len(chunks)):
        for i in range(m):
            if k + 1 < len(chunks):
                graph.add_edge((Kind.F, k, i), (Kind.F, k + 1, i),
                               weight=chunks[k].forward_s + chunks[k].send_s)
                graph.add_edge((Kind.B, k + 1, i), (Kind.B, k, i),
                               weight=chunks[k + 1].backward_s + chunks[k].send_s)
            else:
                graph.add_edge((Kind.F, k, i), (Kind.B, k, i), weight=chunks[k].forward_s)
    return float(nx.dag_longest_path_length(graph))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("schedule", "v"), [(Schedule.GPIPE, 1), (Schedule.ONE_F_ONE_B, 1),
                                             (Schedule.INTERLEAVED, 2)])
def test_unequal_stages_match_the_critical_path(schedule: Schedule, v: int, seed: int) -> None:
    rng = random.Random(seed)
    p, m = rng.choice([(2, 4), (4, 8), (3, 6)])
    chunks = [ChunkCost(rng.uniform(0.5, 2.0), rng.uniform(1.0, 4.0),
                        send_s=rng.uniform(0.0, 0.5)) for _ in range(p * v)]
    simulated = simulate(schedule, chunks, m, p).step_s
    assert simulated == pytest.approx(_longest_path(schedule, chunks, m, p))


def test_zb_h1_never_slower_than_1f1b_on_unequal_stages() -> None:
    rng = random.Random(7)
    for _ in range(20):
        p, m = rng.choice([(2, 4), (4, 8), (4, 12)])
        chunks = [ChunkCost(rng.uniform(0.5, 2.0), rng.uniform(0.5, 2.0), rng.uniform(0.5, 2.0),
                            rng.uniform(0.0, 0.3)) for _ in range(p)]
        zb = simulate(Schedule.ZB_H1, chunks, m, p)
        base = simulate(Schedule.ONE_F_ONE_B, chunks, m, p)
        assert zb.step_s <= base.step_s + 1e-9
        assert sum(zb.busy_s) == pytest.approx(sum(base.busy_s))


def test_tails_run_after_each_stage() -> None:
    chunks = [ChunkCost(1.0, 2.0)] * 2
    bare = simulate(Schedule.ONE_F_ONE_B, chunks, 4, 2)
    tailed = simulate(Schedule.ONE_F_ONE_B, chunks, 4, 2, tail_s=[5.0, 0.0])
    assert tailed.step_s == pytest.approx(max(bare.finish_s[0] + 5.0, bare.finish_s[1]))


@pytest.mark.parametrize(("schedule", "m", "needle"), [
    (Schedule.ONE_F_ONE_B, 3, "at least as many micro-batches"),
    (Schedule.ZB_H1, 2, "at least as many micro-batches"),
    (Schedule.INTERLEAVED, 6, "multiple of the pipeline stages"),
])
def test_too_few_micro_batches(schedule: Schedule, m: int, needle: str) -> None:
    with pytest.raises(PipelineError, match=needle):
        stage_orders(schedule, 4, m, 2 if schedule is Schedule.INTERLEAVED else 1)


def test_gpipe_runs_with_fewer_micro_batches_than_stages() -> None:
    timeline = simulate(Schedule.GPIPE, [ChunkCost(1.0, 2.0)] * 4, 2, 4)
    assert timeline.step_s == pytest.approx((2 + 4 - 1) * 3.0)
