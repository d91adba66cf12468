"""Tokens per second per device and model FLOPs utilization (MFU) of a planned step.

MFU follows the PaLM paper's appendix B (Chowdhery et al. 2022, arXiv:2204.02311), as
karpathy/nanoGPT ``GPT.estimate_mfu`` and pytorch/torchtitan ``get_num_flop_per_token`` read
it: per token, a training step does ``6N + 12·L·H·Q·T`` model FLOPs (``N`` parameters in
matmuls, ``L`` layers of ``H`` heads of width ``Q`` attending over ``T`` positions), whatever
the implementation recomputes; inference does a third of it. Here ``N`` is counted in the
forward graph itself: the elements of every parameter an einsum reads, each once (so a tied
embedding counts once, as the LM head; an untied input table, which is a lookup, not at all,
as torchtitan excludes it), and the attention term is the forward FLOPs of its attention ops
(dense: ``4·b·s·t·h·d``, which is ``4·L·H·Q·T`` per token) times three for training.

Tokens are the product of the first two dims of the graph's first input (``tokens [b, s]`` for
the language models, ``x [b, s, h]`` for the bare stacks), times the micro-batches.
"""

from __future__ import annotations

import math
from typing import Any

from graphs import OpGraph, TensorRole, get_op


def model_flops_per_micro_batch(forward: OpGraph, training: bool) -> float:
    """PaLM-style model FLOPs of one micro-batch (see the module docstring)."""
    first = next(op for op in forward.topo_ops() if op.kind == "input")
    shape = forward.tensors[first.outputs[0]].shape
    tokens = math.prod(shape[:2]) if len(shape) >= 2 else shape[0]
    matmul_params: set[str] = set()
    attention = 0.0
    for op in forward.ops:
        if op.kind == "einsum":
            matmul_params.update(t for t in op.inputs
                                 if forward.tensors[t].role is TensorRole.PARAM)
        elif op.kind == "attention":
            ins, outs = forward.specs(op)
            attention += get_op(op.kind).flops(ins, outs, forward.attrs(op))
    n = sum(forward.tensors[t].numel for t in matmul_params)
    forward_flops = 2.0 * n * tokens + attention
    return (3.0 if training else 1.0) * forward_flops


def throughput(forward: OpGraph, *, step_s: float, devices: int, peak_flops_per_s: float,
               micro_batches: int, training: bool) -> dict[str, Any] | None:
    """``plan.json``'s ``throughput``: tokens per step and per second per device, model FLOPs
    per step and MFU; None for a graph without an input to count tokens in."""
    inputs = [op for op in forward.topo_ops() if op.kind == "input"]
    if not inputs or step_s <= 0:
        return None
    shape = forward.tensors[inputs[0].outputs[0]].shape
    tokens = (math.prod(shape[:2]) if len(shape) >= 2 else shape[0]) * micro_batches
    flops = model_flops_per_micro_batch(forward, training) * micro_batches
    return {"tokens_per_step": int(tokens),
            "tokens_per_s_per_device": tokens / step_s / devices,
            "model_flops_per_step": flops,
            "peak_flops_per_s_per_device": peak_flops_per_s,
            "mfu": flops / (step_s * devices * peak_flops_per_s) if peak_flops_per_s else None,
            "definition": "PaLM appendix B: 6N + 12LHQT per token (training), N = matmul "
                          "parameters"}
