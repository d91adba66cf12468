"""End-to-end plans whose answers are known from first principles (issue 5).

The expected costs are derived here by hand from the closed-form alpha-beta and roofline
formulas, with a hand-made device and link whose numbers are written out below, so the test
does not lean on the cost model it checks.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import autoshard
from costmodel import DeviceSpec, Link, Topology, TopologyLevel
from graphs import DType, OpGraph

PEAK = 1e15          # FLOP/s
HBM_BW = 2e12        # B/s
ALPHA = 1e-5         # s per message step
BW = 1e11            # B/s on the mesh axis


def hand_topology() -> Topology:
    device = DeviceSpec(name="hand", peak_flops_per_s={"bf16": PEAK, "f32": PEAK},
                        hbm_bytes=80 * 2**30, hbm_bw_bytes_per_s=HBM_BW, efficiency=1.0,
                        min_kernel_s=0.0)
    link = Link(alpha_s=ALPHA, beta_s_per_byte=1 / BW, name="hand")
    return Topology(name="hand", device=device, levels=(TopologyLevel(name="node", devices=None,
                                                                      link=link),))


def roofline(flops: float, nbytes: float) -> float:
    return max(flops / PEAK, nbytes / HBM_BW)


def reduce_scatter_s(n: int, nbytes: float) -> float:
    """Ring (n−1)α + (n−1)/n·mβ vs recursive halving log2(n)α + (n−1)/n·mβ: the cheaper."""
    bandwidth = (n - 1) / n * nbytes / BW
    return min((n - 1) * ALPHA, math.log2(n) * ALPHA) + bandwidth


def mlp_graph(b: int, s: int, h: int, f: int) -> OpGraph:
    g = OpGraph(name="mlp-block")
    x = g.input("x", (b, s, h), DType.BF16)
    w1 = g.param("w1", (h, f), DType.BF16)
    w2 = g.param("w2", (f, h), DType.BF16)
    up = g.op("einsum", [x, w1], equation="bsh,hf->bsf", name="up", outputs=["h1"])
    act = g.op("gelu", [up], name="act", outputs=["h2"])
    y = g.op("einsum", [act, w2], equation="bsf,fh->bsh", name="down", outputs=["y"])
    g.mark_output(y)
    return g


def test_mlp_on_tp8_under_memory_pressure_is_megatron() -> None:
    b, s, h, f, n = 8, 128, 4096, 16384, 8
    graph = mlp_graph(b, s, h, f)
    weights = 2 * h * f * 2
    activation = b * s * h * 2
    # Peak of the Megatron plan by hand: resident x (replicated) and both weight shards, plus
    # the largest working set of one op (up: x, w1/n, h1/n; down: h2/n, w2/n, y partial).
    up_ws = activation + h * f * 2 / n + b * s * f * 2 / n
    down_ws = b * s * f * 2 / n + h * f * 2 / n + activation
    megatron_peak = activation + weights / n + max(up_ws, down_ws)
    # Replicated weights, or weights all-gathered at use (FSDP-style), need >= h·f·2 more.
    limit = megatron_peak * 1.25
    assert limit < activation + h * f * 2
    plan = autoshard.plan(graph, autoshard.Mesh.parse(f"tp={n}"), topology=hand_topology(),
                          memory_limit=limit)
    assert plan.tensors["w1"].placements == ("S(1)",)      # column parallel
    assert plan.tensors["w2"].placements == ("S(0)",)      # row parallel
    collectives = plan.collectives()
    assert len(collectives) == 1, collectives
    (row,) = collectives.itertuples()
    assert row.collective in ("reduce_scatter", "all_reduce")
    assert row.tensor == "y" and row.bytes == pytest.approx(b * s * h * 2)
    # Hand-derived optimum: each device does 1/n of both matmuls and of gelu, then one
    # reduce-scatter of the b·s·h output (cheaper than the all-reduce, and the output may
    # stay sharded).
    up = roofline(2 * b * s * h * f / n, 2 * (b * s * h + h * f / n + b * s * f / n))
    act = roofline(b * s * f / n, 2 * 2 * b * s * f / n)
    down = roofline(2 * b * s * h * f / n, 2 * (b * s * f / n + h * f / n + b * s * h))
    expected = up + act + down + reduce_scatter_s(n, b * s * h * 2)
    assert plan.objective.total_s == pytest.approx(expected, rel=1e-6)
    assert plan.objective.optimal
    assert plan.peak_bytes_per_device == pytest.approx(megatron_peak)


def test_tiny_weights_big_batch_is_pure_data_parallel() -> None:
    graph = mlp_graph(b=64, s=1, h=64, f=256)
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=8"), topology=hand_topology())
    assert plan.objective.comm_s == 0
    assert plan.collectives().empty
    assert plan.tensors["w1"].placements == ("R",)
    assert plan.tensors["w2"].placements == ("R",)
    assert plan.tensors["y"].placements == ("S(0)",)


def test_costs_add_up_and_plan_is_deterministic(tmp_path) -> None:
    graph = mlp_graph(b=8, s=64, h=512, f=2048)
    mesh = autoshard.Mesh.parse("dp=2,tp=4")
    plans = [autoshard.plan(graph, mesh, topology="dgx-h100", memory_limit=3e6)
             for _ in range(2)]
    first = plans[0]
    costs, collectives = first.costs(), first.collectives()
    total = ((costs["compute_s"] + costs["comm_s"]) * costs["count"]).sum()
    total += (collectives["seconds"] * collectives["count"]).sum()
    assert total - first.objective.hidden_s - first.objective.concurrent_s == pytest.approx(
        first.objective.total_s, rel=1e-9)
    texts = []
    for i, plan in enumerate(plans):
        plan.save(tmp_path / str(i))
        data = plan.to_dict()
        data["stats"] = {}
        data["objective"]["solve_s"] = 0
        texts.append(data)
    assert texts[0] == texts[1]
    for name in ("costs.csv", "reshards.csv"):
        assert (tmp_path / "0" / name).read_bytes() == (tmp_path / "1" / name).read_bytes()
    loaded = autoshard.Plan.load(tmp_path / "0" / "plan.json")
    assert loaded.to_dict() == plans[0].to_dict()


def test_solver_objective_matches_exhaustive_on_a_tiny_plan() -> None:
    """The planner's answer is the global optimum of its own priced problem."""
    graph = mlp_graph(b=4, s=2, h=8, f=16)
    mesh = autoshard.Mesh.parse("x=2")
    best = autoshard.plan(graph, mesh, topology="generic")
    brute = autoshard.plan(graph, mesh, topology="generic", backend="exhaustive")
    assert best.objective.total_s == pytest.approx(brute.objective.total_s, rel=1e-12)
    assert np.isfinite(best.objective.total_s)


def test_gpt2_block_on_tp4_splits_heads_and_mlp_megatron_style() -> None:
    """Megatron-LM (Shoeybi et al. 2019, §3): Q/K/V and W1 column-parallel, the attention
    heads split, Wo and W2 row-parallel, activations all-reduced, weights never moved.
    GPT-2 small block dims; 10 MiB cannot hold the 14 MB of replicated block weights."""
    graph = autoshard.zoo.build("transformer", layers=1, batch=1, seq=1024, hidden=768,
                                heads=12, ffn=3072)
    weights = sum(t.shape[0] * (t.shape[1] if len(t.shape) > 1 else 1) * 2
                  for t in graph.tensors.values() if t.role.value == "param")
    limit = 10 * 2**20
    assert weights > limit
    plan = autoshard.plan(graph, autoshard.Mesh.parse("tp=4"), topology="dgx-h100",
                          memory_limit=limit, overlap="none")  # Megatron's plain-sum argument
    placements = {n: t.placements for n, t in plan.tensors.items() if t.role == "param"}
    for name in ("wq", "wk", "wv"):
        assert placements[f"layers.0.attn.{name}"] == ("S(1)",), name      # column parallel
    assert placements["layers.0.mlp.w1"] == ("S(1)",)
    assert placements["layers.0.attn.wo"] == ("S(0)",)                   # row parallel
    assert placements["layers.0.mlp.w2"] == ("S(0)",)
    assert plan.ops["layers.0.attn.core"].strategy == "tp:hk"           # heads split
    collectives = plan.collectives()
    moved = collectives[~collectives["collective"].isin(["all_slice", "replicated_to_partial"])]
    assert not moved["tensor"].isin(list(placements)).any()             # no weight moves
    assert plan.peak_bytes_per_device <= limit


def test_highs_proves_optimality_on_second_scale_costs() -> None:
    """Plan costs are seconds (~1e-5 per op). HiGHS' absolute tolerances once stopped this
    GPT-2 plan at a 3e-4 relative gap; the objective must now be proven to the 1e-6 gap, and
    agree with CP-SAT (an independent backend)."""
    graph = autoshard.zoo.build("gpt2", layers=1, batch=4, seq=1024)
    mesh = autoshard.Mesh.parse("tp=4")
    plans = [autoshard.plan(graph, mesh, topology="dgx-h100", memory_limit=205 * 2**20,
                            backend=backend) for backend in ("highs", "cpsat")]
    assert plans[0].objective.optimal and plans[0].objective.gap <= 1e-6
    assert plans[0].objective.total_s == pytest.approx(plans[1].objective.total_s, rel=1e-6)


def test_allow_uneven_shards_the_odd_vocab_to_fit() -> None:
    """GPT-2's vocab (50257) is odd, so the 77 MB table only splits with uneven (torch.chunk)
    shards; 100 MiB per device on tp=2 needs that split, and the plan says so."""
    graph = autoshard.zoo.build("gpt2", layers=1, batch=3, seq=96)
    mesh, limit = autoshard.Mesh.parse("tp=2"), 100 * 2**20
    with pytest.raises(autoshard.errors.MemoryTooSmallError):
        autoshard.plan(graph, mesh, topology="dgx-h100", memory_limit=limit)
    plan = autoshard.plan(graph, mesh, topology="dgx-h100", memory_limit=limit,
                          allow_uneven=True)
    assert plan.tensors["embed.tokens"].placements == ("S(0)",)
    assert plan.peak_bytes_per_device <= limit


def test_uneven_partial_outputs_that_no_collective_completes_are_never_chosen() -> None:
    # seq=5 over dp=2 is uneven: a Partial output sharded that way cannot be reduced by any
    # collective, so those options must be impossible rather than crash the decoder.
    from graphs import zoo

    graph = zoo.build("mlp", layers=2, batch=6, seq=5, hidden=12, ffn=18, dtype="f32")
    mesh = autoshard.Mesh.parse("dp=2,tp=2")
    with pytest.raises(autoshard.errors.MemoryTooSmallError) as smallest:
        autoshard.plan(graph, mesh, allow_uneven=True, memory_limit=1.0)
    plan = autoshard.plan(graph, mesh, allow_uneven=True,
                          memory_limit=smallest.value.needed_bytes)
    assert plan.peak_bytes_per_device <= smallest.value.needed_bytes
    assert autoshard.verify(plan, graph).passed
