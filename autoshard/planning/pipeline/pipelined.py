"""Plan a model on a mesh with a pipeline axis: the ``pp`` axis splits the layers into stages,
the other axes shard each stage as an ordinary plan does.

How (Alpa's split of the problem, Zheng et al. 2022, arXiv:2201.12023: an intra-operator
solve per stage under an inter-operator partition):

1. The intra-stage plan: a stage model, the model with ``min(ceil(L / p), 4)`` layers (built
   by ``stage_graph``; the whole model when none is given), planned on the mesh without ``pp``
   for one micro-batch and ``m`` micro-batches per step, under the device's memory. The
   planner's periodic solve makes every layer pick the same layouts, so one solve of a short
   stack prices every layer of every stage (four layers: the shortest stack the periodic
   solve recognises). When no cut fits with those layouts (a stage holds more layers than the
   stage model, and more micro-batches in flight), the stage model is re-planned under what
   the fullest stage of the even cut holds (:mod:`.stage_memory`: its layers' state and
   in-flight activations, linear in the layouts, added to the memory constraint), so the
   solver trades speed for memory (ZeRO-style sharded state) as a full stage must, then at
   its smallest peak (:func:`fit_memory`; re-solves limited to 60 s unless a time limit is
   given, a timed-out one counting as undecided, never as "does not fit").
2. Its records summed per layer (:mod:`.layer_costs`): forward, backward (B and W), the
   per-step tail (gradient sync of the layer's parameters over the data-parallel axes, after
   the last micro-batch, and its optimizer step), bytes. The model's first layer is priced
   as the stage model's first, its last as its last, every other as its second (the ends
   of the stack may pick other strategies: :func:`.stage_rows.counterpart`), bytes as their
   mean; the per-stage reports copy the same records (:mod:`.stage_rows`).
3. The boundary activation's point-to-point transfer priced on the ``pp`` axis's link
   (``costmodel`` collective-permute, calibrated curves on GPU presets).
4. Schedule and boundaries (:mod:`.search`) by simulated step time under per-stage memory.

The Plan returned keeps the intra-stage plan's tensors, ops and reshards (the layouts every
stage uses, for the stage model's layers) and adds ``pipeline``: the schedule, the
micro-batches, per stage its layers, devices, memory and time.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from autoshard.errors import MemoryTooSmallError, PipelineError
from autoshard.planning.layers import layer_of
from autoshard.planning.pipeline.layer_costs import (
    Charges,
    LayerCosts,
    PartCost,
    charges,
    layer_costs,
)
from autoshard.planning.pipeline.record import pipeline_objective, pipeline_record
from autoshard.planning.pipeline.schedules import parse_schedule
from autoshard.planning.pipeline.search import Choice, Setting, choose, fitting_stages
from autoshard.planning.pipeline.stage_memory import (
    LeanestStage,
    StageShape,
    binding_stage,
    frugal_schedule,
    held_terms,
    stage_shapes,
)
from autoshard.planning.pipeline.stage_rows import boundary_counterpart, counterpart
from autoshard.planning.planner import fingerprint, plan, training_step_graph
from autoshard.planning.record import Plan
from autoshard.planning.throughput import throughput
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.sharding.mesh import Mesh
from costmodel import CollectiveKind, Topology, collective_seconds, peak_flops
from graphs import OpGraph, TensorRole
from solver import OPTIMALITY_GAP, NoSolutionError

PP_AXIS = "pp"
STAGE_MODEL_LAYERS = 4  # the stage model's layers: the periodic solve's minimum stack
MEMORY_ATTEMPTS = 4  # stage-model solves under a shrinking budget before the frugal one
FRUGAL_SLACK = 1e-9  # relative room above the smallest peak for the frugal re-solve
RESOLVE_TIME_LIMIT_S = 60.0  # per re-solve unless --time-limit is given (never a verdict)
# A re-solve under a whole stage's memory stops at a plan proven within this of its bound
# (or --gap when looser): the memory price gets there in a few periodic solves, and the
# search with tied layers that would follow can lower the plan but never raise the bound
# (llama3-70b on dp=4,pp=4,tp=4: a 1.6 % gap after the price search, 1.57 % after 60 s more).
STAGE_GAP = 2e-2
STAGE_NOTE = ("search restricted: the stage model re-planned under a whole stage's memory "
              f"is solved to a {STAGE_GAP:.0%} gap to its proven lower bound, or until its "
              "time limit")


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineOptions:
    """``schedule``: gpipe, 1f1b, interleaved, zb-h1 or auto (searched); ``stages``: layers per
    stage (per chunk for interleaved) to fix the boundaries; ``virtual``: chunks per stage of
    the interleaved schedule."""

    schedule: str = "auto"
    stages: tuple[int, ...] | None = None
    virtual: int = 2


def has_pipeline(mesh: Mesh) -> bool:
    return PP_AXIS in mesh.axis_names


def split_mesh(mesh: Mesh) -> tuple[int, Mesh]:
    """The pipeline degree and the mesh of one stage (the other axes, in order)."""
    p = mesh.axis_size(PP_AXIS)
    rest = tuple((n, s) for n, s in mesh.axes if n != PP_AXIS)
    return p, Mesh(axes=rest or (("dp", 1),))


def model_layers(graph: OpGraph) -> int:
    """Number of repeated layers in a forward graph (0 when it has none)."""
    return len({found[0] for op in graph.topo_ops()
                if (found := layer_of(op.name)) is not None})


def plan_pipeline(forward: OpGraph, mesh: Mesh, *,
                  stage_graph: Callable[[int], OpGraph] | None = None,
                  pipeline: PipelineOptions | None = None,
                  topology: Topology | str = "dgx-h100",
                  links: Mapping[str, Any] | None = None, memory_limit: float | None = None,
                  reserve: float = 0.0, optimizer: str = "adamw", recompute: str = "none",
                  micro_batches: int = 1, model_name: str | None = None,
                  **plan_options: Any) -> Plan:
    """Plan ``forward`` (a forward-only graph of the whole model) on ``mesh``, whose ``pp``
    axis is the pipeline; a training step (see the module docstring). ``stage_graph(k)``
    builds the same model with ``k`` layers; ``plan_options`` go to :func:`autoshard.plan`
    for the intra-stage plan (pins, strategy, overlap, gap, time_limit, ...).

    Raises:
        PipelineError: more stages than layers, a schedule the micro-batches cannot run,
            bad ``--stages``.
        MemoryTooSmallError: no stage cut fits the memory.
    """
    options = pipeline or PipelineOptions()
    schedule = None if options.schedule == "auto" else parse_schedule(options.schedule)
    p, inner = split_mesh(mesh)
    layers = _check_layers(forward, p)
    # --stages checked before any solve; auto with a per-chunk list means interleaved
    schedule = fitting_stages(schedule, options.stages, layers, p, options.virtual,
                              micro_batches)
    topo = resolve_topology(topology)
    limit = float(topo.device.hbm_bytes) if memory_limit is None else float(memory_limit)
    per_stage = math.ceil(layers / p)
    size = min(per_stage, STAGE_MODEL_LAYERS)
    stage = stage_graph(size) if stage_graph is not None and size < layers else forward
    train = training_step_graph(stage, optimizer, recompute)
    full_links = MeshLinks.build(mesh, topo, dict(links or {}))
    shapes = stage_shapes(size if stage is not forward else layers, layers, p, micro_batches,
                          frugal_schedule(schedule, p, micro_batches), options.virtual,
                          options.stages)
    lean = LeanestStage(shapes)

    def solve(budget: float, shape: StageShape | None) -> Plan:
        options_now = dict(plan_options)
        if (shape is not None or budget < limit) and options_now.get("time_limit") is None:
            options_now["time_limit"] = RESOLVE_TIME_LIMIT_S
        options_now["held_bytes"] = lean  # adds nothing; finds the stage to constrain first
        if shape is not None:
            options_now["held_bytes"] = functools.partial(held_terms, shape)
            options_now["gap"] = max(options_now.get("gap", OPTIMALITY_GAP), STAGE_GAP)
        intra = plan(train, inner, topology=topo, links=stage_links(full_links, topo, links),
                     memory_limit=budget, reserve=reserve, micro_batches=micro_batches,
                     model_name=model_name, **options_now)
        if shape is None or intra.objective.optimal:
            return intra
        return dataclasses.replace(intra, notes=(*intra.notes, STAGE_NOTE))

    def binding(intra: Plan) -> StageShape:
        return binding_stage(layer_costs(train, intra), shapes)

    def price(intra: Plan) -> tuple[LayerCosts, Setting, Choice]:
        stage_costs = layer_costs(train, intra)
        costs = _model_costs(stage_costs, layers)
        setting = _setting(intra, stage_costs, costs, full_links, options, p, micro_batches,
                           limit, reserve)
        return stage_costs, setting, choose(costs, setting, schedule)

    intra, (stage_costs, setting, choice) = fit_memory(
        solve, price, limit, reserve, binding, lambda first: lean.shape or binding(first))
    return _pipelined_plan(forward, mesh, topo, full_links, intra, choice, setting,
                           reserve=reserve, stage_costs=stage_costs,
                           charged=charges(train, intra))


def fit_memory(solve: Callable[[float, Any], Plan], price: Callable[[Plan], Any],
               limit: float, reserve: float,
               binding: Callable[[Plan], Any] = lambda plan: None,
               start: Callable[[Plan], Any] | None = None) -> tuple[Plan, Any]:
    """The stage model's plan whose stage cut fits the device, and its price.

    ``solve(budget, None)`` plans the stage model as it is; ``solve(budget, stage)`` plans
    it under what that stage holds (:mod:`.stage_memory`) and may carry a time limit. Each
    raises MemoryTooSmallError with the smallest peak when nothing fits (or, when the time
    limit left it unproven, a lower bound of it and the leanest plan's peak found), or
    solver.NoSolutionError when time ran out first; ``price(plan)`` chooses the cut (raising
    MemoryTooSmallError when no cut fits); ``binding(plan)`` is the stage that holds the
    most with a plan's layouts, ``start(first)`` the stage to constrain first (default:
    ``binding``).

    The stage model's fastest plan first, without a memory limit (the stage model is no
    device: a stage may hold less than it, or more; only the cut search's count of each
    stage decides), which fits on a roomy device; else re-solves as a stage under the
    device's memory, lowered by what the cut search still finds missing (its schedule or cut
    may hold more than the stage the constraint stood for; when another stage binds with
    the new layouts, that stage's turn starts at the device's memory), up to
    :data:`MEMORY_ATTEMPTS` solves; then the most frugal plans decide, the stage's and then
    the stage model's own (the verdict fit_memory always gave). "No plan fits" is only ever
    a frugal plan's verdict, never a faster plan's nor that of a re-solve that ran out of
    time: a frugal plan that fits keeps fitting with more memory.
    """
    first = solve(math.inf, None)  # the fastest plan: no memory rows to price or prove
    try:
        return first, price(first)
    except MemoryTooSmallError:
        pass
    budget, stage = limit, (start or binding)(first)
    for _ in range(MEMORY_ATTEMPTS):
        try:
            intra = solve(budget, stage)
        except (MemoryTooSmallError, NoSolutionError):
            break
        try:
            return intra, price(intra)
        except MemoryTooSmallError as exc:
            now = binding(intra)
            if now == stage:
                budget -= exc.needed_bytes - exc.limit_bytes
            else:  # another stage binds now (sharded state, more activations): its own turn
                stage, budget = now, limit
            if budget <= reserve:
                break
    return _frugal(solve, price, reserve, stage)


def _frugal(solve: Callable[[float, Any], Plan], price: Callable[[Plan], Any],
            reserve: float, stage: Any) -> tuple[Plan, Any]:
    """The stage's most frugal plan, then the stage model's (budget: its smallest peak):
    the first whose cut fits, else the last one's MemoryTooSmallError (or its time-out).
    When the time limit left the smallest peak unproven, the budget is the peak of the
    leanest plan the search found (a plan exists there, so the re-solve fits), not the
    proven lower bound, under which nothing may fit."""
    refusal: MemoryTooSmallError | None = None
    for constrained in (stage, None):
        try:
            solve(reserve + 1.0, constrained)
            raise AssertionError("fit_memory: a plan fitted a budget of one byte")
        except MemoryTooSmallError as exc:
            smallest = _fitting_budget(exc)
        except NoSolutionError:
            if constrained is None:
                raise
            continue
        if smallest is None:  # no plan found in time: as if the solve had timed out
            if constrained is None:
                raise NoSolutionError("no plan of the stage model was found within the time "
                                      "limit; raise the time limit", time_limit=None)
            continue
        try:
            intra = solve(smallest, constrained)
        except NoSolutionError:
            if constrained is None:
                raise
            continue
        try:
            return intra, price(intra)
        except MemoryTooSmallError as exc:
            refusal = exc
    assert refusal is not None
    raise refusal


def _fitting_budget(exc: MemoryTooSmallError) -> float | None:
    """The budget at which a plan is known to exist, from a one-byte solve's refusal: the
    least peak when exact, else the peak of the leanest plan found (None: no plan found)."""
    known = exc.needed_bytes if exc.exact else exc.found_bytes
    return None if known is None else known * (1 + FRUGAL_SLACK)


def _setting(intra: Plan, stage_costs: LayerCosts, costs: LayerCosts, full_links: MeshLinks,
             options: PipelineOptions, p: int, micro_batches: int, limit: float,
             reserve: float) -> Setting:
    """What the search needs besides the layer costs: the boundary transfer on the pp link and
    the working set the stage model's peak holds beyond its state and saved activations."""
    send_s = float(collective_seconds(CollectiveKind.COLLECTIVE_PERMUTE, costs.boundary_bytes,
                                      full_links.group((PP_AXIS,))))
    static = sum(part.static_bytes for part in (stage_costs.pre, *stage_costs.layers,
                                                stage_costs.post))
    saved = intra.memory_breakdown.get("activations_saved", 0.0)
    transient = max(intra.peak_bytes_per_device - reserve - static - saved, 0.0)
    return Setting(stages=p, micro_batches=micro_batches, send_s=send_s,
                   limit_bytes=limit - reserve, transient_bytes=transient,
                   virtual=options.virtual, layers=options.stages, mesh=str(full_links.mesh))


def _check_layers(forward: OpGraph, p: int) -> int:
    layers = model_layers(forward)
    if p > max(layers, 1):
        raise PipelineError(f"pp={p} stages but the model has {layers} layers; use at most "
                            f"{layers} pipeline stages", stages=p)
    if any(t.role is TensorRole.GRAD for t in forward.tensors.values()):
        raise PipelineError("a pipelined plan starts from the forward graph (it builds the "
                            "backward per stage); give the model, not a training graph",
                            stages=p)
    return layers


def stage_links(full: MeshLinks, topology: Topology,
                links: Mapping[str, Any] | None) -> dict[str, Any]:
    """Link overrides for the stage mesh so that each axis is priced on the links it spans in
    the whole mesh: without ``pp`` an outer axis's stride shrinks (``dp`` of
    ``dp=4,pp=4,tp=4`` spans 64 devices, of ``dp=4,tp=4`` 16), so an axis whose whole-mesh
    group is one link gets that link; a multi-level one keeps the stage mesh's levels."""
    _, inner = split_mesh(full.mesh)
    natural = MeshLinks.build(inner, topology, {})
    out = {axis: spec for axis, spec in (links or {}).items() if axis != PP_AXIS}
    for name in inner.axis_names:
        if name in out or name not in full.mesh.axis_names:
            continue
        levels = full.axis(name).levels
        if len(levels) == 1 and natural.axis(name).levels != levels:
            out[name] = levels[0][1]
    return out


def _model_costs(stage: LayerCosts, layers: int) -> LayerCosts:
    """Each layer of the whole model priced as one stage-model layer (the first as its first,
    the last as its last, every other as its second: :func:`.stage_rows.counterpart`), with
    the reshards of the layer boundaries it has (the one before it unless it is the first,
    the one after it unless the last; :func:`.stage_rows.boundary_counterpart`): within a
    stage and between two stages alike. So a stage's reports, which copy those very
    records, add up to what it is priced at. Its bytes are the stage-model layers' mean, as
    the stage memory model (:mod:`.stage_memory`) counts them."""
    if not stage.layers:
        raise PipelineError("the model shows no repeated layers (names like layers.3.…) to "
                            "split into pipeline stages")
    k = len(stage.layers)
    total = stage.layers[0]
    for part in stage.layers[1:]:
        total = total + part
    mean = total.scaled(1.0 / k)
    none = PartCost()

    def priced(i: int) -> PartCost:
        into = stage.into_at[boundary_counterpart(i, layers, k) - 1] \
            if i > 0 and stage.into_at else none
        out_of = stage.out_of_at[boundary_counterpart(i + 1, layers, k) - 1] \
            if i < layers - 1 and stage.out_of_at else none
        seconds = stage.layers[counterpart(i, layers, k)] + into + out_of
        return dataclasses.replace(seconds, static_bytes=mean.static_bytes,
                                   activation_bytes=mean.activation_bytes,
                                   weight_bytes=mean.weight_bytes)

    return dataclasses.replace(stage, layers=tuple(priced(i) for i in range(layers)))


def _pipelined_plan(forward: OpGraph, mesh: Mesh, topo: Topology, links: MeshLinks,
                    intra: Plan, choice: Choice, setting: Setting, *, reserve: float,
                    stage_costs: LayerCosts, charged: Charges) -> Plan:
    step_s = choice.timeline.step_s
    stage_layers = len(stage_costs.layers)
    record = pipeline_record(mesh, choice, setting, intra, stage_layers, stage_costs)
    # where each record's seconds went: what the per-stage reports and trace copy
    record["charges"] = {"ops": [str(charged.ops[name]) for name in intra.ops],
                         "reshards": [None if c is None else str(c)
                                      for c in charged.reshards]}
    record["pp_link"] = next(row for row in links.describe() if row.get("axis") == PP_AXIS)
    params = [t for t in forward.tensors.values() if t.role is TensorRole.PARAM]
    dtype = params[0].dtype.value if params else "f32"
    rate = throughput(forward, step_s=step_s, devices=mesh.size,
                      peak_flops_per_s=peak_flops(dtype, topo.device),
                      micro_batches=setting.micro_batches, training=True)
    settings = {**dict(intra.stats.get("settings", {})), "schedule": choice.schedule.value,
                "pp": setting.stages}
    return dataclasses.replace(
        intra, mesh=tuple(zip(mesh.axis_names, mesh.axis_sizes, strict=True)),
        objective=pipeline_objective(intra, choice, setting),
        peak_bytes_per_device=max(choice.stage_bytes) + reserve,
        limit_bytes=setting.limit_bytes + reserve,  # the device's, not the stage model's budget
        memory_breakdown=_breakdown(choice, setting, reserve),
        fingerprint=fingerprint(forward, mesh, topo, links),
        notes=(*intra.notes, *record["notes"]),
        stats={**dict(intra.stats), "settings": settings}, throughput=rate,
        pipeline={k: v for k, v in record.items() if k != "notes"},
        model_parameters=sum(math.prod(t.shape) for t in params))


def _breakdown(choice: Choice, setting: Setting, reserve: float) -> dict[str, float]:
    """The fullest stage's bytes by kind (the summary's memory line)."""
    s = max(range(setting.stages), key=lambda i: choice.stage_bytes[i])
    part = choice.stage_parts[s]
    return {"params_grads_optimizer": part.static_bytes,
            "activations_in_flight": choice.held_bytes[s],
            "transient": setting.transient_bytes, "reserve": reserve}
