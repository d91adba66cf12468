"""The mixture-of-experts kinds against independent computations.

Oracles: Hugging Face ``MixtralSparseMoeBlock.forward`` written out per token (softmax over the
experts, the two largest, renormalised, the experts' SwiGLU outputs summed with those
weights: the block "strictly equivalent to standard MoE with full capacity"), GShard's
capacity rule as explicit counters (Lepikhin et al. 2020, Algorithm 1: first choices fill the
experts before second choices, in token order; a choice beyond the capacity is dropped), and
plain Python counting. None of them calls :mod:`graphs.ops.moe_routing`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphs import AttrError, OpGraph, ShapeError, get_op

RNG = np.random.default_rng(5)


def run(kind: str, arrays: list[np.ndarray], **attrs: object) -> tuple[np.ndarray, ...]:
    opdef = get_op(kind)
    return opdef.reference(arrays, {**opdef.optional_attrs, **attrs})


def _softmax_row(row: list[float]) -> list[float]:
    top = max(row)
    exps = [math.exp(v - top) for v in row]
    return [e / sum(exps) for e in exps]


def _silu(v: float) -> float:
    return v / (1.0 + math.exp(-v))


def test_topk_is_mixtral_routing_per_token() -> None:
    logits = RNG.normal(size=(2, 5, 8))
    (probs,) = run("softmax", [logits])
    gates, experts = run("moe_topk", [probs], k=2, normalize=True)
    for b in range(2):
        for s in range(5):
            row = _softmax_row(list(logits[b, s]))
            best = sorted(range(8), key=lambda e: -row[e])[:2]
            total = row[best[0]] + row[best[1]]
            assert experts[b, s].tolist() == best
            assert gates[b, s].tolist() == pytest.approx([row[e] / total for e in best])


def test_moe_layer_without_drops_is_the_per_token_mixture() -> None:
    """dispatch → expert SwiGLU (packed gate/up einsum with an expert dim, swiglu, down) →
    weighted combine equals, per
    token, Σ_j gate_j · w2_e(silu(x·w1_e) · (x·w3_e)) over its top-2 experts."""
    g, t, h, f, num = 2, 6, 4, 5, 4
    x = RNG.normal(size=(g, t, h))
    w1, w3, w2 = RNG.normal(size=(num, h, f)), RNG.normal(size=(num, h, f)), \
        RNG.normal(size=(num, f, h))
    (probs,) = run("softmax", [RNG.normal(size=(g, t, num))])
    gates, experts = run("moe_topk", [probs], k=2, normalize=True)
    (buf,) = run("moe_dispatch", [x, experts], experts=num, capacity=t)
    interleaved = np.stack([w1, w3], axis=-1).reshape(num, h, 2 * f)   # gate i, up i, …
    (gate_up,) = run("einsum", [buf, interleaved], equation="gech,ehf->gecf")
    (act,) = run("swiglu", [gate_up])
    (down,) = run("einsum", [act, w2], equation="gecf,efh->gech")
    (out,) = run("moe_combine", [down, experts, gates])
    for a in range(g):
        for s in range(t):
            want = np.zeros(h)
            for j in range(2):
                e = int(experts[a, s, j])
                hidden = [_silu(float(x[a, s] @ w1[e][:, i])) * float(x[a, s] @ w3[e][:, i])
                          for i in range(f)]
                want += gates[a, s, j] * (np.array(hidden) @ w2[e])
            np.testing.assert_allclose(out[a, s], want, rtol=1e-10, atol=1e-12)


def _gshard_slots(experts: np.ndarray, capacity: int) -> dict[tuple[int, int, int], int]:
    """(group, token, choice) → slot by explicit counters, choice-major; dropped copies absent."""
    placed = {}
    for a in range(experts.shape[0]):
        count: dict[int, int] = {}
        for j in range(experts.shape[2]):
            for s in range(experts.shape[1]):
                e = int(experts[a, s, j])
                position = count.get(e, 0)
                count[e] = position + 1
                if position < capacity:
                    placed[(a, s, j)] = position
    return placed


def test_dispatch_and_combine_follow_gshard_capacity() -> None:
    g, t, h, num, capacity = 2, 7, 3, 3, 2
    x = RNG.normal(size=(g, t, h))
    experts = np.stack([RNG.permutation(num)[:2] for _ in range(g * t)]).reshape(g, t, 2)
    weights = RNG.normal(size=(g, t, 2))
    placed = _gshard_slots(experts, capacity)
    assert 0 < len(placed) < g * t * 2   # some copies are dropped at this capacity
    (buf,) = run("moe_dispatch", [x, experts, weights], experts=num, capacity=capacity)
    want = np.zeros((g, num, capacity, h))
    for (a, s, j), slot in placed.items():
        want[a, experts[a, s, j], slot] = weights[a, s, j] * x[a, s]
    np.testing.assert_allclose(buf, want)
    y = RNG.normal(size=(g, num, capacity, h))
    (out,) = run("moe_combine", [y, experts, weights])
    back = np.zeros((g, t, h))
    for (a, s, j), slot in placed.items():
        back[a, s] += weights[a, s, j] * y[a, experts[a, s, j], slot]
    np.testing.assert_allclose(out, back)
    d = RNG.normal(size=(g, t, h))
    (dw,) = run("moe_gate_grad", [y, experts, d])
    for a, s, j in np.ndindex(g, t, 2):
        slot = placed.get((a, s, j))
        expected = 0.0 if slot is None else float(d[a, s] @ y[a, experts[a, s, j], slot])
        assert dw[a, s, j] == pytest.approx(expected)


def test_expert_counts_count_every_routed_copy() -> None:
    experts = RNG.integers(0, 5, size=(3, 4, 2))
    (counts,) = run("expert_counts", [experts], experts=6)
    assert counts.tolist() == [sum(1 for v in experts.ravel() if v == e) for e in range(6)]


# ---- bad input -------------------------------------------------------------------------------
def test_topk_larger_than_experts_is_one_clear_error() -> None:
    graph = OpGraph(name="bad")
    scores = graph.input("scores", (2, 4, 3), "f32")
    with pytest.raises(AttrError, match=r"top-k 4 is not between 1 and the 3 experts"):
        graph.op("moe_topk", [scores], k=4, name="route")


def test_dispatch_checks_capacity_and_routing_width() -> None:
    graph = OpGraph(name="bad")
    x = graph.input("x", (2, 4, 8), "f32")
    experts = graph.input("experts", (2, 4, 3), "int64")
    with pytest.raises(AttrError, match="capacity 0 must be positive"):
        graph.op("moe_dispatch", [x, experts], experts=4, capacity=0, name="d")
    with pytest.raises(ShapeError, match="picks 3 distinct experts but there are only 2"):
        graph.op("moe_dispatch", [x, experts], experts=2, capacity=2, name="d")
