"""Global batch, micro-batch and gradient accumulation, turned into the graph's batch and the
number of micro-batches a step runs.

The planner's graph is one micro-batch over the whole mesh (its batch dim is what data
parallelism splits), and a step runs it ``m`` times (:mod:`.step`). Users say it the way
training recipes do (Megatron-LM's ``--global-batch-size`` and ``--micro-batch-size``):

* ``global_batch`` G and ``micro_batch`` b, samples per micro-batch on each data-parallel
  replica: the graph's batch is ``b·D`` with D the product of the mesh's data-parallel axes
  (named dp, fsdp, … as for the named strategies, :func:`~autoshard.planning.named.axis_role`;
  the search may still shard the batch otherwise), and ``m = G / (b·D)``;
* ``global_batch`` G and ``grad_accum`` m: the graph's batch is ``G / m``;
* ``grad_accum`` m alone: the graph's batch is the model's (``--batch``), and a step is m of
  them.

A command that reads a saved plan (``verify``, ``explain``, ``export --model``) takes the same
options to rebuild the same graph; the plan records ``m`` (``objective.micro_batches``), so it
is the default: ``--global-batch`` G alone is m micro-batches of ``G / m``, ``--micro-batch``
b alone is m micro-batches of ``b·D``, and options that make another m are refused
(:func:`saved_plan_batches`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from autoshard.errors import UsageError
from autoshard.planning.named import axis_role
from autoshard.sharding.mesh import Mesh


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchPlan:
    """The graph's batch (None: the model's own) and the micro-batches per step."""

    graph_batch: int | None
    micro_batches: int


def data_degree(mesh: Mesh) -> int:
    """Product of the sizes of the axes whose names say data parallel (dp, fsdp, …).

    Example:
        >>> data_degree(Mesh.parse("dp=4,fsdp=2,tp=8")), data_degree(Mesh.parse("tp=8"))
        (8, 1)
    """
    return math.prod(size for name, size in zip(mesh.axis_names, mesh.axis_sizes, strict=True)
                     if axis_role(name) in ("dp", "fsdp"))


def batch_plan(mesh: Mesh, *, batch: int | None = None, global_batch: int | None = None,
               micro_batch: int | None = None, grad_accum: int | None = None) -> BatchPlan:
    """See the module docstring.

    Raises:
        UsageError: options that contradict each other or do not divide.

    Example:
        >>> batch_plan(Mesh.parse("dp=4,tp=4"), global_batch=256, micro_batch=2)
        BatchPlan(graph_batch=8, micro_batches=32)
    """
    _check_positive(batch, global_batch, micro_batch, grad_accum)
    if global_batch is None:
        if micro_batch is not None:
            raise UsageError("--micro-batch needs --global-batch (the samples of one step)")
        return BatchPlan(graph_batch=batch, micro_batches=grad_accum or 1)
    if batch is not None:
        raise UsageError("--batch and --global-batch both set the batch; give one (with "
                         "--micro-batch or --grad-accum for gradient accumulation)")
    if micro_batch is not None and grad_accum is not None:
        raise UsageError("give --micro-batch or --grad-accum, not both")
    if grad_accum is not None:
        return BatchPlan(graph_batch=_divide(global_batch, grad_accum, "--grad-accum"),
                         micro_batches=grad_accum)
    if micro_batch is None:
        return BatchPlan(graph_batch=global_batch, micro_batches=1)
    replicas = data_degree(mesh)
    per_step = micro_batch * replicas
    steps = _divide(global_batch, per_step,
                    f"--micro-batch {micro_batch} × {replicas} data-parallel replicas")
    return BatchPlan(graph_batch=per_step, micro_batches=steps)


def saved_plan_batches(mesh: Mesh, micro_batches: int, *, batch: int | None = None,
                       global_batch: int | None = None, micro_batch: int | None = None,
                       grad_accum: int | None = None) -> BatchPlan:
    """The graph's batch a saved plan of ``micro_batches`` micro-batches per step on ``mesh``
    was made with, from the options of the plan command (see the module docstring): what is
    not given defaults to the plan's count.

    Raises:
        UsageError: the options contradict each other or do not divide (the plan command's
            messages), or they make another number of micro-batches than the plan runs.

    Example:
        >>> dp4 = Mesh.parse("dp=4,tp=4")
        >>> saved_plan_batches(dp4, 32, global_batch=256)
        BatchPlan(graph_batch=8, micro_batches=32)
        >>> saved_plan_batches(dp4, 32, micro_batch=2)
        BatchPlan(graph_batch=8, micro_batches=32)
        >>> saved_plan_batches(dp4, 32, global_batch=256, micro_batch=4)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        autoshard.errors.UsageError: the plan runs 32 micro-batches per step, but ... runs 16; ...
    """
    _check_positive(batch, global_batch, micro_batch, grad_accum)
    if global_batch is None and grad_accum is None:
        if micro_batch is None:
            return BatchPlan(graph_batch=batch, micro_batches=micro_batches)
        if batch is not None:
            raise UsageError("--batch and --micro-batch both set the batch; give one")
        return BatchPlan(graph_batch=micro_batch * data_degree(mesh), micro_batches=micro_batches)
    if global_batch is not None and micro_batch is None and grad_accum is None:
        if batch is not None:  # the plan command's message
            return batch_plan(mesh, batch=batch, global_batch=global_batch)
        return BatchPlan(graph_batch=_divide(global_batch, micro_batches,
                                             "the plan's micro-batches per step"),
                         micro_batches=micro_batches)
    made = batch_plan(mesh, batch=batch, global_batch=global_batch, micro_batch=micro_batch,
                      grad_accum=grad_accum)
    if made.micro_batches != micro_batches:
        given = " ".join(f"{flag} {value}" for flag, value in (
            ("--global-batch", global_batch), ("--micro-batch", micro_batch),
            ("--grad-accum", grad_accum)) if value is not None)
        raise UsageError(f"the plan runs {micro_batches} micro-batches per step, but with "
                         f"{given} a step on mesh {mesh} runs {made.micro_batches}; pass the "
                         "options the plan was made with (without --micro-batch and "
                         "--grad-accum the plan's count is used)")
    return made


def _check_positive(batch: int | None, global_batch: int | None, micro_batch: int | None,
                    grad_accum: int | None) -> None:
    for name, value, unit in (("--global-batch", global_batch, "samples"),
                              ("--micro-batch", micro_batch, "samples"),
                              ("--grad-accum", grad_accum, "micro-batches"),
                              ("--batch", batch, "samples")):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be a positive number of {unit}, got {value}")


def _divide(total: int, part: int, what: str) -> int:
    if total % part:
        raise UsageError(f"--global-batch {total} is not a multiple of {what} = {part}; "
                         f"choose a global batch that divides")
    return total // part
