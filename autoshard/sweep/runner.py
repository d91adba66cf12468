"""Run sweep points: one full plan per point, in this process, a process pool or on Dask.

A point never fails the sweep for a reason the user can act on: an infeasible memory limit, a
mesh the topology cannot hold or a shape that does not divide becomes a row with the reason.
Work is reused between points: each worker keeps the graphs it built (per model shape) and the
planner's in-process caches (strategies per op structure and mesh, node costs per structure
and links), and the points are handed out grouped by graph so a worker meets the same graph
again. Workers return the row and the plan's JSON; only the driver writes files, so a Dask
cluster needs no shared filesystem.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Any

from autoshard.errors import AutoshardError, MemoryTooSmallError, UsageError
from autoshard.logs import configure_logging, driver_log_level
from autoshard.planning.model_source import load_model
from autoshard.planning.pipeline.pipelined import plan_pipeline
from autoshard.planning.planner import plan, training_step_graph
from autoshard.planning.record import Plan
from autoshard.sharding.mesh import Mesh
from autoshard.sweep.points import Point, Shape
from costmodel import CostModelError
from graphs import GraphError, OpGraph
from solver import SolverError, share_cores

logger = logging.getLogger(__name__)

RECORDED_ERRORS = (AutoshardError, GraphError, CostModelError, SolverError)
_GRAPH_CACHE_SIZE = 4
DASK_CONNECT_TIMEOUT_S = 20.0
"""How long to keep retrying a Dask scheduler that refuses the connection."""
_GRAPHS: OrderedDict[Shape, OpGraph] = OrderedDict()


# Sweep points stop within 0.1 % of a proven bound instead of proving optimality: far below
# what separates mesh shapes, and it spares most of a 3-axis solve (PDLP finishes without the
# barrier; measured in results/sweeps/README.md).
SWEEP_GAP = 1e-3


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSettings:
    """Planner knobs shared by every point of a sweep."""

    memory_limit: float | None = None
    reserve: float = 0.0
    time_limit: float | None = None
    backend: str = "auto"
    gap: float = SWEEP_GAP


@dataclass(frozen=True, slots=True, kw_only=True)
class PointResult:
    """What a worker sends back: the CSV row and, for a feasible point, the plan JSON."""

    point_id: str
    row: dict[str, Any]
    plan_json: str | None


def build_graph(shape: Shape) -> OpGraph:
    """The graph of ``shape``, built once per process (a small LRU of recent shapes)."""
    cached = _GRAPHS.get(shape)
    if cached is not None:
        _GRAPHS.move_to_end(shape)
        return cached

    overrides = {**dict(shape.overrides), "batch": shape.batch, "seq": shape.seq}
    graph = load_model(shape.model, overrides)
    if shape.training:
        graph = training_step_graph(graph, shape.optimizer, shape.recompute)
    _GRAPHS[shape] = graph
    while len(_GRAPHS) > _GRAPH_CACHE_SIZE:
        _GRAPHS.popitem(last=False)
    return graph


def run_point(point: Point, settings: RunSettings) -> PointResult:
    """Plan one point; a recorded error becomes an infeasible row instead of an exception."""
    start = time.perf_counter()
    try:
        if point.pipelined:
            result = run_pipelined(point, settings)
        else:
            shape, count = point.shape, 1
            if point.micro_batch is not None:  # gradient accumulation (SweepSpec.accumulate)
                graph_batch, count = point.micro_batches()
                shape = replace(shape, batch=graph_batch)
            result = plan(build_graph(shape), Mesh(axes=point.mesh), topology=point.topology,
                          links=point.link_overrides(), memory_limit=settings.memory_limit,
                          time_limit=settings.time_limit, training=shape.training,
                          optimizer=shape.optimizer, recompute=shape.recompute,
                          reserve=settings.reserve, backend=settings.backend,
                          model_name=shape.model, gap=settings.gap, micro_batches=count)
    except RECORDED_ERRORS as exc:
        row = error_row(point, exc)
        row["wall_s"] = time.perf_counter() - start
        logger.info("point %s: %s", point.point_id, exc)
        return PointResult(point_id=point.point_id, row=row, plan_json=None)
    row = plan_row(point, result)
    row["wall_s"] = time.perf_counter() - start
    return PointResult(point_id=point.point_id, row=row, plan_json=result.to_json())


def run_pipelined(point: Point, settings: RunSettings) -> Plan:
    """A point with a ``pp`` axis: the pipelined training step of the whole batch in
    micro-batches (:func:`autoshard.plan_pipeline`, schedule searched), each micro-batch
    ``micro_batch`` samples per data-parallel replica."""
    graph_batch, count = point.micro_batches()
    shape = replace(point.shape, batch=graph_batch, training=False)

    def stage_graph(layers: int) -> OpGraph:
        return build_graph(replace(shape, overrides=(*shape.overrides, ("layers", layers))))

    return plan_pipeline(build_graph(shape), Mesh(axes=point.mesh), stage_graph=stage_graph,
                         topology=point.topology, links=point.link_overrides(),
                         memory_limit=settings.memory_limit, time_limit=settings.time_limit,
                         optimizer=shape.optimizer, recompute=shape.recompute,
                         reserve=settings.reserve, backend=settings.backend,
                         micro_batches=count, model_name=shape.model, gap=settings.gap)


def base_row(point: Point) -> dict[str, Any]:
    shape = point.shape
    return {"point": point.point_id, "model": shape.model, "mode": shape.mode,
            "devices": point.devices, "axes": len(point.mesh), "mesh": point.mesh_text,
            "topology": point.topology, "links": point.links, "batch": point.batch_used,
            "seq": point.seq_used, "training": shape.training, "micro_batch": point.micro_batch}


def plan_row(point: Point, result: Plan) -> dict[str, Any]:
    """The CSV row of a feasible point (see :data:`autoshard.sweep.table.COLUMNS`)."""
    objective = result.objective
    tokens = tokens_per_s(point.batch_used, point.seq_used, objective.total_s)
    kind, axes, seconds = top_collective(result)
    return {**base_row(point), "total_s": objective.total_s, "compute_s": objective.compute_s,
            "comm_s": objective.comm_s, "hidden_s": objective.hidden_s,
            "concurrent_s": objective.concurrent_s, "bubble_s": objective.bubble_s,
            "comm_share": ((objective.comm_s - objective.hidden_s - objective.concurrent_s)
                           / objective.total_s if objective.total_s else 0.0),
            "tokens_per_s": tokens, "peak_bytes_per_device": result.peak_bytes_per_device,
            "limit_bytes": result.limit_bytes, "feasible": True,
            "optimal": objective.optimal, "gap": objective.gap, "status": objective.status,
            "top_collective": kind, "top_collective_axes": axes,
            "top_collective_s": seconds, "solve_s": objective.solve_s,
            "plan": f"points/{point.point_id}/plan.json", "error_kind": None, "error": None,
            **pipeline_cells(result),
            **({"micro_batches": objective.micro_batches}
               if point.micro_batch is not None and not point.pipelined else {})}


def tokens_per_s(batch: int | None, seq: int | None, total_s: float) -> float | None:
    """Tokens a step of ``total_s`` seconds processes per second (None when the batch or the
    sequence length is unknown).

    Example:
        >>> tokens_per_s(8, 1024, 0.5), tokens_per_s(None, 1024, 0.5)
        (16384.0, None)
    """
    return batch * seq / total_s if batch and seq and total_s > 0 else None


def pipeline_cells(result: Plan) -> dict[str, Any]:
    """A pipelined plan's schedule, micro-batches and simulated bubble (empty otherwise)."""
    record = result.pipeline or {}
    return {"schedule": record.get("schedule"), "micro_batches": record.get("micro_batches"),
            "bubble_fraction": record.get("bubble_fraction")}


def error_row(point: Point, exc: Exception) -> dict[str, Any]:
    """An infeasible point: the reason, and for a memory error the smallest peak any plan
    needs (in ``peak_bytes_per_device``) against the limit."""
    row = {**base_row(point), "feasible": False, "error_kind": type(exc).__name__,
           "error": " ".join(str(exc).split()), "status": "infeasible"}
    if isinstance(exc, MemoryTooSmallError):
        row["peak_bytes_per_device"] = exc.needed_bytes
        row["limit_bytes"] = exc.limit_bytes
    return row


def top_collective(result: Plan) -> tuple[str | None, str | None, float | None]:
    """The (kind, axes) whose collectives cost the most seconds in total over the whole plan
    (reshards and collectives inside ops); ties go to the smaller (kind, axes)."""
    totals: dict[tuple[str, str], float] = {}
    collectives = [c for r in result.reshards for c in r.collectives]
    collectives += [c for op in result.ops.values() for c in op.intra_op]
    for coll in collectives:
        key = (coll.kind, ",".join(coll.axes))
        totals[key] = totals.get(key, 0.0) + coll.seconds
    if not totals:
        return None, None, None
    (kind, axes), seconds = min(totals.items(), key=lambda item: (-item[1], item[0]))
    return kind, axes, seconds


def grouped(points: Sequence[Point]) -> list[Point]:
    """Points ordered so that those sharing a graph are handed out together, and within a
    graph the likely slowest first: more mesh axes, then more devices (stable otherwise).

    A pool idles at the end when the last points handed out are the long ones: the 64-device
    llama3-8b sweep in enumeration order puts all ten 3-axis points (13-30 s each) after
    the six 1- and 2-axis ones (1-2 s). At ``-j 2``, run twice in each order, alternating:
    94.5 and 94.4 s in this order, 96.8 and 99.5 s in that one."""
    first: dict[Shape, int] = {}
    for index, point in enumerate(points):
        first.setdefault(point.shape, index)
    return sorted(points, key=lambda p: (first[p.shape], -len(p.mesh), -p.devices))


Executor = Callable[[Sequence[Point], RunSettings], Iterator[PointResult]]


def run_serial(points: Sequence[Point], settings: RunSettings) -> Iterator[PointResult]:
    for point in grouped(points):
        yield run_point(point, settings)


def run_processes(points: Sequence[Point], settings: RunSettings, jobs: int
                  ) -> Iterator[PointResult]:
    """A process pool of ``jobs`` workers; results in completion order. Workers ignore
    SIGINT: on Ctrl-C (or any early exit) the driver cancels the points not started and ends
    the workers, having already written every finished row."""
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=_worker_context(),
                               initializer=_start_worker, initargs=(jobs, driver_log_level()))
    try:
        futures = [pool.submit(run_point, p, settings) for p in grouped(points)]
        for future in as_completed(futures):
            yield future.result()
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True)


def _worker_context() -> multiprocessing.context.BaseContext:
    """Workers forked from a clean server process, not from the driver: a driver that has
    imported JAX or PyTorch runs their threads, and a fork copies whatever locks those
    threads held (Python warns that it may deadlock; 3.14 made ``forkserver`` the default on
    Linux for this reason). The server imports the planner once, so each worker still starts
    with it loaded. What the driver changed at run time (an op registered with
    ``graphs.register_op`` from a script) is not seen by the workers, as on a Dask cluster;
    such a sweep runs in-process (``-j 1``)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")  # Windows
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def _start_worker(jobs: int, log_level: int | None = None) -> None:
    """Ignore SIGINT (the driver stops the pool), log as the driver does (``autoshard -v``),
    and take a fair share of the cores for the solver's threads: oversubscribed, PDLP's
    threads wait on each other at every step."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_level is not None:
        configure_logging(log_level)
    share_cores(jobs)


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel queued points and end running ones now (Python 3.14 has ``terminate_workers``;
    before it, the pool's process table is the only handle on its workers)."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()


def run_dask(points: Sequence[Point], settings: RunSettings, scheduler: str
             ) -> Iterator[PointResult]:
    """Points as tasks on a Dask distributed cluster at ``scheduler`` (its workers need
    autoshard installed); results in completion order."""
    try:
        import distributed
    except ImportError:
        raise UsageError("--executor dask needs the dask extra: pip install "
                         '"autoshard[dask]"') from None
    try:
        client = distributed.Client(scheduler, timeout=f"{DASK_CONNECT_TIMEOUT_S}s",
                                    set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f'cannot reach the Dask scheduler at "{scheduler}" ({exc}); start '
                         "one with `dask scheduler` or pass its address to --scheduler"
                         ) from None
    token = uuid.uuid4().hex[:8]  # two sweeps on one cluster must not share task keys
    with client:
        threads = threads_per_host(client.scheduler_info().get("workers", {}))
        futures = [client.submit(_run_on_dask_worker, p, settings, threads, pure=False,
                                 key=f"autoshard-{p.point_id}-{token}")
                   for p in grouped(points)]
        try:
            for future in distributed.as_completed(futures, loop=client.loop):
                yield future.result()
        finally:
            client.cancel(futures)


def threads_per_host(workers: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Task threads of all Dask workers on each host (from ``scheduler_info()["workers"]``):
    that many points may run side by side on the host's cores."""
    totals: dict[str, int] = {}
    for info in workers.values():
        host = str(info.get("host", ""))
        totals[host] = totals.get(host, 0) + int(info.get("nthreads", 1))
    return totals


def _run_on_dask_worker(point: Point, settings: RunSettings, threads: dict[str, int]
                        ) -> PointResult:
    """``run_point`` after taking this host's share of the cores for the solver's threads (the
    ``-j`` pool does it in its initializer; Dask workers have no such hook per sweep)."""
    import distributed

    host = distributed.comm.get_address_host(distributed.get_worker().address)
    share_cores(threads.get(host, 1))
    return run_point(point, settings)
