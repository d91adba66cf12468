"""Expert and context parallelism priced as the papers say, derived here from the papers.

* Expert parallelism (GShard, Lepikhin et al. 2020, §3.2: "dispatched_expert_inputs =
  AllToAll(...)" turning a group-sharded [G, E, C, M] buffer into an expert-sharded one): on
  n devices each holds the buffer slots of its own T/n tokens, k·f slots per token, so it keeps
  1/n of them and sends (n−1)/n: tokens·hidden·dtype·(n−1)/n per direction (dispatch, and the
  same back for combine), with tokens = its routed token copies. A pairwise-exchange all-to-all
  costs (n−1)α + that volume·β (Thakur et al. 2005).
* Ring attention (Liu et al. 2023, §3): with the sequence on n devices every step sends each
  device's K and V block to its neighbour, 2·b·(t/n)·h_kv·d·dtype bytes, n − 1 steps to see all.
* DeepSpeed-Ulysses (Jacobs et al. 2023, §3.1): an all-to-all of q, k, v (sequence → heads)
  before the attention and one of the output (heads → sequence) after: per device
  (N·h/P)·dtype per tensor, (P−1)/P of it sent.

The oracles are these closed forms; the code under test is the reshard search, the strategy
enumeration and the planner.
"""

from __future__ import annotations

import math

import pytest

import autoshard
from autoshard.reshard.find import find_reshard
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import Shard
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import enumerate_strategies
from costmodel import Link, get_preset
from graphs import DType, TensorSpec, get_op, zoo

BF16 = 2
UNIT = Link(alpha_s=1e-5, beta_s_per_byte=1e-9, name="unit")


def _links(mesh: Mesh) -> MeshLinks:
    return MeshLinks.build(mesh, get_preset("dgx-h100"), dict.fromkeys(mesh.axis_names, UNIT))


@pytest.mark.parametrize("n", [2, 4, 8])
def test_dispatch_all_to_all_volume(n: int) -> None:
    """Buffer [b, E, c, h] group-sharded → expert-sharded on one axis of n devices."""
    batch, experts, tokens, k, hidden = 8, 8, 64, 2, 32
    capacity = tokens * k // experts              # balanced: c = T·k/E, f = 1
    mesh = Mesh.parse(f"ep={n}")
    src = TensorSharding(mesh, (Shard(0),), 4)    # tokens' groups on ep
    dst = TensorSharding(mesh, (Shard(1),), 4)    # experts on ep
    shape = (batch, experts, capacity, hidden)
    for a, b in ((src, dst), (dst, src)):         # dispatch, then combine back
        (step,) = find_reshard(a, b, shape, BF16, _links(mesh)).collectives
        local_copies = batch // n * tokens * k    # routed copies of this device's tokens
        assert step.kind == "all_to_all"
        sent = step.bytes * (n - 1) / n
        assert sent == pytest.approx(local_copies * hidden * BF16 * (n - 1) / n)
        assert step.seconds == pytest.approx((n - 1) * UNIT.alpha_s
                                             + sent * UNIT.beta_s_per_byte)


def test_planner_prices_the_dispatch_all_to_all_it_emits() -> None:
    """One Mixtral 8x7B layer on one axis of 8: the plan shards the experts and the tokens
    over it (expert parallelism), and every move of the dispatch buffer between the two is one
    all-to-all of the closed-form volume."""
    model = zoo.config("mixtral-8x7b", layers=1, seq=1024)
    plan = autoshard.plan(zoo.build_config(model), Mesh.parse("ep=8"), training=True)
    assert plan.tensors["layers.0.moe.experts.w13"].placements == ("S(0)",)
    moves = [r for r in plan.reshards if r.tensor == "layers.0.moe.dispatch.out"]
    assert moves and all([c.kind for c in r.collectives] == ["all_to_all"] for r in moves)
    local_copies = model.batch // 8 * model.seq * model.moe.top_k   # balanced: c = T·k/E
    for record in moves:
        (step,) = record.collectives
        assert step.bytes * 7 / 8 == pytest.approx(local_copies * model.hidden * BF16 * 7 / 8)


def test_expert_imbalance_scales_the_all_to_all_and_the_expert_compute() -> None:
    """Dropless routing sized for a busiest expert at twice the mean load: every buffer, so
    every all-to-all and every expert matmul, doubles."""
    mesh = Mesh.parse("ep=8")
    plans = {f: autoshard.plan(zoo.build("mixtral-8x7b", layers=1, seq=1024,
                                         expert_imbalance=f), mesh, training=True,
                               expert_axes=("ep",)) for f in (1.0, 2.0)}
    for f, plan in plans.items():
        moves = [c for r in plan.reshards if r.tensor == "layers.0.moe.dispatch.out"
                 for c in r.collectives if c.kind == "all_to_all"]
        assert moves and all(c.bytes == pytest.approx(f * 1024 * 2 * 4096 * BF16)
                             for c in moves)   # (8 / 8 sequences) · 1024 tokens · top-2 · f
    flops = {f: plan.ops["layers.0.moe.experts.gate_up"].flops for f, plan in plans.items()}
    assert flops[2.0] == pytest.approx(2 * flops[1.0])


@pytest.mark.parametrize(("n", "kv_heads", "groups"), [(2, 2, 2), (4, 1, 4), (8, 2, 1)])
def test_ring_attention_steps(n: int, kv_heads: int, groups: int) -> None:
    b, s, d = 2, 64, 16
    q = TensorSpec((b, s, kv_heads * groups, d), DType.BF16)
    kv = TensorSpec((b, s, kv_heads, d), DType.BF16)
    mesh = Mesh.parse(f"cp={n}")
    forward = _ring("attention", (q, kv, kv), mesh)
    step = 2 * b * (s // n) * kv_heads * d * BF16
    assert forward.work == n
    assert [(c.kind, c.bytes) for c in forward.intra_op] == \
        [("collective_permute", step)] * (n - 1)
    backward = _ring("attention_bwd", (q, kv, kv, q), mesh)
    assert [c.bytes for c in backward.intra_op] == [2 * step] * (n - 1) + [step]


def _ring(kind: str, ins: tuple[TensorSpec, ...], mesh: Mesh):
    attrs = {"causal": True, "scale": None}
    outs = get_op(kind).infer(ins, attrs)
    (strategy,) = [s for s in enumerate_strategies(kind, ins, outs, attrs, mesh)
                   if s.label == "cp:s*"]
    assert all(str(p) == "S(1)" for t in (*strategy.inputs, *strategy.outputs)
               for p in t.placements)
    return strategy


@pytest.mark.parametrize("n", [2, 4])
def test_ulysses_two_all_to_alls(n: int) -> None:
    """q, k, v sequence-sharded → head-sharded, then the output back: one all-to-all each,
    of N·h/P elements per device (MHA: k and v as wide as q)."""
    b, seq, heads, d = 1, 256, 8, 16
    mesh = Mesh.parse(f"cp={n}")
    shape = (b, seq, heads, d)
    by_seq = TensorSharding(mesh, (Shard(1),), 4)
    by_head = TensorSharding(mesh, (Shard(2),), 4)
    local = b * seq * heads * d * BF16 / n        # N·h/P elements of one tensor
    before = [find_reshard(by_seq, by_head, shape, BF16, _links(mesh)).collectives
              for _ in ("q", "k", "v")]
    after = find_reshard(by_head, by_seq, shape, BF16, _links(mesh)).collectives
    for steps in (*before, after):
        (step,) = steps
        assert step.kind == "all_to_all" and step.bytes == local
    total_sent = (3 + 1) * local * (n - 1) / n
    assert total_sent == pytest.approx(4 * b * seq * heads * d * BF16 / n * (n - 1) / n)
    assert math.isclose(sum(s[0].bytes for s in before), 3 * local)
