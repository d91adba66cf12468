"""The SPMD emulator: run a plan on every device of its mesh in NumPy and prove it right.

Why: a planner's costs are only as good as the program they price. Other planners price
reshards they never insert and insert reshards they never price; this one runs every plan.
Every device holds its local shards (uneven shards exactly as the placements define them,
Partial values as per-device shares); each op runs its NumPy reference on the local shards
per the strategy the plan chose (recovered from its label on the same op and mesh), with the
hand rules' intra-op all-reduces made explicit; each reshard of the plan runs its own priced
collective list (:mod:`autoshard.verify.replay`); graph outputs, ``<output>`` reductions and
``<next step>`` loop-backs of updated parameters included.

Nothing here trusts the layouts: a device runs its op on whatever it holds, as real SPMD code
does. After every op and every reshard the value is reassembled (Partial shares summed) and
compared in float64 with the unsharded run of the same graph on the same random inputs, so a
failure names the FIRST op or reshard, in schedule order, where the two diverge.

Works on any graph with the plan's op names and kinds: the plan's own graph, or a scaled-down
copy of it (:mod:`autoshard.verify.verification`), since strategies are found by label and reshards
matched by shard counts. Op kinds need only a reference (and ``local_attrs`` when attrs name sizes).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autoshard.planning.record import Plan, ReshardRecord
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies import hand_rules
from autoshard.strategies.derive import Strategy, enumerate_strategies
from autoshard.verify import blocks as el
from autoshard.verify import reference as ev
from autoshard.verify.replay import interpret, run_steps
from autoshard.verify.results import Divergence, EmulationError, EmulationResult, OutputError
from graphs import DType, Op, OpGraph, TensorSpec, get_op, local_attrs

logger = logging.getLogger(__name__)

OUTPUT, NEXT_STEP = "<output>", "<next step>"
RTOL = 1e-5
"""A value diverges when its max error exceeds this fraction of its largest magnitude: float64
sums in another order stay below 1e-12; the f32 loss of the references below 1e-6."""

Coord = tuple[int, ...]
Held = tuple[TensorSharding, dict[Coord, np.ndarray]]


class _Failed(Exception):
    def __init__(self, divergence: Divergence) -> None:
        super().__init__(str(divergence))
        self.divergence = divergence


def emulate(plan: Plan, graph: OpGraph, seed: int = 0, *, rtol: float = RTOL,
            progress: bool = False) -> EmulationResult:
    """Run ``plan`` on every device of its mesh and compare with the unsharded program.

    Args:
        plan: a plan (from :func:`autoshard.plan` or ``Plan.load``).
        graph: the graph it was made for, or a copy with the same op names, kinds and
            structure and smaller dims (:func:`autoshard.verify.verification.scaled_graph`).
        seed: seeds the random inputs (each tensor's from its name).
        rtol: the divergence threshold, relative to each value's largest magnitude.
        progress: a progress bar of the ops on stderr (after a second): an 80-layer model's
            scaled copy still has ~8,000 ops on 64 devices, minutes of emulation.

    Returns:
        An :class:`EmulationResult`; ``passed`` False names the first divergent step.

    Raises:
        EmulationError: an op of the graph is not in the plan, or its strategy label does not
            exist for that op on the plan's mesh.

    Example:
        >>> import autoshard
        >>> from autoshard.verify.emulator import emulate
        >>> graph = autoshard.zoo.build("mlp", layers=1, hidden=8, ffn=16, batch=2, seq=4)
        >>> result = emulate(autoshard.plan(graph, autoshard.Mesh.parse("tp=2")), graph)
        >>> result.passed
        True
    """
    return _Run(plan, graph, seed, rtol).execute(progress)


class _Run:
    """One emulation: the unsharded values, every device's shards, the pending reshards."""

    def __init__(self, plan: Plan, graph: OpGraph, seed: int, rtol: float) -> None:
        self.plan, self.graph, self.seed, self.rtol = plan, graph, seed, rtol
        self.mesh = Mesh(axes=tuple(plan.mesh))
        self.coords = self.mesh.all_coords()
        self.values: dict[str, np.ndarray] = {}
        self.held: dict[str, Held] = {}
        self.strategies: dict[str, Strategy] = {}
        self.pending: dict[tuple[str, str], list[ReshardRecord]] = {}
        # a reshard shared by several consumers (``shared_with``) runs once, before the
        # first; the others read its result
        self.shared: dict[tuple[str, str], ReshardRecord] = {}
        self.results: dict[int, Held] = {}
        for record in plan.reshards:
            self.pending.setdefault((record.tensor, record.consumer), []).append(record)
            for other in record.shared_with:
                self.shared[(record.tensor, other)] = record
        self.counts = {"ops": 0, "reshards": 0, "collectives": 0}
        self.uses = {name: len(graph.consumers(name)) for name in graph.tensors}
        self.outputs: dict[str, ev.Error] = {}

    def execute(self, progress: bool = False) -> EmulationResult:
        start = time.perf_counter()
        divergence = None
        ops: Any = self.graph.topo_ops()
        if progress:
            from tqdm import tqdm

            ops = tqdm(ops, desc="emulating", unit="op", leave=False, file=sys.stderr,
                       mininterval=0.5, delay=1.0)
        try:
            for op in ops:
                self._op(op)
            self._leftover_reshards()
        except _Failed as failed:
            divergence = failed.divergence
        errors = tuple(OutputError(tensor=t, abs_err=e.abs_err, rel_err=e.rel_err)
                       for t, e in self.outputs.items())
        return EmulationResult(
            passed=divergence is None, outputs=errors,
            max_abs_err=max((e.abs_err for e in errors), default=0.0),
            max_rel_err=max((e.rel_err for e in errors), default=0.0),
            divergence=divergence, ops_run=self.counts["ops"],
            reshards_run=self.counts["reshards"], collectives_run=self.counts["collectives"],
            devices=len(self.coords), seconds=time.perf_counter() - start,
            counts=dict(self.counts))

    # ---- ops -----------------------------------------------------------------------------
    def _op(self, op: Op) -> None:
        strategy = self._strategy(op)
        if op.kind in ev.SOURCE_KINDS:
            value = self._source_value(op)
            self.values[op.outputs[0]] = value
            sharding = strategy.outputs[0]
            self.held[op.outputs[0]] = (sharding, el.shard_all(value, sharding, self.seed))
            return
        inputs = [self._input(op, i, name, strategy.inputs[i])
                  for i, name in enumerate(op.inputs)]
        want = ev.run_reference(self.graph, op, self.values)
        results = self._run_local(op, strategy, inputs)
        self.counts["ops"] += 1
        for j, name in enumerate(op.outputs):
            self.values[name] = want[j]
            local = {c: ev.as_float64(results[c][j]) for c in self.coords}
            self.held[name] = (strategy.outputs[j], local)
            self._check("op", op.name, name)
        self._after(op)
        self._release(op)

    def _source_value(self, op: Op) -> np.ndarray:
        """The random value of a source op's tensor (a pipelined run feeds micro-batches)."""
        return ev.source_value(self.graph, op, self.seed)

    def _release(self, op: Op) -> None:
        """Forget every value no later op reads (a 32-layer model fits in memory)."""
        for name in dict.fromkeys((*op.inputs, *op.outputs)):
            if name in op.inputs:
                self.uses[name] -= 1
            if self.uses[name] <= 0:
                self.values.pop(name, None)
                self.held.pop(name, None)

    def _strategy(self, op: Op) -> Strategy:
        record = self.plan.ops.get(op.name)
        if record is None:
            raise EmulationError(f'op "{op.name}" of graph "{self.graph.name}" is not in the '
                                 "plan; emulate the plan with the graph it was made for",
                                 op=op.name)
        ins, outs = self.graph.specs(op)
        attrs = self.graph.attrs(op)
        for uneven in (False, True):
            for strategy in enumerate_strategies(op.kind, ins, outs, attrs, self.mesh,
                                                 allow_uneven=uneven):
                if strategy.label == record.strategy:
                    self.strategies[op.name] = strategy
                    self._check_intra_op(op, strategy)
                    return strategy
        raise EmulationError(f'op "{op.name}" ({op.kind}): the plan\'s strategy '
                             f'"{record.strategy}" is not a strategy of this op on mesh '
                             f"{self.mesh}; the graph's dims differ from the plan's", op=op.name)

    def _check_intra_op(self, op: Op, strategy: Strategy) -> None:
        """A hand rule's own collectives (run inside :func:`hand_rules.run_local`) must be the
        ones the plan priced for the op."""
        priced = [(c.kind, tuple(c.axes)) for c in self.plan.ops[op.name].intra_op]
        run = [(c.kind, tuple(c.axes)) for c in strategy.intra_op]
        if priced != run:
            raise _Failed(Divergence(step="op", name=op.name, tensor=op.outputs[0],
                                     message=f"the plan prices intra-op collectives {priced} "
                                             f"but strategy {strategy.label} runs {run}"))

    def _run_local(self, op: Op, strategy: Strategy, inputs: Sequence[dict[Coord, np.ndarray]]
                   ) -> dict[Coord, tuple[np.ndarray, ...]]:
        ins, outs = self.graph.specs(op)
        self._check_local_shapes(op, strategy, inputs, ins)
        hand_axes = [a for a, name in enumerate(strategy.per_axis) if name.endswith("*")]
        local = {c: [x[c] for x in inputs] for c in self.coords}
        if hand_axes:
            factor = strategy.per_axis[hand_axes[0]].removesuffix("*")
            return hand_rules.run_local(op.kind, factor, hand_axes, self.mesh.axis_sizes, ins,
                                        self.graph.attrs(op), local)
        opdef, attrs = get_op(op.kind, op.name), self.graph.attrs(op)
        out: dict[Coord, tuple[np.ndarray, ...]] = {}
        done: dict[tuple[Any, ...], tuple[np.ndarray, ...]] = {}
        for c in self.coords:
            local_in = tuple(TensorSpec(tuple(x.shape), spec.dtype)
                             for x, spec in zip(local[c], ins, strict=True))
            local_out = tuple(TensorSpec(el.local_shape(s, o.shape, c), o.dtype)
                              for s, o in zip(strategy.outputs, outs, strict=True))
            # Devices holding the very same input blocks compute the same outputs: run once.
            same = (*(id(x) for x in local[c]), local_out)
            if same in done:
                out[c] = done[same]
                continue
            try:
                out[c] = opdef.reference(local[c], local_attrs(opdef, attrs, local_in,
                                                               local_out))
            except Exception as exc:  # a wrong layout can make the local program fail
                raise _Failed(Divergence(step="op", name=op.name, tensor=op.outputs[0],
                                         message=f"the local program fails on device {c}: "
                                                 f"{type(exc).__name__}: {exc}")) from None
            done[same] = out[c]
        return out

    def _check_local_shapes(self, op: Op, strategy: Strategy,
                            inputs: Sequence[dict[Coord, np.ndarray]],
                            ins: Sequence[TensorSpec]) -> None:
        for i, (name, spec) in enumerate(zip(op.inputs, ins, strict=True)):
            for c in self.coords:
                need = el.local_shape(strategy.inputs[i], spec.shape, c)
                got = tuple(inputs[i][c].shape)
                if got != need:
                    held = self.held[name][0]
                    message = (f'device {c} holds "{name}" as {got} ({held.short()}) but the '
                               f'strategy "{strategy.label}" reads it as {need} '
                               f"({strategy.inputs[i].short()}); the plan has no reshard "
                               "between the two")
                    raise _Failed(Divergence(step="op", name=op.name, tensor=name,
                                             message=message))

    # ---- reshards ------------------------------------------------------------------------
    def _input(self, op: Op, index: int, name: str, need: TensorSharding
               ) -> dict[Coord, np.ndarray]:
        """Input ``index`` of ``op`` as the devices hold it once the plan's reshard for this
        use (if any) has run; without one, exactly as the producer left it."""
        records = self.pending.get((name, op.name), [])
        wanted = tuple(str(p) for p in need.placements)
        shared = self.shared.get((name, op.name))
        if shared is not None and tuple(shared.dst) == wanted and id(shared) in self.results:
            return self.results[id(shared)][1]  # made for an earlier consumer
        if not records:
            return self.held[name][1]
        record = next((r for r in records if tuple(r.dst) == wanted), records[0])
        records.remove(record)
        held = self._reshard(record, name, need, f"{name} {record.producer}->{op.name}")
        if record.shared_with:
            self.results[id(record)] = held
        return held[1]

    def _reshard(self, record: ReshardRecord, name: str, dst: TensorSharding, label: str
                 ) -> Held:
        """Run ``record`` on ``name``'s shards. Other consumers still read the producer's
        layout, so the result is returned, never stored as ``name``."""
        src, local = self.held[name]
        shape = self.graph.tensors[name].shape
        steps = interpret(record.collectives, src, dst, shape, self._priced_bytes(name))
        if steps is None:
            priced = ", ".join(f"{c.kind}({','.join(c.axes)})" for c in record.collectives)
            message = (f"the priced collectives [{priced or 'none'}] do not turn "
                       f"{src.short()} into {dst.short()}")
            raise _Failed(Divergence(step="reshard", name=label, tensor=name, message=message))
        arrays = run_steps([local[c] for c in self.coords], steps, shape)
        self.counts["reshards"] += 1
        self.counts["collectives"] += len(steps)
        moved = dict(zip(self.coords, arrays, strict=True))
        self._compare("reshard", label, name, dst, moved)
        return dst, moved

    def _priced_bytes(self, name: str) -> float:
        record = self.plan.tensors.get(name)
        if record is None:
            return 0.0
        itemsize = DType(record.dtype).itemsize
        return float(np.prod(record.shape, dtype=np.float64)) * itemsize

    def _after(self, op: Op) -> None:
        """Graph outputs reduced (``<output>``) and updated values moved back (``<next step>``)."""
        for name in op.outputs:
            held = self.held[name]
            for record in self.pending.pop((name, OUTPUT), []):
                dst = el.parse_sharding(self.mesh, record.dst, len(self.graph.tensors[name].shape))
                held = self._reshard(record, name, dst, f"{name} {op.name}->{OUTPUT}")
            if name in self.graph.outputs:
                self._final(op, name, held)
        updates = get_op(op.kind, op.name).updates
        for j, k in enumerate(updates[: len(op.outputs)]):
            self._next_step(op, op.outputs[j], op.inputs[k])

    def _final(self, op: Op, name: str, held: Held) -> None:
        sharding, local = held
        if sharding.partial_axes:
            raise _Failed(Divergence(step="op", name=op.name, tensor=name,
                                     message=f'graph output "{name}" is left Partial '
                                             f"({sharding.short()}) with no reduction"))
        self.outputs[name] = self._compare("op", op.name, name, sharding, local)

    def _next_step(self, op: Op, name: str, stored: str) -> None:
        source = self.graph.producer(stored)
        if source.kind not in ev.SOURCE_KINDS:
            return
        dst = self.strategies[source.name].outputs[0]
        label = f"{name} {op.name}->{NEXT_STEP}"
        sharding, local = self.held[name]
        for record in self.pending.pop((name, NEXT_STEP), []):
            sharding, local = self._reshard(record, name, dst, label)
        if not el.same_layout(sharding, dst, self.graph.tensors[name].shape):
            raise _Failed(Divergence(
                step="op", name=op.name, tensor=name,
                message=f'the updated "{name}" is left as {sharding.short()} but "{stored}" '
                        f"is stored as {dst.short()} and the plan has no reshard to it"))
        self.outputs[f"{name} ({NEXT_STEP})"] = self._compare("reshard", label, name, dst, local)

    def _leftover_reshards(self) -> None:
        for records in self.pending.values():
            for record in records:
                label = f"{record.tensor} {record.producer}->{record.consumer}"
                raise _Failed(Divergence(step="reshard", name=label, tensor=record.tensor,
                                         message="the plan prices this reshard but no op "
                                                 "reads the tensor there"))

    # ---- comparison ----------------------------------------------------------------------
    def _check(self, step: str, name: str, tensor: str) -> ev.Error:
        sharding, local = self.held[tensor]
        return self._compare(step, name, tensor, sharding, local)

    def _compare(self, step: str, name: str, tensor: str, sharding: TensorSharding,
                 local: Mapping[Coord, np.ndarray]) -> ev.Error:
        want = self.values[tensor]
        try:
            error, where = el.error_of(local, sharding, want)
        except ValueError as exc:
            raise _Failed(Divergence(step=step, name=name, tensor=tensor,
                                     message=f'"{tensor}" as {sharding.short()}: {exc}')) from None
        if not error.within(self.rtol):
            message = (f'"{tensor}" as {sharding.short()} differs from the unsharded value'
                       f"{where}: max abs err {error.abs_err:.3g}, rel err {error.rel_err:.3g}")
            raise _Failed(Divergence(step=step, name=name, tensor=tensor, message=message,
                                     abs_err=error.abs_err, rel_err=error.rel_err))
        return error


__all__ = ["Divergence", "EmulationError", "EmulationResult", "OutputError", "emulate"]
