"""The layers every zoo model is made of, emitted into an :class:`~graphs.OpGraph`.

One :class:`Emitter` wraps a graph and a config and knows the naming scheme, so the model
builders read like the reference code: ``norm`` → ``attention`` → residual ``add`` → ``norm`` →
``ffn`` → residual ``add``. Weights are 2-D params laid out [in, out] (``x @ W``), named by
their place in the model (``layers.3.attn.wq``); an op is named after what it computes
(``layers.3.attn.q``) and its output tensor is the op name plus ``.out``.

Activations are [batch, seq, hidden]; attention works in the flash layout [b, s, heads, d],
so q/k/v projections are reshaped [b, s, heads·d] → [b, s, heads, d] and back. Nothing here
validates beyond what the graph's shape inference does, so a 126-layer graph builds fast.
"""

from __future__ import annotations

from graphs.ir import DType
from graphs.opgraph import OpGraph
from graphs.zoo.blocks_mla import mla_attention
from graphs.zoo.blocks_moe import moe_layer
from graphs.zoo.blocks_names import ROPE_COS, ROPE_SIN
from graphs.zoo.configs import Activation, ModelConfig, Norm, Position


class Emitter:
    """Adds named ops and params for one model config to ``graph``."""

    def __init__(self, graph: OpGraph, config: ModelConfig) -> None:
        self.graph, self.config = graph, config
        self.aux_losses: list[str] = []  # the MoE layers' load-balancing losses

    def op(self, kind: str, inputs: list[str], name: str, **attrs: object) -> str:
        """Emit one single-output op named ``name``; returns its output tensor."""
        return self.graph.op(kind, inputs, name=name, outputs=[f"{name}.out"], **attrs)

    def param(self, name: str, shape: tuple[int, ...]) -> str:
        return self.graph.param(name, shape, self.config.dtype)

    def linear(self, x: str, prefix: str, weight: str, shape: tuple[int, int],
               out: str, *, bias: bool | None = None) -> str:
        """``x[b,s,in] @ W[in,out]`` (+ bias ``b…`` when ``bias``, by default when the model
        has biases on every linear layer)."""
        w = self.param(f"{prefix}.{weight}", shape)
        y = self.op("einsum", [x, w], f"{prefix}.{out}", equation="bsi,io->bso")
        if not (self.config.bias if bias is None else bias):
            return y
        bias = self.param(f"{prefix}.b{weight[1:]}", (shape[1],))
        return self.op("add", [y, bias], f"{prefix}.{out}_bias")

    def norm(self, x: str, prefix: str, width: int | None = None) -> str:
        """Pre-norm of a sub-block: LayerNorm (weight, bias) or RMSNorm (weight), over the
        hidden size unless ``width`` is given (latent attention's inner norms)."""
        hidden, eps = self.config.hidden if width is None else width, self.config.norm_eps
        weight = self.param(f"{prefix}.weight", (hidden,))
        if self.config.norm is Norm.RMS_NORM:
            return self.op("rms_norm", [x, weight], prefix, eps=eps)
        bias = self.param(f"{prefix}.bias", (hidden,))
        return self.op("layer_norm", [x, weight, bias], prefix, eps=eps)

    def heads(self, x: str, name: str, heads: int) -> str:
        """[b, s, heads·d] → [b, s, heads, d] for attention."""
        shape = (self.config.batch, self.config.seq, heads, self.config.head_dim)
        return self.op("reshape", [x], name, shape=shape)

    def attention(self, x: str, prefix: str) -> str:
        """Causal multi-head / grouped-query self-attention with output projection; q, k and v
        carry biases when every linear does or when only they do (``qkv_bias``, Qwen2)."""
        config, hidden = self.config, self.config.hidden
        if config.mla is not None:
            return mla_attention(self, x, prefix)
        q_width = config.heads * config.head_dim
        kv_width = config.kv_heads * config.head_dim
        biased = config.bias or config.qkv_bias
        q = self.heads(self.linear(x, prefix, "wq", (hidden, q_width), "q", bias=biased),
                       f"{prefix}.q_heads", config.heads)
        k = self.heads(self.linear(x, prefix, "wk", (hidden, kv_width), "k", bias=biased),
                       f"{prefix}.k_heads", config.kv_heads)
        v = self.heads(self.linear(x, prefix, "wv", (hidden, kv_width), "v", bias=biased),
                       f"{prefix}.v_heads", config.kv_heads)
        if config.position is Position.ROPE:
            q = self.op("rotary", [q, ROPE_COS, ROPE_SIN], f"{prefix}.q_rope")
            k = self.op("rotary", [k, ROPE_COS, ROPE_SIN], f"{prefix}.k_rope")
        context = self.op("attention", [q, k, v], f"{prefix}.core", causal=True)
        merged = self.op("reshape", [context], f"{prefix}.merge",
                         shape=(config.batch, config.seq, q_width))
        return self.linear(merged, prefix, "wo", (q_width, hidden), "o")

    def ffn(self, x: str, prefix: str, width: int | None = None) -> str:
        """GELU MLP (w1 up, w2 down) or SwiGLU (w1 gate, w3 up, w2 down, as in Llama), of
        the model's FFN width unless ``width`` is given (a shared expert's)."""
        hidden, ffn = self.config.hidden, self.config.ffn if width is None else width
        if self.config.activation is Activation.SWIGLU:
            gate = self.linear(x, prefix, "w1", (hidden, ffn), "gate")
            up = self.linear(x, prefix, "w3", (hidden, ffn), "up")
            act = self.op("silu", [gate], f"{prefix}.silu")
            act = self.op("mul", [act, up], f"{prefix}.glu")
        else:
            up = self.linear(x, prefix, "w1", (hidden, ffn), "up")
            act = self.op("gelu", [up], f"{prefix}.gelu")
        return self.linear(act, prefix, "w2", (ffn, hidden), "down")

    def decoder_layer(self, x: str, index: int) -> str:
        """Pre-norm residual block: x + attn(norm(x)), then h + ffn(norm(h))."""
        prefix = f"layers.{index}"
        attn = self.attention(self.norm(x, f"{prefix}.attn_norm"), f"{prefix}.attn")
        x = self.op("add", [x, attn], f"{prefix}.attn_residual")
        normed = self.norm(x, f"{prefix}.ffn_norm")
        moe = self.config.moe
        if moe is not None and moe.is_moe_layer(index):
            ffn = self.moe(normed, f"{prefix}.moe")
        else:
            ffn = self.ffn(normed, f"{prefix}.mlp")
        return self.op("add", [x, ffn], f"{prefix}.ffn_residual")

    def moe(self, x: str, prefix: str) -> str:
        """A routed mixture of experts (:func:`graphs.zoo.blocks_moe.moe_layer`); its
        load-balancing loss joins :attr:`aux_losses`."""
        out, aux = moe_layer(self, x, prefix)
        if aux is not None:
            self.aux_losses.append(aux)
        return out

    def total_aux_loss(self) -> str | None:
        """The layers' load-balancing losses (each a [1] vector) concatenated and summed
        outside the layers (ops ``loss.aux_layers``, ``loss.aux``): every layer feeds the
        same op in the same way, so the planner still sees a stack of identical layers.
        None when there are none."""
        if not self.aux_losses:
            return None
        stacked = self.op("concat", self.aux_losses, "loss.aux_layers", dim=0)
        return self.op("sum", [stacked], "loss.aux", dims=[0])

    def rope_inputs(self) -> None:
        """cos/sin tables [seq, head_dim/2], shared by every layer's rotary ops."""
        shape = (self.config.seq, self.config.head_dim // 2)
        self.graph.input(ROPE_COS, shape, self.config.dtype)
        self.graph.input(ROPE_SIN, shape, self.config.dtype)

    def activation_input(self, name: str) -> str:
        shape = (self.config.batch, self.config.seq, self.config.hidden)
        return self.graph.input(name, shape, self.config.dtype)

    def ids_input(self, name: str) -> str:
        return self.graph.input(name, (self.config.batch, self.config.seq), DType.INT64)
