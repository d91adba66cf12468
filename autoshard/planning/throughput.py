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

In a mixture of experts a token meets only ``k`` of the ``E`` routed experts, so ``N`` counts
the routed experts' weights (:func:`autoshard.planning.experts.expert_weights`) at ``k/E``, the
active parameters of torchtitan's ``get_moe_model_nparams_and_flops``
(``nparams_experts * top_k // num_experts``, pytorch/torchtitan ``torchtitan/models/utils.py``);
shared experts and routers count in full. Mixtral 8x7B: 12.88 B active of 46.70 B (Mistral AI
announces 12.9 B per token). Capacity slots the graph computes beyond ``k`` per token (capacity
factor, stated imbalance) are not model FLOPs.

Tokens are the product of the first two dims of the graph's first input (``tokens [b, s]`` for
the language models, ``x [b, s, h]`` for the bare stacks), times the micro-batches.
"""

from __future__ import annotations

import math
from typing import Any

from autoshard.planning.experts import expert_weights
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
    experts, active = expert_weights(forward), _active_fraction(forward)
    n = sum(forward.tensors[t].numel * (active if t in experts else 1.0)
            for t in matmul_params)
    forward_flops = 2.0 * n * tokens + attention
    return (3.0 if training else 1.0) * forward_flops


def _active_fraction(forward: OpGraph) -> float:
    """``k/E`` of the graph's routing (1 without experts); the zoo's and the HF configs' MoE
    layers all route alike, so the first ``moe_topk`` speaks for every layer."""
    for op in forward.topo_ops():
        if op.kind == "moe_topk":
            return int(op.attrs["k"]) / forward.tensors[op.inputs[0]].shape[-1]
    return 1.0


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
                          "parameters a token passes through (routed experts at top-k of "
                          "experts)"}
