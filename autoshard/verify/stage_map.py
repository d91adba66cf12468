"""Where each op of a pipelined model runs, and which op of the intra-stage plan it copies.

A pipelined plan (:mod:`autoshard.planning.pipeline.pipelined`) holds the layouts of a *stage
model*: the model with ``k`` layers (``pipeline.stage_model_layers``), planned on the mesh
without ``pp``; every stage uses them. To run the whole model, each op of the whole model's
training step is given

- its **stage**: a layer's ops (forward, backward ``bwd/``, gradients ``grad/``, optimizer
  ``opt/``) run on the stage holding its chunk of layers (chunk ``c`` on stage ``c mod p``);
  ops outside the layers run on the first stage when the layers read them (embedding,
  positions), on the last otherwise (final norm, head, loss);
- its **name in the stage model**: the layer index replaced by the stage-model layer the
  pricing charges that layer (:func:`~autoshard.planning.pipeline.stage_rows.counterpart`:
  the first layer the stage model's first, as both read the embedding; the last its last, as
  both feed the head; every other its second), so the emulator runs the layouts the plan
  priced and its reports list.

A value is named by its producer (the stage-model counterpart's output). A value passed
between adjacent layers that is not a producer/consumer pair of the stage model (two layers
that both copy the second) copies the reshards of the stage-model boundary the pricing
charges (:func:`~autoshard.planning.pipeline.stage_rows.boundary_counterpart`); a value
passed further copies the stage model's own edge with the same layer distance (ending at its
last layer).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoshard.planning.layers import layer_of
from autoshard.planning.pipeline.stage_rows import boundary_counterpart, counterpart
from graphs import Op, OpGraph


class StageMap:
    """Stages and stage-model names of a whole model's training-step ops."""

    def __init__(self, forward: OpGraph, pipeline: Mapping[str, Any], stage_graph: OpGraph):
        self.stages = int(pipeline["stages"])
        self.k = int(pipeline["stage_model_layers"])
        counts = [int(n) for n in pipeline["layers_per_chunk"]]
        self.stage_of: dict[int, int] = {}
        self.position: dict[int, int] = {}
        start = 0
        self.layers = sum(counts)
        for chunk, count in enumerate(counts):
            for offset in range(count):
                layer = start + offset
                self.stage_of[layer] = chunk % self.stages
                self.position[layer] = counterpart(layer, self.layers, self.k)
            start += count
        self.forward_ops = {op.name for op in forward.ops}
        self.first = _read_by_layers(forward)
        self.ops = {op.name: op for op in stage_graph.ops}
        self.edges = {(t, op.name) for op in stage_graph.ops for t in op.inputs}

    def stage(self, name: str) -> int:
        """The stage an op (or the op producing a tensor) of the training step runs on."""
        found = layer_of(name)
        if found is not None:
            return self.stage_of[found[0]]
        return 0 if self._base(name) in self.first else self.stages - 1

    def mapped(self, name: str, position: int | None = None) -> str:
        """``name`` with its layer index replaced by the stage-model position (or
        ``position``); names outside the layers unchanged."""
        found = layer_of(name)
        if found is None:
            return name
        at = self.position[found[0]] if position is None else position
        return found[1].replace("*", str(at), 1)

    def tensor(self, tensor: str, producer: Op, position: int | None = None) -> str | None:
        """The stage model's name of the value ``producer`` outputs as ``tensor`` (its
        producer's counterpart's output), or None when the stage model has no such op."""
        twin = self.ops.get(self.mapped(producer.name, position))
        return None if twin is None else twin.outputs[producer.outputs.index(tensor)]

    def direct(self, tensor: str, producer: Op, consumer: str) -> bool:
        """Whether this use is itself a use of the stage model (not a copied edge)."""
        pair = (self.tensor(tensor, producer), self.mapped(consumer))
        return pair[0] is not None and (pair in self.edges or consumer.startswith("<"))

    def edge(self, tensor: str, producer: Op, consumer: str) -> tuple[str, str] | None:
        """The stage model's (tensor, consumer) pair whose reshards this use copies (None:
        none does)."""
        if self.direct(tensor, producer, consumer):
            return self.tensor(tensor, producer), self.mapped(consumer)  # type: ignore
        src, dst = layer_of(producer.name), layer_of(consumer)
        if src is None or dst is None or self.k < 2 or abs(dst[0] - src[0]) >= self.k:
            return None
        gap = dst[0] - src[0]
        if abs(gap) == 1:  # adjacent layers: the boundary the pricing charges
            later = boundary_counterpart(max(src[0], dst[0]), self.layers, self.k)
            at_src, at_dst = (later - 1, later) if gap > 0 else (later, later - 1)
        else:
            at_src, at_dst = ((self.k - 1 - gap, self.k - 1) if gap >= 0
                              else (self.k - 1, self.k - 1 + gap))
        pair = (self.tensor(tensor, producer, at_src), self.mapped(consumer, at_dst))
        return pair if pair in self.edges else None  # type: ignore[return-value]

    def _base(self, name: str) -> str:
        """The forward op a non-layer name derives from (``bwd/head.1`` → ``head``,
        ``opt/embed.tokens.m`` → ``embed.tokens``, ``grad/loss.out`` → ``loss``)."""
        base = name.rpartition("/")[2]
        while base and base not in self.forward_ops:
            head, dot, _ = base.rpartition(".")
            if not dot:
                break
            base = head
        return base


def _read_by_layers(forward: OpGraph) -> set[str]:
    """Non-layer forward ops whose values the layers read (directly or not): embeddings,
    positions, masks. They run on the first stage."""
    reads: set[str] = set()
    frontier = [op for op in forward.ops if layer_of(op.name) is not None]
    seen: set[str] = set()
    while frontier:
        op = frontier.pop()
        for tensor in op.inputs:
            producer = forward.producer(tensor)
            if producer is None or producer.name in seen:
                continue
            seen.add(producer.name)
            if layer_of(producer.name) is None:
                reads.add(producer.name)
            frontier.append(producer)
    return reads
