"""Model FLOPs of a mixture of experts count the active parameters, by hand.

Oracle: PaLM appendix B (6N + 12·L·H·Q·T per token) with N the active parameters as torchtitan's
``get_moe_model_nparams_and_flops`` counts them (routed experts at top_k/num_experts, router
and attention in full, the input embedding out); Mixtral 8x7B's shapes from its HF config
(tests/data/hf-configs/mixtral-8x7b-v0.1.json) and Mistral AI's "12.9B parameters per token".
"""

from __future__ import annotations

from autoshard.planning.throughput import model_flops_per_micro_batch
from graphs import zoo

H, KV, FFN, VOCAB, EXPERTS, TOP_K, HEADS, HEAD_DIM = 4096, 1024, 14336, 32000, 8, 2, 32, 128


def _mixtral_active_per_layer() -> int:
    attention = 2 * H * H + 2 * H * KV            # q, o; k, v of 8 KV heads
    router = H * EXPERTS
    experts = EXPERTS * 3 * H * FFN * TOP_K // EXPERTS
    return attention + router + experts


def test_mixtral_active_parameters_are_the_published_12_9_billion() -> None:
    active = 32 * (_mixtral_active_per_layer() + 2 * H) + 2 * VOCAB * H + H   # norms, tables
    assert active == 12_879_925_248                 # Mistral AI: 12.9 B per token


def test_mixtral_model_flops_count_two_of_eight_experts() -> None:
    tokens = 16
    graph = zoo.build("mixtral-8x7b", layers=1, batch=1, seq=tokens)
    n = _mixtral_active_per_layer() + VOCAB * H    # + the LM head, not the input lookup
    attention = 12 * 1 * HEADS * HEAD_DIM * tokens  # 12·L·H·Q·T per token
    expected = (6 * n + attention) * tokens
    assert model_flops_per_micro_batch(graph, training=True) == expected
    assert model_flops_per_micro_batch(graph, training=False) == expected / 3
