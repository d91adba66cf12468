"""Read a zoo-built graph's :class:`ModelConfig` back from the graph itself.

Why: a graph travels without its config (a zoo preset, a Hugging Face ``config.json``, a
saved graph JSON), yet tools that rebuild the model at other sizes, such as verification on
a scaled-down copy, need it. The zoo's graphs spell their config in their tensors (names,
shapes, which biases exist) and op attrs (norm eps), so the config is read off them and then
*proved*: it is returned only when building it gives back exactly the same graph. Any other
graph (imported from PyTorch or JAX, hand-written) gets ``None``.

Example:
    >>> from graphs import zoo
    >>> graph = zoo.build("llama3-8b", layers=2, seq=256)
    >>> config = config_of(graph)
    >>> config.layers, config.kv_heads, config.seq, config.tied_embeddings
    (2, 8, 256, False)
    >>> config_of(zoo.build("gpt2", layers=1)).family
    Family.GPT2
"""

from __future__ import annotations

import logging
from typing import Any

from graphs.errors import GraphError
from graphs.opgraph import OpGraph
from graphs.zoo.configs import Activation, Family, ModelConfig, Norm, Position
from graphs.zoo.models import build_graph
from graphs.zoo.moe_config import MLAConfig, MoEConfig, Score

logger = logging.getLogger(__name__)


def config_of(graph: OpGraph) -> ModelConfig | None:
    """The config whose zoo graph is exactly ``graph``, or None when there is none."""
    try:
        config = ModelConfig(**_read(graph))
    except (GraphError, KeyError, IndexError, ValueError, TypeError) as exc:
        logger.debug("graph %s is not a zoo graph: %s", graph.name, exc)
        return None
    return config if build_graph(config) == graph else None


def _read(graph: OpGraph) -> dict[str, Any]:
    tensors = graph.tensors
    has = tensors.__contains__
    family = (Family.GPT2 if has("embed.positions") else Family.LLAMA if has("embed.tokens")
              else Family.TRANSFORMER if has("layers.0.attn.wq") else Family.MLP)
    first = tensors["tokens" if has("tokens") else "x"]
    moe = _moe(graph, first.shape[0] * first.shape[1], first.shape[1])
    dense = [n for n in tensors if n.startswith("layers.") and n.endswith(".mlp.w1")]
    w1 = tensors[dense[0]] if dense else tensors[_first_moe(graph) + ".experts.w2"]
    fields: dict[str, Any] = {
        "name": graph.name, "family": family, "batch": first.shape[0], "seq": first.shape[1],
        "layers": len({op.name.split(".")[1] for op in graph.ops
                       if op.name.startswith("layers.")}),
        "ffn": w1.shape[-1] if dense else w1.shape[1], "dtype": w1.dtype, "vocab": None,
        "context": None, "moe": moe,
        "hidden": tensors["embed.tokens"].shape[1] if has("embed.tokens") else first.shape[2],
        "activation": Activation.SWIGLU if has("layers.0.mlp.w3") or moe is not None
        else Activation.GELU,
        "bias": has("layers.0.attn.bo") or has("layers.0.mlp.b1"),
        "tied_embeddings": has("embed.tokens") and not has("head.weight"),
        "position": (Position.LEARNED if has("embed.positions") else
                     Position.ROPE if has("rope.cos") else Position.NONE),
    }
    fields["qkv_bias"] = has("layers.0.attn.bq") and not fields["bias"]
    if has("embed.tokens"):
        fields["vocab"] = tensors["embed.tokens"].shape[0]
    if has("embed.positions"):
        fields["context"] = tensors["embed.positions"].shape[0]
    fields.update(_attention(graph, fields["hidden"]))
    fields.update(_norm(graph))
    return fields


def _first_moe(graph: OpGraph) -> str:
    """The prefix ``layers.N.moe`` of the first routed-experts layer."""
    for name in graph.tensors:
        if name.endswith(".moe.router"):
            return name.removesuffix(".router")
    raise KeyError("no .moe.router parameter")


def _moe(graph: OpGraph, tokens: int, seq: int) -> MoEConfig | None:
    """The MoE config from the first routed layer: sizes from its weights, routing from its
    ops' attrs; the buffer's load factor as the capacity factor that gives its capacity back
    (dropless and capacity-factor configs of one buffer size build the same graph)."""
    if not any(n.endswith(".moe.router") for n in graph.tensors):
        return None
    prefix, tensors = _first_moe(graph), graph.tensors
    experts, expert_ffn = tensors[f"{prefix}.router"].shape[1], \
        tensors[f"{prefix}.experts.w2"].shape[1]
    topk = graph.op_by_name(f"{prefix}.topk").attrs
    capacity = graph.op_by_name(f"{prefix}.dispatch").attrs["capacity"]
    aux = 0.0
    if f"{prefix}.aux_scaled" in {op.name for op in graph.ops}:
        factor = graph.op_by_name(f"{prefix}.aux_scaled").attrs["factor"]
        aux = factor * topk["k"] * tokens * tokens / experts
    shared = tensors.get(f"{prefix}.shared.w1")
    layers = sorted({int(n.split(".")[1]) for n in graph.tensors if n.startswith("layers.")})
    return MoEConfig(
        experts=experts, top_k=int(topk["k"]), expert_ffn=expert_ffn,
        shared_ffn=shared.shape[1] if shared is not None else 0,
        shared_gate=f"{prefix}.shared_gate" in tensors,
        score=Score.SIGMOID if graph.op_by_name(f"{prefix}.scores").kind == "sigmoid"
        else Score.SOFTMAX,
        normalize=bool(topk.get("normalize", False)), routed_scale=float(topk.get("scale", 1.0)),
        capacity_factor=capacity * experts / (seq * int(topk["k"])), aux_loss_coef=aux,
        dense_layers=tuple(i for i in layers if f"layers.{i}.moe.router" not in tensors))


def _attention(graph: OpGraph, hidden: int) -> dict[str, Any]:
    """Heads, KV heads and an explicit head dim, from the q and k head reshapes; latent
    attention's ranks and head dims from its weights."""
    if "layers.0.attn.wkv_a" in graph.tensors:
        return _latent(graph)
    if "layers.0.attn.q_heads.out" not in graph.tensors:
        return {"heads": 1, "kv_heads": 1}
    q = graph.tensors["layers.0.attn.q_heads.out"].shape
    k = graph.tensors["layers.0.attn.k_heads.out"].shape
    heads, head_dim = q[2], q[3]
    return {"heads": heads, "kv_heads": k[2],
            "explicit_head_dim": None if heads * head_dim == hidden else head_dim}


def _latent(graph: OpGraph) -> dict[str, Any]:
    tensors = graph.tensors
    heads, qk = tensors["layers.0.attn.q_heads.out"].shape[2:]
    latent_rope = tensors["layers.0.attn.wkv_a"].shape[1]
    nope_value = tensors["layers.0.attn.kv_heads.out"].shape[3]
    rope = tensors["rope.cos"].shape[1] * 2
    q_rank = tensors["layers.0.attn.wq_a"].shape[1] if "layers.0.attn.wq_a" in tensors \
        else None
    mla = MLAConfig(q_lora_rank=q_rank, kv_lora_rank=latent_rope - rope,
                    qk_nope_head_dim=qk - rope, qk_rope_head_dim=rope,
                    v_head_dim=nope_value - (qk - rope))
    return {"heads": heads, "kv_heads": heads, "explicit_head_dim": rope, "mla": mla}


def _norm(graph: OpGraph) -> dict[str, Any]:
    for op in graph.ops:
        if op.kind in ("layer_norm", "rms_norm"):
            norm = Norm.LAYER_NORM if op.kind == "layer_norm" else Norm.RMS_NORM
            return {"norm": norm, "norm_eps": float(op.attrs["eps"])}
    return {"norm": Norm.NONE}
