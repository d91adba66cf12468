"""A routed mixture-of-experts FFN, emitted into a zoo graph in place of the dense FFN.

The layer as the reference implementations compute it (Hugging Face ``MixtralSparseMoeBlock``,
``Qwen2MoeSparseMoeBlock``, ``DeepseekV3MoE``; Megatron-Core ``MoELayer``), in the IR's MoE
kinds (:mod:`graphs.ops.moe`), for normed activations x [b, s, h]:

* router: logits = x·router [h, E] (no bias), scores = softmax or sigmoid of them;
* top-k: gates and expert indices (``moe_topk``: renormalised and scaled per the config);
* dispatch per sequence (group = batch row) into buffers [b, E, capacity, h];
* the experts: a SwiGLU per expert as einsums over the expert dim, packed gate/up weights
  w13 [E, h, 2·f] (interleaved) and w2 [E, f, h] (Mixtral's w1, w3 and w2; Qwen2-MoE's and
  DeepSeek's gate/up/down);
* combine weighted by the gates, plus the shared expert (a dense SwiGLU of width
  ``shared_ffn``, times sigmoid(x·shared_gate [h, 1]) for Qwen2-MoE);
* the load-balancing loss (softmax routers with ``aux_loss_coef`` > 0): Megatron-Core's
  ``switch_load_balancing_loss_func``, coef·E/(k·T²)·Σ_e (Σ_t p_te)·count_e over the T tokens
  of the step, in f32, as a [1] vector (the model sums the layers'); the counts carry no
  gradient.

Names: ``{prefix}.router`` and ``{prefix}.experts.w13``/``.w2`` (params), ops
``{prefix}.logits``, ``.scores``, ``.topk`` (outputs ``.gates``, ``.experts``), ``.dispatch``,
``.experts.gate_up``/``.swiglu``/``.down``, ``.combine``, ``.shared…``, ``.aux…``.

What is approximated: DeepSeek-V3's routing picks the top-k of score + a per-expert bias, within
the best ``topk_group`` of ``n_group`` expert groups; here the top-k of the scores. Both pick k
experts per token, so shapes, FLOPs and bytes are the same; only which experts differs, and the
buffer size already assumes a stated balance.
"""

from __future__ import annotations

from typing import Any

from graphs.ir import DType
from graphs.zoo.moe_config import Score


def moe_layer(emit: Any, x: str, prefix: str) -> tuple[str, str | None]:
    """The MoE FFN of x [b, s, h] (emit: the model's :class:`graphs.zoo.blocks.Emitter`);
    returns its output and its f32 load-balancing loss as a [1] vector (None when the model
    has none)."""
    config = emit.config
    moe = config.moe
    hidden, batch, seq = config.hidden, config.batch, config.seq
    router = emit.param(f"{prefix}.router", (hidden, moe.experts))
    logits = emit.op("einsum", [x, router], f"{prefix}.logits", equation="bsh,he->bse")
    score_kind = "softmax" if moe.score is Score.SOFTMAX else "sigmoid"
    scores = emit.op(score_kind, [logits], f"{prefix}.scores")
    gates, experts = emit.graph.op(
        "moe_topk", [scores], name=f"{prefix}.topk",
        outputs=[f"{prefix}.gates", f"{prefix}.experts"], k=moe.top_k,
        normalize=moe.normalize, scale=float(moe.routed_scale))
    capacity = moe.capacity(seq)
    buffer = emit.op("moe_dispatch", [x, experts], f"{prefix}.dispatch", experts=moe.experts,
                     capacity=capacity)
    expert_out = _experts(emit, buffer, f"{prefix}.experts")
    out = emit.op("moe_combine", [expert_out, experts, gates], f"{prefix}.combine")
    if moe.shared_ffn:
        out = emit.op("add", [out, _shared(emit, x, f"{prefix}.shared")], f"{prefix}.total")
    aux = None
    if moe.aux_loss_coef > 0 and moe.score is Score.SOFTMAX and config.vocab is not None:
        aux = _aux_loss(emit, scores, experts, prefix, batch * seq)
    return out, aux


def _experts(emit: Any, buffer: str, prefix: str) -> str:
    """Every expert's SwiGLU on its slots: [b, E, c, h] → [b, E, c, h], gate and up as one
    grouped matmul with packed weights ``w13`` [E, h, 2·f] (Mixtral's w1 and w3, interleaved;
    Megatron-Core's grouped ``fc1``), then ``swiglu``, then ``w2`` [E, f, h]."""
    moe, hidden = emit.config.moe, emit.config.hidden
    w13 = emit.param(f"{prefix}.w13", (moe.experts, hidden, 2 * moe.expert_ffn))
    w2 = emit.param(f"{prefix}.w2", (moe.experts, moe.expert_ffn, hidden))
    gate_up = emit.op("einsum", [buffer, w13], f"{prefix}.gate_up",
                      equation="bech,ehf->becf")
    act = emit.op("swiglu", [gate_up], f"{prefix}.swiglu")
    return emit.op("einsum", [act, w2], f"{prefix}.down", equation="becf,efh->bech")


def _shared(emit: Any, x: str, prefix: str) -> str:
    """The always-on expert: a SwiGLU of width shared_ffn, gated per token by
    sigmoid(x·shared_gate) when the model has the gate (Qwen2-MoE)."""
    moe = emit.config.moe
    shared = emit.ffn(x, prefix, width=moe.shared_ffn)
    if not moe.shared_gate:
        return shared
    weight = emit.param(f"{prefix}_gate", (emit.config.hidden, 1))
    gate = emit.op("einsum", [x, weight], f"{prefix}_gate.logit", equation="bsh,ho->bso")
    gate = emit.op("sigmoid", [gate], f"{prefix}_gate.sigmoid")
    return emit.op("mul", [gate, shared], f"{prefix}_gate.apply")


def _aux_loss(emit: Any, scores: str, experts: str, prefix: str, tokens: int) -> str:
    """coef·E/(k·T²)·Σ_e P_e·count_e, P_e = Σ_t scores_te (Megatron-Core), as an f32 scalar."""
    moe = emit.config.moe
    counts = emit.op("expert_counts", [experts], f"{prefix}.aux_counts", experts=moe.experts,
                     dtype=emit.config.dtype.value)
    probs = emit.op("sum", [scores], f"{prefix}.aux_probs", dims=[0, 1])
    dot = emit.op("einsum", [probs, counts], f"{prefix}.aux_dot", equation="e,e->")
    factor = moe.aux_loss_coef * moe.experts / (moe.top_k * tokens * tokens)
    scaled = emit.op("scale", [dot], f"{prefix}.aux_scaled", factor=float(factor))
    single = emit.op("cast", [scaled], f"{prefix}.aux", dtype=DType.F32.value)
    return emit.op("reshape", [single], f"{prefix}.aux_vec", shape=[1])
