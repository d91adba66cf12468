"""Activation recomputation for :mod:`graphs.autodiff` (Korthikanti et al. 2022, §4–5).

Why: the forward tensors a transformer layer's backward reads dominate training memory;
recomputing them from the layer's input trades FLOPs for that memory. A layer is the set of
forward ops named ``layers.<i>.*``; ops outside layers are never recomputed.

* ``full``: every op of the layer whose output the layer's backward reads (and, transitively,
  what those need) is re-emitted as ``recompute/<op>`` producing ``recompute/<tensor>``, from
  the layer's input (which stays saved), the parameters and other graph inputs only.
* ``selective``: the same, restricted to cheap kinds (:data:`CHEAP_KINDS`: elementwise,
  norms, rotary, layout); einsum and attention outputs stay saved and feed the recomputation.
* ``selective-op``: torchtitan's op-level selective checkpointing (``_custom_policy`` in
  ``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370ad26b5f8e9a7333a0e36165018262644b:
  save the outputs of matmuls and attention "except every second mm", recompute the rest):
  ``selective`` plus every second einsum of the layer in forward order (the 2nd, 4th, ...:
  in a Llama layer ``wk``, ``wo`` and ``w3`` of wq, wk, wv, wo, w1, w3, w2).

The recompute ops of a layer are emitted right before the layer's first backward op, and the
layer's backward reads the recomputed copies, so the forward tensors inside the layer die at
their last forward use. Which tensors the backward reads comes from a dry run of the VJPs.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from graphs.autodiff_stage import Stage
from graphs.ir import Op
from graphs.opgraph import SOURCE_KINDS, OpGraph

RECOMPUTE_PREFIX = "recompute/"
_LAYER = re.compile(r"^(layers\.\d+)\.")

CHEAP_KINDS = frozenset({
    "add", "sub", "mul", "div", "neg", "exp", "log", "tanh", "gelu", "gelu_erf", "silu", "relu",
    "sigmoid", "cast", "scale", "where", "layer_norm", "rms_norm", "rotary", "reshape",
    "transpose", "concat", "split", "slice", "softmax", "log_softmax",
})
"""Kinds ``selective`` recomputes: O(1) FLOPs per element (no einsum, no attention)."""


@enum.unique
class Recompute(enum.Enum):
    """NONE: save every forward tensor the backward reads. SELECTIVE: recompute cheap ops
    inside layers. SELECTIVE_OP: those and every second einsum (torchtitan's op policy).
    FULL: recompute whole layers from their inputs."""

    NONE = "none"
    SELECTIVE = "selective"
    SELECTIVE_OP = "selective-op"
    FULL = "full"

    def __repr__(self) -> str:
        return f"Recompute.{self.name}"


def layer_of(op_name: str) -> str | None:
    """``"layers.3"`` for ``"layers.3.attn.q"``; None outside the layers."""
    match = _LAYER.match(op_name)
    return match.group(1) if match else None


@dataclass(slots=True)
class RecomputePlan:
    """Per layer: the forward ops to re-emit (forward order) and the tensor substitutions."""

    ops: dict[str, list[Op]] = field(default_factory=dict)
    aliases: dict[str, dict[str, str]] = field(default_factory=dict)
    _emitted: set[str] = field(default_factory=set)

    def aliases_for(self, op_name: str) -> Mapping[str, str]:
        layer = layer_of(op_name)
        return self.aliases.get(layer, {}) if layer else {}

    def before_backward_of(self, stage: Stage, op_name: str) -> None:
        """Emit the layer's recompute ops the first time one of its ops is differentiated."""
        layer = layer_of(op_name)
        if layer is None or layer in self._emitted or layer not in self.ops:
            return
        self._emitted.add(layer)
        alias = self.aliases[layer]
        for op in self.ops[layer]:
            stage.add(RECOMPUTE_PREFIX + op.name, op.kind, [alias.get(t, t) for t in op.inputs],
                      dict(op.attrs), outputs=[alias[t] for t in op.outputs])


def plan_recompute(forward: OpGraph, reads: Mapping[str, frozenset[str]],
                   mode: Recompute) -> RecomputePlan:
    """Which ops of each layer to recompute, given the forward tensors each VJP reads."""
    plan = RecomputePlan()
    if mode is Recompute.NONE:
        return plan
    layers: dict[str, list[Op]] = {}
    for op in forward.topo_ops():
        layer = layer_of(op.name)
        if layer is not None and op.kind not in SOURCE_KINDS:
            layers.setdefault(layer, []).append(op)
    for layer, ops in layers.items():
        chosen = _closure(ops, reads, mode)
        if chosen:
            plan.ops[layer] = chosen
            plan.aliases[layer] = {t: RECOMPUTE_PREFIX + t for op in chosen for t in op.outputs}
    return plan


def _recomputable(ops: list[Op], mode: Recompute) -> list[Op]:
    """The layer's ops ``mode`` may re-run (forward order)."""
    if mode is Recompute.FULL:
        return ops
    einsums = [op.name for op in ops if op.kind == "einsum"]
    every_second = set(einsums[1::2]) if mode is Recompute.SELECTIVE_OP else set()
    return [op for op in ops if op.kind in CHEAP_KINDS or op.name in every_second]


def _closure(ops: list[Op], reads: Mapping[str, frozenset[str]], mode: Recompute) -> list[Op]:
    producer = {t: op for op in _recomputable(ops, mode) for t in op.outputs}
    stack = sorted({t for op in ops for t in reads.get(op.name, ()) if t in producer})
    chosen: set[str] = set()
    while stack:
        op = producer[stack.pop()]
        if op.name not in chosen:
            chosen.add(op.name)
            stack.extend(t for t in op.inputs if t in producer)
    return [op for op in ops if op.name in chosen]
