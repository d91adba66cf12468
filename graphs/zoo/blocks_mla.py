"""Multi-head latent attention (DeepSeek-V2/V3) as its matmuls, in place of the attention.

The computation of Hugging Face ``DeepseekV3Attention.forward`` (``modeling_deepseek_v3.py``)
on normed activations x [b, s, h], H heads, latent ranks r_q and r_kv, per-head dims n (no
rotary), r (rotary) and v:

* q = (rms_norm(x·wq_a [h, r_q]))·wq_b [r_q, H·(n + r)] (or x·wq [h, H·(n + r)] without r_q),
  split per head into q_nope [n] and q_pe [r]; q_pe rotated;
* kv_a = x·wkv_a [h, r_kv + r] split into the latent c [r_kv] and k_pe [r]; k_pe rotated once
  and shared by every head; rms_norm(c)·wkv_b [r_kv, H·(n + v)] split per head into k_nope and
  the values;
* attention of q = [q_nope, q_pe] against k = [k_nope, k_pe] (head dim n + r), values of dim v;
  the heads merged and projected by wo [H·v, h].

What is approximated: the softmax scale is 1/√(n + r) (DeepSeek-V3 also multiplies it by the
YaRN mscale², a value that changes no shape or cost); the rotary tables hold their YaRN values
as inputs, as for every zoo model; the rotary dims are rotated as halves (Hugging Face's
``rope_interleave`` permutes them first, the same cost). The inference-time "absorbed" form
(wkv_b folded into q and o) is not used: training computes the matmuls above.
"""

from __future__ import annotations

from typing import Any

from graphs.zoo.blocks_names import ROPE_COS, ROPE_SIN


def mla_attention(emit: Any, x: str, prefix: str) -> str:
    """The latent attention of x [b, s, h] with its output projection."""
    config = emit.config
    mla, heads, hidden = config.mla, config.heads, config.hidden
    batch, seq = config.batch, config.seq
    nope, rope, value = mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim
    if mla.q_lora_rank is None:
        q = emit.linear(x, prefix, "wq", (hidden, heads * (nope + rope)), "q", bias=False)
    else:
        q_a = emit.linear(x, prefix, "wq_a", (hidden, mla.q_lora_rank), "q_a", bias=False)
        q_a = emit.norm(q_a, f"{prefix}.q_norm", width=mla.q_lora_rank)
        q = emit.linear(q_a, prefix, "wq_b", (mla.q_lora_rank, heads * (nope + rope)), "q",
                        bias=False)
    q = emit.op("reshape", [q], f"{prefix}.q_heads", shape=(batch, seq, heads, nope + rope))
    q_nope, q_pe = _split(emit, q, f"{prefix}.q_split", 3, (nope, rope))
    q_pe = emit.op("rotary", [q_pe, ROPE_COS, ROPE_SIN], f"{prefix}.q_rope")
    q = emit.op("concat", [q_nope, q_pe], f"{prefix}.q_join", dim=3)
    kv_a = emit.linear(x, prefix, "wkv_a", (hidden, mla.kv_lora_rank + rope), "kv_a",
                       bias=False)
    latent, k_pe = _split(emit, kv_a, f"{prefix}.kv_split", 2, (mla.kv_lora_rank, rope))
    latent = emit.norm(latent, f"{prefix}.kv_norm", width=mla.kv_lora_rank)
    kv = emit.linear(latent, prefix, "wkv_b", (mla.kv_lora_rank, heads * (nope + value)), "kv",
                     bias=False)
    kv = emit.op("reshape", [kv], f"{prefix}.kv_heads", shape=(batch, seq, heads, nope + value))
    k_nope, v = _split(emit, kv, f"{prefix}.kv_heads_split", 3, (nope, value))
    k_pe = emit.op("reshape", [k_pe], f"{prefix}.k_pe_head", shape=(batch, seq, 1, rope))
    k_pe = emit.op("rotary", [k_pe, ROPE_COS, ROPE_SIN], f"{prefix}.k_rope")
    k_pe = emit.op("broadcast_to", [k_pe], f"{prefix}.k_pe_heads",
                   shape=[batch, seq, heads, rope], dims=[2])
    k = emit.op("concat", [k_nope, k_pe], f"{prefix}.k_join", dim=3)
    context = emit.op("attention", [q, k, v], f"{prefix}.core", causal=True)
    merged = emit.op("reshape", [context], f"{prefix}.merge", shape=(batch, seq, heads * value))
    return emit.linear(merged, prefix, "wo", (heads * value, hidden), "o", bias=False)


def _split(emit: Any, x: str, name: str, dim: int, sizes: tuple[int, int]) -> tuple[str, str]:
    first, second = emit.graph.op("split", [x], name=name, outputs=[f"{name}.a", f"{name}.b"],
                                  dim=dim, sizes=list(sizes))
    return first, second
