"""Emulate a pipelined plan: every stage on its own devices, micro-batch by micro-batch.

What runs (all in NumPy, float64):

1. **Micro-batches.** The whole model's training step for one micro-batch, once per
   micro-batch, on the micro-batch's slice of the step's inputs (the step's batch is the
   micro-batches stacked). Each op runs on the devices of its stage
   (:class:`~autoshard.verify.stage_map.StageMap`) with the strategy and reshards the plan
   gives its stage-model counterpart, exactly as the SPMD emulator runs a plan
   (:mod:`autoshard.verify.emulator`, which compares every value with the unsharded one as
   it goes). A value another stage reads is **sent**: each device of the producing stage
   hands its block to the device at the same stage-mesh coordinates of the reading stage
   (the point-to-point transfer the schedule prices on the ``pp`` link), recorded as a
   :class:`Send`. The optimizer does not run per micro-batch.
2. **Accumulation.** Every device sums its gradient blocks over the micro-batches and
   divides by their number (the loss is a mean over the batch, so the step's gradient is the
   mean of the micro-batch ones).
3. **The optimizer**, once per step on each stage, from the accumulated gradients: the
   plan's reshards into the optimizer step (the data-parallel gradient sync) and the step.

The verdict compares with an independent truth, the unsharded training step on the whole
batch at once (:func:`autoshard.verify.reference.reference_values` on the model built with
``m`` times the micro-batch): the loss (mean of the micro-batch losses), every parameter's
gradient (accumulated) and every updated parameter and optimizer state.

The order ops run in is a topological order of the training step per micro-batch, not the
schedule's interleaving: the values do not depend on it (the schedule's timing is the
simulator's job, :mod:`autoshard.planning.pipeline.simulate`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from autoshard.errors import UsageError
from autoshard.planning.planner import training_step_graph
from autoshard.planning.record import Plan, ReshardRecord
from autoshard.sharding.mesh import Mesh
from autoshard.verify import blocks as el
from autoshard.verify import reference as ev
from autoshard.verify.emulator import NEXT_STEP, OUTPUT, RTOL, Held, _Failed
from autoshard.verify.results import Divergence, EmulationResult, OutputError
from autoshard.verify.stage_map import StageMap
from autoshard.verify.stage_run import PipelineRun, Send, StageRun
from graphs import Op, OpGraph, TensorRole, zoo
from graphs.zoo import ModelConfig

OPTIMIZER_KINDS = frozenset({"adamw_step", "sgd_step"})


class PipelineEmulation:
    """One run of a pipelined plan (see the module docstring)."""

    def __init__(self, plan: Plan, step: OpGraph, whole_batch: OpGraph, stage_graph: OpGraph,
                 forward: OpGraph, *, seed: int = 0, rtol: float = RTOL) -> None:
        pipeline = plan.pipeline or {}
        self.m = int(pipeline["micro_batches"])
        self.step, self.seed, self.rtol = step, seed, rtol
        self.map = StageMap(forward, pipeline, stage_graph)
        axes = tuple(a for a in plan.mesh if a[0] != "pp")
        self.stage_plan = dataclasses.replace(plan, mesh=axes or (("dp", 1),))
        self.truth = ev.reference_values(whole_batch, seed)
        self.optimizer_ops = {op.name for op in step.ops if op.kind in OPTIMIZER_KINDS}
        self.sends: list[Send] = []
        self.unpriced: dict[str, None] = {}
        self.counts = {"ops": 0, "reshards": 0, "collectives": 0}
        self.by_edge: dict[tuple[str, str], list[ReshardRecord]] = {}
        for record in self.stage_plan.reshards:
            self.by_edge.setdefault((record.tensor, record.consumer), []).append(record)

    # ---- what each stage runs -------------------------------------------------------------
    def _phase_ops(self, optimizer: bool) -> list[Op]:
        """The ops of one phase in topological order: the micro-batch's forward and backward,
        or the optimizer step (with the sources it reads)."""
        ops = self.step.topo_ops()
        if not optimizer:
            return [op for op in ops if op.name not in self.optimizer_ops and not (
                op.kind in ev.SOURCE_KINDS and self._state(op))]
        wanted = {t for op in ops if op.name in self.optimizer_ops for t in op.inputs}
        return [op for op in ops if op.name in self.optimizer_ops or (
            op.kind in ev.SOURCE_KINDS and op.outputs[0] in wanted)]

    def _state(self, op: Op) -> bool:
        return self.step.tensors[op.outputs[0]].role is TensorRole.OPTIMIZER_STATE

    def _runs(self, ops: list[Op], feeds: Mapping[str, np.ndarray]) -> dict[int, StageRun]:
        """One emulator per stage, holding the plan records of the ops it runs."""
        per_stage: dict[int, list[Op]] = {}
        for op in ops:
            per_stage.setdefault(self.map.stage(op.name), []).append(op)
        runs = {}
        for stage, mine in per_stage.items():
            records = {}
            pending: dict[tuple[str, str], list[ReshardRecord]] = {}
            loose: set[tuple[str, str]] = set()
            tensors = {}
            for op in mine:
                records[op.name] = self._record(op.name)
                uses = [(t, op.name) for t in dict.fromkeys(op.inputs)]
                uses += [(t, sink) for t in op.outputs for sink in (OUTPUT, NEXT_STEP)]
                for tensor, consumer in uses:
                    producer = self.step.producer(tensor)
                    pair = self.map.edge(tensor, producer, consumer)
                    found = self.by_edge.get(pair, []) if pair is not None else []
                    if not self.map.direct(tensor, producer, consumer):
                        loose.add((tensor, consumer))
                    if found:
                        pending[(tensor, consumer)] = [dataclasses.replace(
                            r, tensor=tensor, consumer=consumer, producer=producer.name)
                            for r in found]
                for tensor in (*op.inputs, *op.outputs):
                    mapped = self.map.tensor(tensor, self.step.producer(tensor))
                    if mapped in self.stage_plan.tensors:
                        tensors[tensor] = self.stage_plan.tensors[mapped]
            plan = dataclasses.replace(self.stage_plan, ops=records, tensors=tensors,
                                       reshards=())
            runs[stage] = StageRun(plan, self.step, feeds, pending, loose, self.rtol)
        return runs

    def _record(self, name: str) -> Any:
        mapped = self.map.mapped(name)
        record = self.stage_plan.ops.get(mapped)
        if record is None:
            raise _Failed(Divergence(step="op", name=name, tensor=name,
                                     message=f'the stage model has no op "{mapped}" to copy'))
        return record

    # ---- running --------------------------------------------------------------------------
    def _phase(self, ops: list[Op], feeds: Mapping[str, np.ndarray], micro_batch: int,
               given: Mapping[str, tuple[int, Held, np.ndarray]] | None = None
               ) -> dict[int, StageRun]:
        runs = self._runs(ops, feeds)
        for op in ops:
            stage = self.map.stage(op.name)
            run = runs[stage]
            for tensor in op.inputs:
                if tensor not in run.held:
                    self._receive(runs, run, stage, tensor, micro_batch, given or {})
            try:
                run._op(op)
            except _Failed as failed:
                raise _Failed(_where(failed.divergence, stage, micro_batch)) from None
        for stage, run in runs.items():
            self.unpriced.update(dict.fromkeys(f"stage {stage}: {u}" for u in run.unpriced))
            for key in ("ops", "reshards", "collectives"):
                self.counts[key] += run.counts[key]
            try:
                run._leftover_reshards()
            except _Failed as failed:
                raise _Failed(_where(failed.divergence, stage, micro_batch)) from None
        return runs

    def _receive(self, runs: Mapping[int, StageRun], run: StageRun, stage: int, tensor: str,
                 micro_batch: int, given: Mapping[str, tuple[int, Held, np.ndarray]]) -> None:
        """Put ``tensor`` on ``run``'s devices: a send from the stage that holds it."""
        if tensor in given:
            src, held, value = given[tensor]
        else:
            src = self.map.stage(self.step.producer(tensor).name)
            held, value = runs[src].held[tensor], runs[src].values[tensor]
        sharding, local = held
        if src != stage:
            local = {c: np.array(block, copy=True) for c, block in local.items()}
            size = max((block.nbytes for block in local.values()), default=0)
            self.sends.append(Send(tensor, src, stage, micro_batch, int(size)))
        run.held[tensor] = (sharding, local)
        run.values[tensor] = value

    def execute(self) -> PipelineRun:
        start = time.perf_counter()
        outputs: dict[str, ev.Error] = {}
        divergence = None
        try:
            accumulated = self._micro_batches(outputs)
            self._optimizer(accumulated, outputs)
        except _Failed as failed:
            divergence = failed.divergence
        errors = tuple(OutputError(tensor=t, abs_err=e.abs_err, rel_err=e.rel_err)
                       for t, e in outputs.items())
        coords = Mesh(axes=tuple(self.stage_plan.mesh)).size * self.map.stages
        result = EmulationResult(
            passed=divergence is None, outputs=errors,
            max_abs_err=max((e.abs_err for e in errors), default=0.0),
            max_rel_err=max((e.rel_err for e in errors), default=0.0),
            divergence=divergence, ops_run=self.counts["ops"],
            reshards_run=self.counts["reshards"], collectives_run=self.counts["collectives"],
            devices=coords, seconds=time.perf_counter() - start,
            counts={**self.counts, "sends": len(self.sends),
                    "unpriced_reshards": len(self.unpriced), "micro_batches": self.m,
                    "stages": self.map.stages})
        return PipelineRun(result=result, sends=tuple(self.sends),
                           unpriced=tuple(self.unpriced))

    def _micro_batches(self, outputs: dict[str, ev.Error]
                       ) -> dict[str, tuple[int, Held, np.ndarray]]:
        """Run every micro-batch; the loss checked; each gradient the optimizer reads summed
        per device, then divided by ``m``."""
        ops = self._phase_ops(optimizer=False)
        grads = {t for op in self.step.ops if op.name in self.optimizer_ops
                 for t in op.inputs if self.step.tensors[t].role is TensorRole.GRAD}
        sums: dict[str, tuple[int, Held, np.ndarray]] = {}
        losses: list[Held] = []
        for i in range(self.m):
            runs = self._phase(ops, self._feeds(i), i)
            last = runs[self.map.stages - 1]
            losses.extend(held for name, held in last.finals.items()
                          if self.step.tensors[name].role is TensorRole.OUTPUT)
            for grad in sorted(grads):
                stage = self.map.stage(self.step.producer(grad).name)
                held, value = runs[stage].held[grad], runs[stage].values[grad]
                sums[grad] = held_sum(sums.get(grad), stage, held, value)
        mean = {g: (s, (h[0], {c: b / self.m for c, b in h[1].items()}), v / self.m)
                for g, (s, h, v) in sums.items()}
        loss_name = next(n for n in self.step.outputs
                         if self.step.tensors[n].role is TensorRole.OUTPUT)
        sharding = losses[0][0]
        per_device = {c: sum(h[1][c] for h in losses) / self.m for c in losses[0][1]}
        outputs[loss_name] = self._check_truth(loss_name, sharding, per_device, "loss")
        for grad, (_, (sharding, local), _) in sorted(mean.items()):
            outputs[grad] = self._check_truth(grad, sharding, local, "accumulated gradient")
        return mean

    def _optimizer(self, accumulated: Mapping[str, tuple[int, Held, np.ndarray]],
                   outputs: dict[str, ev.Error]) -> None:
        ops = self._phase_ops(optimizer=True)
        if not ops:
            return
        runs = self._phase(ops, self._feeds(0), -1, accumulated)
        for run in runs.values():
            for name, (sharding, local) in sorted(run.finals.items()):
                outputs[name] = self._check_truth(name, sharding, local, "optimizer step")

    def _check_truth(self, name: str, sharding: Any, local: Mapping[Any, np.ndarray],
                     what: str) -> ev.Error:
        """``name``'s blocks against the unsharded whole-batch step."""
        error, where = el.error_of(local, sharding, self.truth[name])
        if not error.within(self.rtol):
            raise _Failed(Divergence(
                step="op", name=f"{what} {name}", tensor=name, abs_err=error.abs_err,
                rel_err=error.rel_err,
                message=f'"{name}" differs from the unsharded whole-batch step{where}: max '
                        f"abs err {error.abs_err:.3g}, rel err {error.rel_err:.3g}"))
        return error

    def _feeds(self, micro_batch: int) -> dict[str, np.ndarray]:
        """Every source's value for one micro-batch: the whole batch's, sliced along the dim
        that is ``m`` times longer (inputs), or as is (parameters, optimizer state)."""
        feeds = {}
        for op in self.step.ops:
            if op.kind not in ev.SOURCE_KINDS:
                continue
            name = op.outputs[0]
            value = self.truth[name]
            shape = self.step.tensors[name].shape
            for dim, (big, small) in enumerate(zip(value.shape, shape, strict=True)):
                if big != small:
                    index = [slice(None)] * value.ndim
                    index[dim] = slice(micro_batch * small, (micro_batch + 1) * small)
                    value = value[tuple(index)]
                    break
            feeds[name] = value
        return feeds


def held_sum(before: tuple[int, Held, np.ndarray] | None, stage: int, held: Held,
             value: np.ndarray) -> tuple[int, Held, np.ndarray]:
    """Per-device blocks (and the unsharded value) added to a running sum."""
    if before is None:
        return stage, (held[0], {c: np.array(b, dtype=np.float64) for c, b in held[1].items()}
                       ), np.array(value, dtype=np.float64)
    _, (sharding, local), total = before
    if sharding != held[0]:
        raise _Failed(Divergence(step="op", name="gradient accumulation", tensor="",
                                 message=f"a gradient's layout changes between micro-batches "
                                         f"({sharding.short()} then {held[0].short()})"))
    return stage, (sharding, {c: local[c] + held[1][c] for c in local}), total + value


def _where(divergence: Divergence, stage: int, micro_batch: int) -> Divergence:
    at = "optimizer step" if micro_batch < 0 else f"micro-batch {micro_batch}"
    return dataclasses.replace(divergence, name=f"stage {stage}, {at}: {divergence.name}")


def emulate_pipeline(plan: Plan, config: ModelConfig, *, seed: int = 0,
                     rtol: float = RTOL) -> PipelineRun:
    """Run pipelined ``plan`` on the zoo model ``config`` (its batch one micro-batch; the
    plan's dims or a scaled copy that runs the same program) and judge it against the
    unsharded whole-batch step.

    Raises:
        EmulationError: the plan's ops are not those of ``config``'s stage model.
    """
    pipeline = plan.pipeline or {}
    k, m = int(pipeline["stage_model_layers"]), int(pipeline["micro_batches"])
    stage_forward = zoo.build_config(dataclasses.replace(config, layers=k))
    optimizer, recompute = step_options(plan, stage_forward)
    forward = zoo.build_config(config)
    whole = zoo.build_config(dataclasses.replace(config, batch=config.batch * m))
    return PipelineEmulation(
        plan, training_step_graph(forward, optimizer, recompute),
        training_step_graph(whole, optimizer, recompute),
        training_step_graph(stage_forward, optimizer, recompute), forward,
        seed=seed, rtol=rtol).execute()


def step_options(plan: Plan, stage_forward: OpGraph) -> tuple[str, str]:
    """The optimizer and recomputation the plan's stage model was built with (read off its
    op kinds and names)."""
    from autoshard.verify.results import EmulationError

    kinds = {record.kind for record in plan.ops.values()}
    optimizer = "sgd" if "sgd_step" in kinds else "adamw"
    for recompute in ("none", "selective", "full"):
        try:
            step = training_step_graph(stage_forward, optimizer, recompute)
        except UsageError:
            continue
        if sorted(op.name for op in step.ops) == sorted(plan.ops):
            return optimizer, recompute
    raise EmulationError(f'the pipelined plan of "{plan.model}" is not a training step of '
                         f'"{stage_forward.name}" with {pipeline_layers(plan)} layers; pass '
                         "the model and shape options it was planned with")


def pipeline_layers(plan: Plan) -> int:
    return int((plan.pipeline or {}).get("stage_model_layers", 0))
