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
    for name, value, unit in (("--global-batch", global_batch, "samples"),
                              ("--micro-batch", micro_batch, "samples"),
                              ("--grad-accum", grad_accum, "micro-batches"),
                              ("--batch", batch, "samples")):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be a positive number of {unit}, got {value}")
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


def _divide(total: int, part: int, what: str) -> int:
    if total % part:
        raise UsageError(f"--global-batch {total} is not a multiple of {what} = {part}; "
                         f"choose a global batch that divides")
    return total // part
