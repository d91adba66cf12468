"""One pipeline stage under the SPMD emulator, and what a pipelined emulation reports.

:class:`StageRun` is the emulator (:mod:`autoshard.verify.emulator`) on one stage's devices:
ops named as in the whole model, with the strategies and reshards of their stage-model
counterparts (:mod:`autoshard.verify.stage_map`), its sources fed by the caller (a
micro-batch's slice of the step's inputs). Driven by :mod:`autoshard.verify.pipeline`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from autoshard.planning.record import Plan, ReshardRecord
from autoshard.reshard.find import find_reshard
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.verify import blocks as el
from autoshard.verify.emulator import Coord, Held, _Run
from autoshard.verify.replay import run_steps
from autoshard.verify.results import EmulationResult
from graphs import Op, OpGraph


@dataclass(frozen=True, slots=True)
class Send:
    """One point-to-point transfer: ``tensor`` from every device of ``src`` to the device at
    the same stage-mesh coordinates of ``dst``, for ``micro_batch`` (-1: the optimizer's)."""

    tensor: str
    src: int
    dst: int
    micro_batch: int
    bytes_per_device: int


@dataclass(frozen=True, slots=True)
class PipelineRun:
    """A pipelined emulation: the verdict, every send, and the stage-boundary reshards the
    plan does not price (run with the reshard search's cheapest path, values checked)."""

    result: EmulationResult
    sends: tuple[Send, ...]
    unpriced: tuple[str, ...]

    def summary(self) -> str:
        sent = sum(s.bytes_per_device for s in self.sends)
        line = (f"{self.result.summary()}; pipelined: {self.result.counts.get('stages')} "
                f"stages x {self.result.counts.get('micro_batches')} micro-batches, "
                f"{len(self.sends)} sends ({sent} bytes per device)")
        if self.unpriced:
            line += (f"; {len(self.unpriced)} stage-boundary reshard(s) the plan does not "
                     f"price, e.g. {self.unpriced[0]}")
        return line


class StageRun(_Run):
    """The emulator on one stage's devices: ops by their whole-model names, strategies and
    reshards of their stage-model counterparts, sources fed (the micro-batch's slice)."""

    def __init__(self, plan: Plan, graph: OpGraph, feeds: Mapping[str, np.ndarray],
                 pending: dict[tuple[str, str], list[ReshardRecord]],
                 loose: set[tuple[str, str]], rtol: float) -> None:
        super().__init__(plan, graph, 0, rtol)
        self.pending, self.feeds, self.loose = pending, feeds, loose
        self.finals: dict[str, Held] = {}
        self.unpriced: list[str] = []

    def _input(self, op: Op, index: int, name: str, need: TensorSharding
               ) -> dict[Coord, np.ndarray]:
        """As the emulator's; a use that copies another edge's reshards (a stage boundary)
        keeps only those starting from the layout the producer left (none: as held)."""
        key = (name, op.name)
        if key not in self.loose:
            return super()._input(op, index, name, need)
        sharding, local = self.held[name]
        held = tuple(str(p) for p in sharding.placements)
        self.pending[key] = [r for r in self.pending.get(key, []) if tuple(r.src) == held]
        shape = self.graph.tensors[name].shape
        if self.pending[key] or el.same_layout(sharding, need, shape):
            return super()._input(op, index, name, need)
        return self._unpriced(op, name, sharding, need, local)

    def _unpriced(self, op: Op, name: str, src: TensorSharding, dst: TensorSharding,
                  local: Mapping[Coord, np.ndarray]) -> dict[Coord, np.ndarray]:
        """A stage boundary whose two sides' layouts differ and the plan prices no reshard
        for: run the cheapest one (the reshard search's) and record it as unpriced."""
        tensor = self.graph.tensors[name]
        links = MeshLinks.build(self.mesh, resolve_topology(self.plan.topology))
        steps = find_reshard(src, dst, tensor.shape, tensor.dtype.itemsize, links).steps
        arrays = run_steps([local[c] for c in self.coords], steps, tensor.shape)
        moved = dict(zip(self.coords, arrays, strict=True))
        kinds = ", ".join(f"{s.collective.kind}({','.join(s.collective.axes)})" for s in steps)
        label = f"{name} {self.graph.producer(name).name}->{op.name}"
        self.unpriced.append(f"{label}: {src.short()} -> {dst.short()} [{kinds}]")
        self.counts["collectives"] += len(steps)
        self._compare("reshard", label, name, dst, moved)
        return moved

    def _source_value(self, op: Op) -> np.ndarray:
        return self.feeds[op.outputs[0]]

    def _final(self, op: Op, name: str, held: Held) -> None:
        super()._final(op, name, held)
        self.finals[name] = held
