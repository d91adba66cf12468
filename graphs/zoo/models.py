"""Whole-model graph builders, one per family, all driven by a :class:`ModelConfig`.

* ``mlp``: input activation ``x`` [b, s, h] → ``layers`` × (x@W1 → gelu → @W2), no residual, no
  norm. The last activation is the marked output and there is no loss: a loss would need a
  made-up target, and the plain stack is what the Megatron column/row tests reason about.
* ``transformer``: input ``x`` [b, s, h] → ``layers`` pre-norm decoder blocks; output marked,
  no loss, no embedding or head (the "what does one block cost" model).
* ``gpt2`` / ``llama``: ``tokens`` → embedding (+ learned positions looked up from a
  ``positions`` [b, s] INT64 input for GPT-2) → blocks → final norm → LM head logits →
  ``cross_entropy`` against ``targets`` [b, s] INT64; the scalar loss is the marked output.
  GPT-2's head reuses the token table (``bsh,vh->bsv``); Llama's head is its own [h, V] param.
  A model with a mixture of experts (``config.moe``) adds its layers' load-balancing losses
  to the cross-entropy (op ``loss.ce``; the sum is ``loss``).
  GPT-2's fused ``c_attn`` is emitted as three [h, h] projections (same parameters, and each
  shards on its own); Llama's rotary embedding reads ``rope.cos`` / ``rope.sin`` [s, d/2] inputs.
"""

from __future__ import annotations

from graphs.opgraph import OpGraph
from graphs.zoo.blocks import Emitter
from graphs.zoo.configs import Family, ModelConfig, Position


def build_graph(config: ModelConfig) -> OpGraph:
    """The operator graph of one forward pass of ``config``."""
    graph = OpGraph(name=config.name)
    emit = Emitter(graph, config)
    if config.family is Family.MLP:
        output = _mlp_stack(emit)
    elif config.family is Family.TRANSFORMER:
        output = _decoder_stack(emit, emit.activation_input("x"))
    else:
        output = _language_model(emit)
    graph.mark_output(output)
    return graph


def _mlp_stack(emit: Emitter) -> str:
    x = emit.activation_input("x")
    hidden, ffn = emit.config.hidden, emit.config.ffn
    for index in range(emit.config.layers):
        prefix = f"layers.{index}.mlp"
        up = emit.linear(x, prefix, "w1", (hidden, ffn), "up")
        act = emit.op("gelu", [up], f"{prefix}.gelu")
        x = emit.linear(act, prefix, "w2", (ffn, hidden), "down")
    return x


def _decoder_stack(emit: Emitter, x: str) -> str:
    if emit.config.position is Position.ROPE:
        emit.rope_inputs()
    for index in range(emit.config.layers):
        x = emit.decoder_layer(x, index)
    return x


def _language_model(emit: Emitter) -> str:
    config = emit.config
    vocab = _vocab(config)
    table = emit.param("embed.tokens", (vocab, config.hidden))
    x = emit.op("embedding", [emit.ids_input("tokens"), table], "embed.lookup")
    if config.position is Position.LEARNED:
        positions = emit.param("embed.positions", (_context(config), config.hidden))
        pos = emit.op("embedding", [emit.ids_input("positions"), positions], "embed.pos_lookup")
        x = emit.op("add", [x, pos], "embed.add_positions")
    x = emit.norm(_decoder_stack(emit, x), "final_norm")
    if config.tied_embeddings:
        logits = emit.op("einsum", [x, table], "head", equation="bsh,vh->bsv")
    else:
        head = emit.param("head.weight", (config.hidden, vocab))
        logits = emit.op("einsum", [x, head], "head", equation="bsh,hv->bsv")
    targets = emit.ids_input("targets")
    aux = emit.total_aux_loss()
    if aux is None:
        return emit.op("cross_entropy", [logits, targets], "loss")
    loss = emit.op("cross_entropy", [logits, targets], "loss.ce")
    return emit.op("add", [loss, aux], "loss")


def _vocab(config: ModelConfig) -> int:
    if config.vocab is None:
        raise AssertionError(f'language model "{config.name}" has no vocab')
    return config.vocab


def _context(config: ModelConfig) -> int:
    if config.context is None:
        raise AssertionError(f'learned positions of "{config.name}" need a context length')
    return config.context
