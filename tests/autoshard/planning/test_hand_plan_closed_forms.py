"""The named hand plans against the papers' closed forms.

Expected numbers come from the papers' formulas and the alpha-beta collective formulas written
out here, with link parameters read from the plan's inputs (``plan.links``), never from the
costs the planner computed.

* Megatron TP (Shoeybi et al. 2019, arXiv:1909.08053, §3; Narayanan et al. 2021,
  arXiv:2104.04473, §3.2): per transformer layer 2 all-reduces forward (``g`` after attention
  and after the MLP) and 2 backward (``f`` before them), each of one b·s·h activation (bf16:
  2 bytes an element); data parallelism all-reduces each gradient once, at its TP-local size.
* Megatron sequence parallelism (Korthikanti et al. 2022, arXiv:2205.05198, §4.2.2): ``g`` and
  ``ḡ`` become all-gather / reduce-scatter pairs of the same b·s·h activation, 2 + 2 forward
  and 2 + 2 backward per layer.
* ZeRO (Rajbhandari et al. 2020, "ZeRO", SC20, §5 and Figure 1), mixed-precision Adam with
  K = 12 bytes of fp32 state per parameter: model state per device (2 + 2 + K)Ψ = 16Ψ for DDP,
  4Ψ + 12Ψ/N for P_os (ZeRO-1), 2Ψ + 14Ψ/N for P_os+g (ZeRO-2), 16Ψ/N for P_os+g+p (ZeRO-3 /
  FSDP); communication (§7) 2Ψ per step for DDP and stages 1-2, 3Ψ for stage 3.

How the planner's accounting maps onto the paper's: parameters and gradients are bf16 (2Ψ each)
and AdamW keeps fp32 master weights, m and v (12Ψ): the paper's K = 12 exactly. Memory is
reported at the plan's peak step; with small activations that is the first optimizer step,
where one gradient is being read by the step and is counted in its working set
(``activations``): the gradients category is then the paper's minus at most the largest single
gradient. Everything else is the paper's number to the byte.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest

import autoshard
from graphs import zoo
from tests.support.alpha_beta import alpha_beta_preset
from tests.support.closed_forms import all_reduce_s as _all_reduce_s
from tests.support.closed_forms import axis_link as _link
from tests.support.closed_forms import gather_or_scatter_s as _gather_or_scatter_s

# The closed forms below are alpha-beta (Thakur et al. 2005): the plans they check price on the
# dgx-h100 links without their measured-curve terms.
TEXTBOOK = alpha_beta_preset("dgx-h100")

_LAYER = re.compile(r"layers\.(\d+)\.")


def _layer_traffic(plan: autoshard.Plan, layer: int, axis: str) -> Counter:
    """(phase, kind) → count of collectives over ``axis`` moving activations of ``layer``."""
    counts: Counter = Counter()
    for r in plan.reshards:
        match = _LAYER.search(r.tensor)
        if plan.tensors[r.tensor].role != "activation" or match is None or \
                int(match.group(1)) != layer:
            continue
        phase = "bwd" if r.consumer.startswith("bwd/") or \
            r.tensor.startswith(("grad/", "bwd/")) else "fwd"
        for c in r.collectives:
            if c.kind != "all_slice" and axis in c.axes:
                counts[(phase, c.kind, c.bytes)] += 1
    return counts


# ---------------------------------------------------------------- Megatron TP
B, S, H, HEADS, LAYERS = 4, 256, 512, 8, 3
BSH_BYTES = B * S * H * 2


@pytest.fixture(scope="module")
def blocks():
    return zoo.build("transformer", layers=LAYERS, batch=B, seq=S, hidden=H, heads=HEADS)


@pytest.mark.parametrize("mesh", ["tp=4", "dp=2,tp=4"])
def test_megatron_is_two_all_reduces_forward_and_two_backward_per_layer(blocks, mesh) -> None:
    plan = autoshard.plan(blocks, autoshard.Mesh.parse(mesh), training=True,
                          strategy="megatron", topology=TEXTBOOK)
    n, alpha, bw = _link(plan, "tp")
    dp = dict(plan.mesh).get("dp", 1)
    message = BSH_BYTES / dp                  # the data axis splits the batch
    # the interior layer: the first layer's input needs no gradient, the last one's output
    # is the graph's and may stay as it is
    assert _layer_traffic(plan, 1, "tp") == {("fwd", "all_reduce", message): 2,
                                             ("bwd", "all_reduce", message): 2}
    layer = [r for r in plan.reshards if r.tensor.startswith(("layers.1.", "grad/layers.1.",
                                                              "bwd/layers.1."))
             and plan.tensors[r.tensor].role == "activation"]
    seconds = sum(c.seconds for r in layer for c in r.collectives if "tp" in c.axes)
    # the message each GPU moves is its data-parallel share of the batch's b·s·h activation
    assert seconds == pytest.approx(4 * _all_reduce_s(n, message, alpha, bw), rel=1e-9)


def test_megatron_all_reduces_each_gradient_once_over_dp_at_its_tp_local_size(blocks) -> None:
    plan = autoshard.plan(blocks, autoshard.Mesh.parse("dp=2,tp=4"), training=True,
                          strategy="megatron")
    params = {n: r for n, r in plan.tensors.items() if r.role == "param"}
    synced = {name: [] for name in params}
    for r in plan.reshards:
        if r.tensor.startswith("grad/") and r.tensor[5:] in params:
            synced[r.tensor[5:]].extend(c for c in r.collectives if "dp" in c.axes)
    for name, rec in params.items():
        split = rec.placements[1].startswith("S(")
        (sync,) = synced[name]
        assert (sync.kind, sync.bytes) == \
            ("all_reduce", math.prod(rec.shape) * 2 / (4 if split else 1)), name
        # a TP-split weight's gradient is complete on its tp rank; a replicated norm weight's
        # may be summed over tp in the same all-reduce (its backward reads the partial input
        # gradient), which the planner prefers to a second b·s·h all-reduce
        assert sync.axes == ("dp",) if split else "dp" in sync.axes, (name, sync.axes)


def test_megatron_sp_is_all_gather_and_reduce_scatter_pairs_forward(blocks) -> None:
    plan = autoshard.plan(blocks, autoshard.Mesh.parse("tp=4"), training=True,
                          strategy="megatron-sp", topology=TEXTBOOK)
    n, alpha, bw = _link(plan, "tp")
    traffic = _layer_traffic(plan, 1, "tp")
    forward = {k: v for k, v in traffic.items() if k[0] == "fwd"}
    assert forward == {("fwd", "all_gather", BSH_BYTES): 2,
                       ("fwd", "reduce_scatter", BSH_BYTES): 2}
    backward = {k: v for k, v in traffic.items() if k[0] == "bwd"}
    assert backward[("bwd", "all_gather", BSH_BYTES)] == 2
    assert ("bwd", "reduce_scatter", BSH_BYTES) in backward
    # a ring all-reduce is a reduce-scatter then an all-gather: the same bytes on the wire as
    # Megatron's all-reduces (only the latency terms differ between the algorithms)
    seconds = sum(c.seconds for r in plan.reshards for c in r.collectives
                  if r.tensor.startswith("layers.1.") and not r.consumer.startswith("bwd/")
                  and c.kind != "all_slice")
    assert seconds == pytest.approx(4 * _gather_or_scatter_s(n, BSH_BYTES, alpha, bw),
                                    rel=1e-9)


def test_megatron_sp_backward_is_exactly_two_all_gathers_and_two_reduce_scatters(blocks) -> None:
    # one reshard per (tensor, layout): the norm's dx and dweight share its input gradient's
    # reduce-scatter, as Megatron's fused LayerNorm backward does
    plan = autoshard.plan(blocks, autoshard.Mesh.parse("tp=4"), training=True,
                          strategy="megatron-sp", share_reshards=True)
    backward = {k: v for k, v in _layer_traffic(plan, 1, "tp").items() if k[0] == "bwd"}
    assert backward == {("bwd", "all_gather", BSH_BYTES): 2,
                        ("bwd", "reduce_scatter", BSH_BYTES): 2}


# ------------------------------------------------------------------------ ZeRO
def _zero_expected(strategy: str, psi: int, n: int) -> dict[str, float]:
    """Rajbhandari et al. 2020, Figure 1 with K = 12, per category (bytes)."""
    return {"ddp": {"params": 2 * psi, "grads": 2 * psi, "optimizer": 12 * psi},
            "zero1": {"params": 2 * psi, "grads": 2 * psi, "optimizer": 12 * psi / n},
            "zero2": {"params": 2 * psi, "grads": 2 * psi / n, "optimizer": 12 * psi / n},
            "fsdp": {"params": 2 * psi / n, "grads": 2 * psi / n,
                     "optimizer": 12 * psi / n}}[strategy]


@pytest.mark.parametrize(("mesh", "group"), [("dp=4", 4), ("dp=2,fsdp=2", 2)])
@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero2", "fsdp"])
def test_zero_memory_is_the_papers(strategy, mesh, group) -> None:
    # small activations, so the model state decides the peak (the first optimizer step);
    # on dp=2,fsdp=2 ZeRO shards over the fsdp axis (N = 2) and replicates over dp (HSDP)
    graph = zoo.build("gpt2", layers=2, batch=4, seq=8, hidden=256, heads=4, vocab=512)
    plan = autoshard.plan(graph, autoshard.Mesh.parse(mesh), training=True, strategy=strategy)
    psi = sum(math.prod(r.shape) for r in plan.tensors.values() if r.role == "param")
    expected = _zero_expected(strategy, psi, group)
    largest_grad = max(math.prod(r.shape) for r in plan.tensors.values()
                       if r.role == "param") * 2
    shards = 1 if expected["grads"] == 2 * psi else group
    got = plan.memory_breakdown
    assert got["params"] == pytest.approx(expected["params"], rel=1e-12)
    assert got["optimizer"] == pytest.approx(expected["optimizer"], rel=1e-12)
    assert expected["grads"] - largest_grad / shards <= got["grads"] <= expected["grads"]
    state = got["params"] + got["grads"] + got["optimizer"]
    total = sum(expected.values())          # 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N
    assert total - largest_grad / shards <= state <= total
    assert state + got["activations"] >= total   # the gradient being read is in the step


@pytest.mark.parametrize(("strategy", "volume"), [("ddp", 2), ("zero1", 2), ("zero2", 2),
                                                  ("fsdp", 3)])
def test_zero_communication_is_the_papers(strategy, volume) -> None:
    # §7: DDP all-reduces gradients (reduce-scatter + all-gather: 2Ψ), ZeRO-1/2 reduce-scatter
    # gradients and all-gather updated parameters (2Ψ), ZeRO-3 all-gathers parameters in
    # forward and again in backward and reduce-scatters gradients (3Ψ). Counted in Ψ units:
    # an all-reduce of m bytes moves 2m, an all-gather or reduce-scatter m.
    graph = zoo.build("transformer", layers=2, batch=8, seq=64, hidden=256, heads=4)
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=4"), training=True,
                          strategy=strategy)
    weights = {n for n, r in plan.tensors.items() if r.role == "param" and len(r.shape) == 2}
    moved = 0.0
    for r in plan.reshards:
        base = r.tensor.removeprefix("grad/").removesuffix(".next")
        if base in weights and (r.tensor == base or r.tensor != base):
            for c in r.collectives:
                if c.kind == "all_slice":
                    continue
                assert c.kind in ("all_reduce", "all_gather", "reduce_scatter"), r
                moved += c.bytes * (2 if c.kind == "all_reduce" else 1)
    psi_bytes = sum(math.prod(plan.tensors[w].shape) * 2 for w in weights)
    assert moved == pytest.approx(volume * psi_bytes, rel=1e-12)


# ------------------------------------------------ Megatron's distributed optimizer
def _device_elements(record, mesh: autoshard.Mesh) -> float:
    shards = math.prod(size for (_, size), p in zip(mesh.axes, record.placements, strict=True)
                       if p.startswith("S("))
    return math.prod(record.shape) / shards


def test_distributed_optimizer_state_is_megatrons_12_bytes_over_t_and_d() -> None:
    # Megatron-LM docs/source/distrib_optimizer.md: with the distributed optimizer the fp32
    # main weights and Adam moments (12 bytes a parameter) are split over the d data-parallel
    # ranks on top of the tensor-parallel split; layer norms are not split by TP. Megatron-SP
    # without it keeps all 12 bytes on every data-parallel rank.
    graph = zoo.build("gpt2", layers=2, batch=4, seq=8, hidden=256, heads=4, vocab=512)
    mesh, t, d = autoshard.Mesh.parse("dp=4,tp=2"), 2, 4
    plans = {s: autoshard.plan(graph, mesh, training=True, strategy=s)
             for s in ("megatron-sp", "megatron-sp-distopt")}
    params = {n: r for n, r in plans["megatron-sp"].tensors.items()
              if r.role == "param" and n.startswith("layers.")}
    split = sum(math.prod(r.shape) for n, r in params.items() if len(r.shape) == 2)
    whole = sum(math.prod(r.shape) for n, r in params.items() if len(r.shape) == 1
                and "norm" in n)
    biases = sum(math.prod(r.shape) for n, r in params.items() if len(r.shape) == 1
                 and "norm" not in n)
    for strategy, shards in (("megatron-sp", 1), ("megatron-sp-distopt", d)):
        records = plans[strategy].tensors
        state = sum(_device_elements(r, mesh) * 4 for n, r in records.items()
                    if n.startswith("opt/layers.") and r.role == "optimizer_state")
        # AdamW: fp32 master + m + v = 12 bytes; column-parallel biases are split by TP,
        # the row-parallel ones are not (Megatron adds them after the reduction)
        low = 12 * (split / t + whole + biases / t) / shards
        high = 12 * (split / t + whole + biases) / shards
        assert low - 1e-9 <= state <= high + 1e-9, (strategy, state, low, high)
