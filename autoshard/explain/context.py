"""A saved plan put back into the planning problem it answers, so alternatives can be priced.

The plan names its mesh, topology, links, memory limit, reserve and pins; the caller gives the
model (plan.json stores placements, not the graph). The graph is rebuilt as ``autoshard verify``
does (a training plan's step read off its op names) and the fingerprint must match. The
planner is then run up to its solve (:meth:`~autoshard.planning.planner._Planner.prepare`):
every op's strategies, their costs and the reshard matrices, the numbers the solver saw.

Two kinds of answer come out of it:

* a *single-change bound*: the plan with one op switched to another option and every other
  op kept, priced from the same cost tables. It is a feasible plan (if it fits in memory), so
  ``bound ≥ (re-solved optimum with that choice forced) - (plan's optimum)``: an upper bound;
* a *re-solve*: the whole problem solved again with the alternative pinned, which is the exact
  change when the solver proves optimality. A re-solve reuses the prepared planner's prices,
  reshard matrices and step problem (none depends on pins: :func:`replan_prepared`), so it
  costs a solve, not a plan (llama3-70b on dp=8,tp=8: pricing was most of each re-solve).

A time limit (``explain --time-limit``) covers everything from the command's start: each
re-solve gets what is left of it, and once it has run out the remaining alternatives are not
re-solved; the report says how many were (:meth:`ExplainContext.out_of_time`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import solver
from autoshard.errors import AutoshardError, InfeasibleError
from autoshard.export.plan_view import PlanMismatchError, check_fingerprint, plan_links
from autoshard.planning.pins import Pins, pins_from_record
from autoshard.planning.planner import PlanOptions, replan, replan_prepared
from autoshard.planning.progress import status
from autoshard.planning.record import Plan
from autoshard.planning.record_check import check_tensor_records
from autoshard.planning.step import Overlap, StepOptions
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from autoshard.verify.verification import planned_graph
from costmodel import Topology
from graphs import OpGraph


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """One re-solve: the new step time and peak, or why there is no plan."""

    total_s: float | None
    peak_bytes: float | None
    status: str

    @property
    def feasible(self) -> bool:
        return self.total_s is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExplainContext:
    """A plan, the graph and options it was made with, and the prepared planner."""

    plan: Plan
    graph: OpGraph
    mesh: Mesh
    topology: Topology
    links: MeshLinks
    options: PlanOptions
    prepared: Any
    choices: tuple[int, ...]
    deadline: float | None = None  # time.perf_counter() at which the time limit runs out
    time_limit: float | None = None  # the limit that set the deadline, for the report
    progress: bool = False  # a progress line on stderr while re-solving

    def node_index(self) -> dict[str, int]:
        """Op name → node index in the planner's order."""
        return {op.name: i for i, op in enumerate(self.prepared.ops)}

    def left_s(self) -> float | None:
        """Seconds left of the time limit (None without one; never negative)."""
        if self.deadline is None:
            return None
        return max(self.deadline - time.perf_counter(), 0.0)

    def out_of_time(self) -> bool:
        """Whether the time limit has run out: no further re-solve starts."""
        left = self.left_s()
        return left is not None and left <= 0.0

    def resolve(self, extra: Pins | None = None,
                op_pins: Mapping[str, str] | None = None,
                start: Sequence[int] | None = None) -> Outcome:
        """Re-solve with ``extra`` pins after the plan's own (they win) or ops forced, within
        what is left of the time limit, from ``start`` (:func:`single_change`) where it is a
        plan of the re-solved problem: the answer is then never dearer than that one change,
        even when the time limit cuts the search short."""
        pins = self.options.pins
        if extra is not None:
            pins = extra if pins is None else pins + extra
        options = replace(self.options, pins=pins, op_pins=op_pins, progress=False,
                          time_limit=self.left_s())
        try:
            answer = replan_prepared(self.prepared, options, records=False, start=start)
        except InfeasibleError as exc:
            return Outcome(total_s=None, peak_bytes=None, status=f"no plan fits: {exc}")
        except (AutoshardError, solver.SolverError) as exc:
            return Outcome(total_s=None, peak_bytes=None, status=f"impossible: {exc}")
        status = "optimal" if answer.optimal else f"gap {answer.gap:.2%}"
        return Outcome(total_s=answer.total_s, peak_bytes=answer.peak_bytes, status=status)


def resolve_each(ctx: ExplainContext,
                 forced: Sequence[tuple[Pins | None, Mapping[str, str] | None,
                                        Sequence[int] | None]],
                 what: str) -> list[Outcome | None]:
    """Re-solve each ``(extra pins, op pins, start)`` in order
    (:meth:`ExplainContext.resolve`) until the time limit runs out: None for those not
    re-solved. With ``ctx.progress``, a status line on stderr names the re-solve running
    (``what`` k/n) and its elapsed time."""
    outcomes: list[Outcome | None] = []
    for k, (pins, op_pins, start) in enumerate(forced, start=1):
        if ctx.out_of_time():
            outcomes.append(None)
            continue
        with status(f"re-solving {what} {k}/{len(forced)}", ctx.progress):
            outcomes.append(ctx.resolve(pins, op_pins, start))
    return outcomes


def single_change(ctx: ExplainContext, node: int, options: Sequence[int] | np.ndarray,
                  deltas: np.ndarray) -> tuple[int, ...]:
    """The plan's choices with op ``node`` switched to the cheapest of ``options`` by its
    ``deltas`` (its row of :func:`single_change_deltas`): the plan whose change is an
    alternative's single-change bound, and where its re-solve starts."""
    options = np.asarray(options, dtype=np.int64)
    best = int(options[np.argmin(deltas[options])])
    return tuple(best if i == node else c for i, c in enumerate(ctx.choices))


def time_limit_note(ctx: ExplainContext, done: int, planned: int) -> str:
    """What the report adds when the time limit stopped the re-solves (else '')."""
    if done >= planned or ctx.time_limit is None:
        return ""
    return (f"; the time limit ({ctx.time_limit:g} s, --time-limit) ran out after {done} of "
            f"those {planned}: the others show only their single-change bound")


def explain_context(plan: Plan, graph: OpGraph, *, topology: str | None = None,
                    link_overrides: Mapping[str, str] | None = None,
                    time_limit: float | None = None, started: float | None = None,
                    progress: bool = False) -> ExplainContext:
    """Rebuild the planning problem ``plan`` answers from the model ``graph`` it was made of.

    ``time_limit`` seconds, counted from ``started`` (a ``time.perf_counter()`` reading;
    default: when the context is ready), cover the re-solves the context is then asked for;
    ``progress`` shows a line on stderr while they run.

    Raises:
        autoshard.export.plan_view.PlanMismatchError: the plan is of another graph, mesh or
            link set (fingerprint), or names strategies the planner no longer enumerates.
        autoshard.errors.PlanRecordError: a tensor record is not what its op's strategy
            writes (a hand-edited plan.json).
    """
    full = planned_graph(plan, graph)
    mesh = Mesh(axes=tuple(plan.mesh))
    topo, links = plan_links(plan, mesh, topology, dict(link_overrides or {}))
    check_fingerprint(plan, full, mesh, topo, links)
    check_tensor_records(plan, full)  # explain the layouts the ops were priced in
    settings = plan.stats.get("settings", {})
    options = PlanOptions(
        memory_limit=plan.limit_bytes, reserve=float(plan.memory_breakdown.get("reserve", 0.0)),
        allow_uneven=bool(settings.get("allow_uneven", False)),
        backend=str(settings.get("backend", "auto")),
        gap=float(settings.get("gap", solver.OPTIMALITY_GAP)), model_name=plan.model,
        pins=pins_from_record(plan.pins, plan) if plan.pins is not None else None,
        # plans made before reshards were shared priced one per consumer edge
        share_reshards=bool(settings.get("share_reshards", False)),
        # plans made before the step model was recorded were priced as a plain sum
        step=StepOptions(micro_batches=int(settings.get("micro_batches", 1)),
                         overlap=Overlap(settings.get("overlap", "none")),
                         whole_gradients=(plan.pins or {}).get("gradient_sync") == "deferred"))
    prepared = replan(full, mesh, topo, links, options, prepare_only=True)
    begun = time.perf_counter() if started is None else started
    return ExplainContext(plan=plan, graph=full, mesh=mesh, topology=topo, links=links,
                          options=options, prepared=prepared,
                          choices=_choices(plan, prepared),
                          deadline=None if time_limit is None else begun + time_limit,
                          time_limit=time_limit, progress=progress)


def _choices(plan: Plan, prepared: Any) -> tuple[int, ...]:
    """The option index of every op's recorded strategy."""
    choices = []
    for op, strategies in zip(prepared.ops, prepared.strategies, strict=True):
        label = plan.ops[op.name].strategy
        labels = [s.label for s in strategies]
        if label not in labels:
            raise PlanMismatchError(f'op {op.name}: the plan\'s strategy "{label}" is not one '
                                    "this planner enumerates; re-plan with this version",
                                    expected=label, actual=", ".join(labels[:4]))
        choices.append(labels.index(label))
    return tuple(choices)


def single_change_deltas(ctx: ExplainContext) -> list[np.ndarray]:
    """Per node, the change in step time of switching it to each option with every other op
    kept (inf where impossible). The node's own pins are ignored (forcing an alternative
    replaces them); its neighbours keep their choices."""
    problem, x = ctx.prepared.problem, ctx.choices
    if problem.windows:
        return _evaluated_deltas(ctx)
    totals = [np.array(cost, dtype=np.float64) for cost in ctx.prepared.step.node_costs]
    for u, v, matrix in problem.edges:
        totals[v] += matrix[x[u], :]
        totals[u] += matrix[:, x[v]]
    deltas = []
    for vector, choice in zip(totals, x, strict=True):
        with np.errstate(invalid="ignore"):
            delta = vector - vector[choice]
        delta[~np.isfinite(vector)] = np.inf
        deltas.append(delta)
    return deltas


def _evaluated_deltas(ctx: ExplainContext) -> list[np.ndarray]:
    """``single_change_deltas`` when the problem has windows (not a sum over edges): each
    alternative priced by evaluating the whole step."""
    problem, x = ctx.prepared.problem, ctx.choices
    costs = ctx.prepared.step.node_costs
    base = problem.evaluate(x)
    deltas = []
    for i, vector in enumerate(costs):
        delta = np.full(vector.size, np.inf)
        for j in np.flatnonzero(np.isfinite(vector)):
            changed = list(x)
            changed[i] = int(j)
            delta[j] = problem.evaluate(changed) - base
        deltas.append(delta)
    return deltas


def inner_layers(blocks: tuple[tuple[int, ...], ...] | None) -> frozenset[int]:
    """The ops of every repeated layer but the first and the last. Why they stand for their
    pattern only when no other tensor can: the solver solves a chain of identical layers as
    one periodic problem, whose first and last layers may differ from the rest (they meet
    the embedding and the head); a pin in an inner layer breaks the chain and the whole
    model is solved as a graph (llama3-70b dp=8,tp=8: one such re-solve took minutes, against
    seconds for a pin in the last layer). The pinned tensor is named in the report, so the
    choice among equal bounds changes which tensor is shown, not what is claimed of it."""
    if blocks is None or len(blocks) < 3:
        return frozenset()
    return frozenset(i for block in blocks[1:-1] for i in block)


class WholeModelResolveWarning(UserWarning):
    """Re-solves that pin an op of an inner layer solve the whole model (see
    :func:`inner_layers`): the user is told before they start, with the way round."""


def warn_if_whole_model(ctx: ExplainContext, node: int, count: int,
                        output: int | None = None) -> None:
    """Warn (:class:`WholeModelResolveWarning`) when ``count`` re-solves will pin op ``node``
    (its output ``output``, for a tensor) inside the chain of identical layers. llama3-70b
    dp=8,tp=8, a tensor of layer 40: a re-solve took 85 s (its LP alone 52 s), so the
    default 23 of them ran past half an hour with only a status line on the screen."""
    blocks = ctx.prepared.blocks
    if count == 0 or node not in inner_layers(blocks):
        return
    block = next(b for b in blocks if node in b)
    ops = ctx.prepared.ops
    last = ops[blocks[-1][block.index(node)]]
    if output is None:
        kind, name, same = "op", ops[node].name, last.name
    else:
        kind, name, same = "tensor", ops[node].outputs[output], last.outputs[output]
    each = "the re-solve" if count == 1 else f"each of the {count} re-solves"
    warnings.warn(f"{kind} {name} is in layer {blocks.index(block)} of {len(blocks)} "
                  f"identical layers: pinning it breaks the chain, so {each} solves the whole "
                  "model, not one layer (85 s each on llama3-70b); pass --time-limit to bound "
                  "the command or --limit to re-solve fewer, or explain the same "
                  f"{kind} in the last layer ({same}), whose re-solves stay periodic",
                  WholeModelResolveWarning, stacklevel=3)
