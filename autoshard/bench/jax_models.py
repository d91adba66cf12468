"""Plain ``jax.numpy`` models used as "the user's model" by the JAX importer's tests, the
``autoshard import jax`` example and ``autoshard bench xla-crosscheck``.

Why plain code: the importer must cope with what people write — Python loops over
``params['layers'][i]``, hand-written LayerNorm, ``jax.nn.softmax``/``gelu``, causal masks from
``jnp.tril`` — not with our own zoo. Parameters are nested dicts/lists of NumPy arrays drawn
from a seeded generator, so every run sees the same numbers. Weights are laid out [in, out].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True, kw_only=True)
class GptShape:
    """A GPT-2-like block stack: hidden width, heads, FFN width, layers, batch, sequence."""

    layers: int = 2
    hidden: int = 768
    heads: int = 12
    ffn: int = 3072
    batch: int = 8
    seq: int = 128


def _normal(rng: np.random.Generator, shape: tuple[int, ...], scale: float,
            dtype: Any) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(dtype)


def mlp_params(hidden: int = 1024, ffn: int = 4096, dtype: Any = np.float32,
               seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w1": _normal(rng, (hidden, ffn), hidden ** -0.5, dtype),
            "b1": _normal(rng, (ffn,), 0.1, dtype),
            "w2": _normal(rng, (ffn, hidden), ffn ** -0.5, dtype),
            "b2": _normal(rng, (hidden,), 0.1, dtype)}


def mlp(params: dict[str, Any], x: Any) -> Any:
    import jax
    import jax.numpy as jnp

    h = jax.nn.gelu(jnp.dot(x, params["w1"]) + params["b1"])
    return jnp.dot(h, params["w2"]) + params["b2"]


def mlp_loss(params: dict[str, Any], x: Any) -> Any:
    import jax.numpy as jnp

    return jnp.mean(mlp(params, x) ** 2)


def gpt_params(shape: GptShape, dtype: Any = np.float32, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d, f = shape.hidden, shape.ffn

    def layer() -> dict[str, np.ndarray]:
        return {"ln1_g": 1 + _normal(rng, (d,), 0.1, dtype),
                "ln1_b": _normal(rng, (d,), 0.1, dtype),
                "wq": _normal(rng, (d, d), d ** -0.5, dtype),
                "wk": _normal(rng, (d, d), d ** -0.5, dtype),
                "wv": _normal(rng, (d, d), d ** -0.5, dtype),
                "wo": _normal(rng, (d, d), d ** -0.5, dtype),
                "ln2_g": 1 + _normal(rng, (d,), 0.1, dtype),
                "ln2_b": _normal(rng, (d,), 0.1, dtype),
                "w1": _normal(rng, (d, f), d ** -0.5, dtype), "b1": _normal(rng, (f,), 0.1, dtype),
                "w2": _normal(rng, (f, d), f ** -0.5, dtype), "b2": _normal(rng, (d,), 0.1, dtype)}

    return {"layers": [layer() for _ in range(shape.layers)],
            "ln_f_g": 1 + _normal(rng, (d,), 0.1, dtype), "ln_f_b": _normal(rng, (d,), 0.1, dtype)}


def layer_norm(x: Any, gain: Any, bias: Any, eps: float = 1e-5) -> Any:
    import jax
    import jax.numpy as jnp

    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * gain + bias


def attention(layer: dict[str, Any], x: Any, heads: int) -> Any:
    import jax
    import jax.numpy as jnp

    batch, seq, hidden = x.shape
    head_dim = hidden // heads

    def split(t: Any) -> Any:
        return t.reshape(batch, seq, heads, head_dim)

    q, k, v = (split(x @ layer[w]) for w in ("wq", "wk", "wv"))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(head_dim)
    causal = jnp.tril(jnp.ones((seq, seq), dtype=bool))
    probs = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
    context = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(batch, seq, hidden)
    return context @ layer["wo"]


def gpt(params: dict[str, Any], x: Any, heads: int = 12) -> Any:
    """Pre-norm GPT-2 blocks over activations ``x`` [batch, seq, hidden], then a final norm."""
    import jax

    for layer in params["layers"]:
        x = x + attention(layer, layer_norm(x, layer["ln1_g"], layer["ln1_b"]), heads)
        h = layer_norm(x, layer["ln2_g"], layer["ln2_b"])
        x = x + jax.nn.gelu(h @ layer["w1"] + layer["b1"]) @ layer["w2"] + layer["b2"]
    return layer_norm(x, params["ln_f_g"], params["ln_f_b"])


def gpt_loss(params: dict[str, Any], x: Any, heads: int = 12) -> Any:
    import jax.numpy as jnp

    return jnp.mean(gpt(params, x, heads) ** 2)


def gpt_input(shape: GptShape, dtype: Any = np.float32, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((shape.batch, shape.seq, shape.hidden)).astype(dtype)


def gpt_example() -> tuple[Any, tuple[Any, ...]]:
    """``autoshard import jax autoshard.bench.jax_models:gpt_example``: a 2-layer GPT-2-small
    block stack's loss and gradients, ``(fn, example_args)``."""
    import functools

    import jax

    shape = GptShape(layers=2, batch=2, seq=64)
    loss = functools.partial(gpt_loss, heads=shape.heads)
    return jax.value_and_grad(loss), (gpt_params(shape), gpt_input(shape))
