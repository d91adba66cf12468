"""Zoo graphs executed in NumPy against hand-written forward passes of the same models.

The oracle is an independent NumPy transcription of GPT-2 (pre-LN, tanh GELU, learned
positions, tied head) and Llama (RMSNorm, SwiGLU, rotate-half RoPE, GQA with repeat-interleave
KV heads, untied head), written from the reference code and reading weights by their zoo names.
The graph runs op by op through the registry's reference implementations. Agreement shows the
zoo wires every model as published: residuals, norms, head grouping, tying, the loss.
"""

from __future__ import annotations

import numpy as np
import pytest

from graphs import zoo
from graphs.ir import DType
from graphs.ops.registry import get_op

RNG_SEED = 1234


def run_graph(graph, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    env = dict(values)
    for op in graph.topo_ops():
        if op.kind in ("input", "param"):
            continue
        outs = get_op(op.kind).reference([env[n] for n in op.inputs], graph.attrs(op))
        env.update(zip(op.outputs, outs, strict=True))
    return env


def random_values(graph, rng: np.random.Generator, vocab: int | None) -> dict[str, np.ndarray]:
    values = {}
    for name, tensor in graph.tensors.items():
        if graph.producer(name).kind not in ("input", "param"):
            continue
        if tensor.dtype is DType.INT64:
            high = vocab if name != "positions" else tensor.shape[1]
            values[name] = rng.integers(0, high, size=tensor.shape)
        else:
            values[name] = rng.normal(0.0, 0.3, size=tensor.shape)
    if "positions" in values:
        values["positions"] = np.broadcast_to(np.arange(graph.tensors["positions"].shape[1]),
                                              graph.tensors["positions"].shape).copy()
    return values


def rope_tables(seq: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray]:
    inverse = theta ** (-np.arange(0, head_dim, 2) / head_dim)
    angles = np.outer(np.arange(seq), inverse)
    return np.cos(angles), np.sin(angles)


# ---------------------------------------------------------------- hand-written models
def layer_norm(x, weight, bias, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def rms_norm(x, weight, eps=1e-5):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def silu(x):
    return x / (1 + np.exp(-x))


def rotate_half(x, cos, sin):
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], -1)


def causal_attention(q, k, v):
    groups = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, groups, axis=2), np.repeat(v, groups, axis=2)
    scores = np.einsum("bshd,bthd->bhst", q, k) / np.sqrt(q.shape[-1])
    seq = q.shape[1]
    scores = np.where(np.tril(np.ones((seq, seq), bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhst,bthd->bshd", weights, v)


def linear(x, w, prefix, name, bias):
    y = x @ w[f"{prefix}.w{name}"]
    return y + w[f"{prefix}.b{name}"] if bias else y


def attention_block(x, w, prefix, cfg, rope):
    b, s, _ = x.shape
    d = cfg.hidden // cfg.heads
    q = linear(x, w, prefix, "q", cfg.bias).reshape(b, s, cfg.heads, d)
    k = linear(x, w, prefix, "k", cfg.bias).reshape(b, s, cfg.kv_heads, d)
    v = linear(x, w, prefix, "v", cfg.bias).reshape(b, s, cfg.kv_heads, d)
    if rope is not None:
        q, k = rotate_half(q, *rope), rotate_half(k, *rope)
    return linear(causal_attention(q, k, v).reshape(b, s, -1), w, prefix, "o", cfg.bias)


def ffn_block(x, w, prefix, cfg):
    if cfg.activation is zoo.Activation.SWIGLU:
        act = silu(x @ w[f"{prefix}.w1"]) * (x @ w[f"{prefix}.w3"])
    else:
        act = gelu(linear(x, w, prefix, "1", cfg.bias))
    return linear(act, w, prefix, "2", cfg.bias)


def norm(x, w, prefix, cfg):
    if cfg.norm is zoo.Norm.RMS_NORM:
        return rms_norm(x, w[f"{prefix}.weight"])
    return layer_norm(x, w[f"{prefix}.weight"], w[f"{prefix}.bias"])


def blocks(x, w, cfg, rope=None):
    for i in range(cfg.layers):
        x = x + attention_block(norm(x, w, f"layers.{i}.attn_norm", cfg), w,
                                f"layers.{i}.attn", cfg, rope)
        x = x + ffn_block(norm(x, w, f"layers.{i}.ffn_norm", cfg), w, f"layers.{i}.mlp", cfg)
    return x


def language_model_loss(w, cfg):
    x = w["embed.tokens"][w["tokens"]]
    rope = None
    if cfg.position is zoo.Position.LEARNED:
        x = x + w["embed.positions"][w["positions"]]
    else:
        rope = (w["rope.cos"], w["rope.sin"])
    x = norm(blocks(x, w, cfg, rope), w, "final_norm", cfg)
    logits = x @ (w["embed.tokens"].T if cfg.tied_embeddings else w["head.weight"])
    logits = logits - logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, w["targets"][..., None], -1).mean()


def mlp_stack(w, cfg):
    x = w["x"]
    for i in range(cfg.layers):
        x = gelu(x @ w[f"layers.{i}.mlp.w1"]) @ w[f"layers.{i}.mlp.w2"]
    return x


# ---------------------------------------------------------------- the comparison
CASES = {
    "gpt2-tiny": ("gpt2", {"layers": 2, "hidden": 16, "heads": 4, "vocab": 50}),
    "llama3-tiny-gqa": ("llama3-8b", {"layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2,
                                      "ffn": 48, "vocab": 50}),
    "llama2-tiny-mha": ("llama2-7b", {"layers": 1, "hidden": 16, "heads": 2, "vocab": 30}),
    "transformer-tiny": ("transformer", {"layers": 2, "hidden": 16, "heads": 2, "ffn": 24}),
    "mlp-tiny": ("mlp", {"layers": 3, "hidden": 8, "ffn": 12}),
}


@pytest.mark.parametrize("case", sorted(CASES), ids=sorted(CASES))
def test_graph_matches_hand_written_forward(case: str) -> None:
    name, overrides = CASES[case]
    cfg = zoo.config(name, batch=2, seq=6, dtype="f64", **overrides)
    graph = zoo.build_config(cfg)
    values = random_values(graph, np.random.default_rng(RNG_SEED), cfg.vocab)
    if cfg.position is zoo.Position.ROPE:
        values["rope.cos"], values["rope.sin"] = rope_tables(cfg.seq, cfg.head_dim,
                                                             cfg.rope_theta)
    result = run_graph(graph, values)[graph.outputs[0]]
    if cfg.family is zoo.Family.MLP:
        expected = mlp_stack(values, cfg)
    elif cfg.family is zoo.Family.TRANSFORMER:
        expected = blocks(values["x"], values, cfg)
    else:
        expected = language_model_loss(values, cfg)
    np.testing.assert_allclose(result, expected, rtol=1e-5, atol=1e-6)
