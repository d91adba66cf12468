"""The planning pipeline: graph + mesh + topology → a certified, fully priced Plan.

Phases: enumerate each op's strategies (derived from its dimension signature, cached per
structurally identical op), price them (local roofline compute + intra-op collectives), price
every producer→consumer edge as a matrix of cheapest reshards, hand the numbers to
``solver.solve``, and decode the choice into a :class:`~autoshard.plan.Plan` in which every
priced reshard is emitted with its collectives and every emitted one was priced.

Conventions the plan states in its notes:
* graph inputs may arrive in any non-Partial sharding at no cost (their source op is free);
* parameters are placed by the plan: their sharding is a decision like any other;
* graph outputs are never left Partial: a strategy that would leave one Partial pays the
  reshard to the matching non-Partial sharding, and that reshard is emitted.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import solver
from autoshard.errors import MemoryTooSmallError, UsageError
from autoshard.planning.collector import fewer_collections
from autoshard.planning.decode import (
    decode_next_step,
    decode_reshards,
    op_record,
    output_reshards,
    spelling,
)
from autoshard.planning.edge_costs import Edge, edge_matrices, next_step_edges
from autoshard.planning.experts import expert_axes_filter
from autoshard.planning.hand_floor import HandPlan, best_hand_plan, search_share, with_hand_floor
from autoshard.planning.layers import repeated_blocks
from autoshard.planning.lean import prefer_less_compute
from autoshard.planning.memory import build_memory_model
from autoshard.planning.named import pin_set, strategy_pins
from autoshard.planning.node_costs import NodeTerms, node_terms, op_strategies, structure_key
from autoshard.planning.output_fix import output_fix
from autoshard.planning.pin_masks import Restriction
from autoshard.planning.pins import Pins
from autoshard.planning.progress import status
from autoshard.planning.record import Objective, Plan, TensorRecord
from autoshard.planning.shared_solve import SharedPricing
from autoshard.planning.step import Overlap, StepOptions
from autoshard.planning.step_parts import concurrent_seconds
from autoshard.planning.step_problem import step_problem, step_seconds
from autoshard.planning.throughput import throughput
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import Strategy
from costmodel import Link, Topology, format_bytes, peak_flops
from graphs import GraphError, Op, OpGraph, TensorRole
from graphs.training import RECOMPUTE_CHOICES, training_graph
from solver.windowed import EXACT_DEFAULT_S

logger = logging.getLogger(__name__)

NOTES = (
    "graph inputs may arrive in any non-Partial sharding at no cost",
    "parameters are placed by the plan (their sharding is a decision)",
    "graph outputs are never left Partial: the reduction is priced and emitted",
    "memory is the peak over a sequential schedule (topological order: forward, backward, "
    "optimizer) of resident parameters, optimizer state and inputs, live tensors in their "
    "producer's layout (parameter gradients in the optimizer's layout) and the running op's "
    "working set",
    "an optimizer step's updated values are resharded back to the layout their parameter or "
    "state is stored in (reshards to <next step>), so the plan is the same every step",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanOptions:
    """Knobs of one planning run (everything except the graph, mesh and topology)."""

    memory_limit: float | None = None
    reserve: float = 0.0
    time_limit: float | None = None
    allow_uneven: bool = False
    backend: str = "auto"
    model_name: str | None = None
    progress: bool = False
    gap: float = solver.OPTIMALITY_GAP
    exclude: Callable[[Op, Strategy], bool] | None = None
    pins: Pins | None = None
    op_pins: Mapping[str, str] | None = None
    step: StepOptions = field(default_factory=StepOptions)
    share_reshards: bool = False
    held_bytes: HeldBytes | None = None


HeldBytes = Callable[[OpGraph, Sequence[Op], Sequence[tuple[np.ndarray, ...]]],
                     Sequence[tuple[int, np.ndarray]]]
"""``held(graph, ops, out_bytes)``: ``(node, bytes per option)`` terms the memory constraint
adds at every step, from each node's per-output local bytes (see ``plan``'s ``held_bytes``)."""


def plan(
    graph: OpGraph,
    mesh: Mesh | str,
    *,
    topology: Topology | str = "dgx-h100",
    links: Mapping[str, str | Link] | None = None,
    memory_limit: float | None = None,
    time_limit: float | None = None,
    training: bool = False,
    optimizer: str = "adamw",
    recompute: str = "none",
    reserve: float = 0.0,
    allow_uneven: bool = False,
    backend: str = "auto",
    model_name: str | None = None,
    progress: bool = False,
    gap: float = solver.OPTIMALITY_GAP,
    pins: Pins | str | None = None,
    strategy: str | None = None,
    micro_batches: int = 1,
    overlap: Overlap | str = Overlap.OP,
    exclude: Callable[[Op, Strategy], bool] | None = None,
    expert_axes: Sequence[str] | None = None,
    share_reshards: bool = False,
    held_bytes: HeldBytes | None = None,
) -> Plan:
    """Plan the sharding of every tensor of ``graph`` on ``mesh``.

    Args:
        graph: the operator graph (forward only, or with backward and optimizer ops), e.g.
            ``graphs.zoo.build("gpt2", layers=2, batch=8, seq=512)`` or ``graphs.load(path)``.
        mesh: named mesh axes, major to minor: a :class:`Mesh` or its text, ``"dp=2,tp=4"``
            (:meth:`Mesh.parse`).
        topology: a preset name or a :class:`costmodel.Topology`.
        links: per-axis link overrides, e.g. ``{"dp": "ib", "tp": "alpha:5us,bw:450GB/s"}``.
        memory_limit: bytes per device; ``None`` uses the device's HBM capacity.
        time_limit: seconds for the solver (the search and, when the limit cuts it short,
            the hand plans of :mod:`.hand_floor`); the best plan found is returned with its gap.
        training: plan one training step. A forward-only graph is first extended with its
            backward and one ``optimizer`` step per parameter (:func:`graphs.training.
            training_graph`); a graph that already holds parameter gradients is planned as is.
        optimizer: "adamw" (fp32 master weights and moments) or "sgd", for ``training``.
        recompute: "none", "selective", "selective-op" (torchtitan's op-level policy) or
            "full" activation recomputation, for ``training``.
        reserve: bytes per device kept free (CUDA context, fragmentation); it is part of the
            reported peak and the solver fits the rest into ``memory_limit - reserve``.
        progress: show progress bars on stderr for phases longer than a second.
        gap: relative gap to the proven lower bound at which the solver may stop. The
            default proves the plan optimal; a what-if study may take 1e-3 (what sweeps use),
            which is far below what separates mesh shapes and spares most of a 3-axis solve.
        pins: layouts the plan must use (:mod:`autoshard.planning.pins`): a
            :class:`~autoshard.planning.pins.Pins`, or the path of a TOML pin file or a
            plan.json; everything else is optimised.
        strategy: a named hand plan (``ddp``, ``zero1``, ``zero2``, ``fsdp``, ``megatron``,
            ``megatron-sp``; :mod:`autoshard.planning.named`) to evaluate, applied before
            ``pins``; ``None`` or ``"auto"`` is the search.
        micro_batches: micro-batches per step (gradient accumulation); ``graph`` is one
            micro-batch (its activations are what memory holds). Compute and activation
            traffic run this many times, the optimizer step once (:mod:`.step`).
        overlap: how communication frameworks overlap with compute is priced
            (:class:`~autoshard.planning.step.Overlap`): ``"op"`` (the default) hides
            parameter gathers and gradient reductions behind the op they feed or came from,
            ``"layer"`` pools them per layer and phase (slower to prove), ``"none"`` adds
            every collective in full.
        exclude: ``exclude(op, strategy)`` True takes the strategy out of the search, for
            "what would the best plan be without X" questions (e.g. without ring attention);
            the plan is then optimal among the rest.
        expert_axes: shard every mixture-of-experts weight's expert dim over exactly these
            mesh axes (expert parallelism by request; by default the search decides), see
            :mod:`autoshard.planning.experts`.
        share_reshards: price one reshard per (tensor, target layout), shared by the
            consumers that read it (:mod:`autoshard.planning.shared_reshards`). Off by
            default for now: one reshard per consumer edge over-estimates a shared reshard
            but proves deep models faster (one quiet run each: llama3-8b training on
            dp=8,tp=8 1.9 s against 7.6 s, gpt2 12 layers on dp=2,tp=4 1.6 s against 5.4 s;
            llama3-70b on dp=8,tp=8 ~3.5 min with it on a loaded machine; all proven).
        held_bytes: bytes, linear in the choices, that the memory constraint adds at every
            step on top of the plan's own profile (the reported peak stays the profile's):
            how a pipeline's stage model is made to fit what a whole stage holds
            (:mod:`autoshard.planning.pipeline.stage_memory`).

    Returns:
        The :class:`~autoshard.plan.Plan`.

    Raises:
        autoshard.errors.AutoshardError subclasses: bad mesh or links, infeasible memory.
        TypeError: ``graph`` is not an :class:`OpGraph` or ``mesh`` not a Mesh or string.
    """
    graph, mesh = _check_graph(graph), _as_mesh(mesh)
    check_memory_limit(memory_limit)
    _check_reserve(reserve, memory_limit, topology)
    check_gap(gap)
    check_time_limit(time_limit)
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) \
            or micro_batches < 1:
        raise UsageError(f"micro_batches must be a positive integer, got {micro_batches!r}")
    forward = graph
    if training and not any(t.role is TensorRole.GRAD for t in graph.tensors.values()):
        graph = training_step_graph(graph, optimizer, recompute)
    topo = resolve_topology(topology)
    if expert_axes:
        exclude = _both(exclude, expert_axes_filter(graph, mesh, expert_axes))
    pinned = pin_set(strategy, pins, mesh)
    options = PlanOptions(memory_limit=memory_limit, reserve=float(reserve), time_limit=time_limit,
                          allow_uneven=allow_uneven, backend=backend, model_name=model_name,
                          progress=progress, gap=float(gap), exclude=exclude, pins=pinned,
                          share_reshards=share_reshards, held_bytes=held_bytes,
                          step=StepOptions(micro_batches=micro_batches,
                                           overlap=_overlap(overlap),
                                           whole_gradients=pinned is not None
                                           and pinned.gradient_sync == "deferred"))
    planner = _Planner(graph, mesh, topo, MeshLinks.build(mesh, topo, dict(links or {})),
                       options)
    planner.forward, planner.training = forward, training or graph is not forward
    return planner.run()


def _check_graph(graph: Any) -> OpGraph:
    if isinstance(graph, OpGraph):
        return graph
    hint = ""
    if isinstance(graph, str):
        hint = (f'; read it with graphs.load("{graph}")' if graph.endswith(".json") else
                f'; build it, e.g. graphs.zoo.build("{graph}", layers=2, batch=8, seq=512)')
    raise TypeError(f"plan(): graph must be an OpGraph (graphs.zoo.build(...), "
                    f"graphs.load(path) or an importer's), not {type(graph).__name__} "
                    f"{graph!r}"[:200] + hint)


def _as_mesh(mesh: Any) -> Mesh:
    if isinstance(mesh, Mesh):
        return mesh
    if isinstance(mesh, str):
        return Mesh.parse(mesh)
    raise TypeError(f'plan(): mesh must be a Mesh or its text like "dp=2,tp=4", '
                    f"not {type(mesh).__name__} {mesh!r}"[:200])


def replan(graph: OpGraph, mesh: Mesh, topology: Topology, links: MeshLinks,
           options: PlanOptions, *, prepare_only: bool = False) -> Any:
    """Plan with links already built (what ``explain`` re-solves with); ``prepare_only``
    returns the prepared planner instead (its strategies, costs and reshard matrices)."""
    planner = _Planner(graph, mesh, topology, links, options)
    if not prepare_only:
        return planner.run()
    with fewer_collections():
        return planner.prepare()


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """A plan's step time, peak memory per device and certificate without its records: what
    ``explain``'s re-solves read (decoding llama3-70b's records took a quarter of each)."""

    total_s: float
    peak_bytes: float
    optimal: bool
    gap: float


def replan_prepared(prepared: Any, options: PlanOptions, *, records: bool = True,
                    start: Sequence[int] | None = None) -> Plan | Answer:
    """Plan again with ``options`` that differ from the prepared planner's only in their pins,
    op pins, time limit or progress, reusing its strategies, prices, reshard matrices, memory
    model and step problem (none depends on those options): only the pins' masks and the
    solver's problem are rebuilt. What ``explain`` re-solves with: on llama3-70b a re-solve
    was otherwise mostly pricing. The plan is the one :func:`replan` makes with ``options``;
    pins that change the gradient sync (the memory model depends on it) are planned from
    scratch. Without ``records``, only the plan's :class:`Answer` (its objective is the
    decoded plan's step time, which the planner checks equal to 1e-9).

    ``start``: one option index per op (the prepared planner's order) of a plan the caller
    already has, e.g. ``explain``'s plan with one op switched to the alternative it asks
    about. Where it obeys the new pins and fits, the search starts from it
    (``solver.solve(incumbent=)``), so the answer is never dearer, even when the time limit
    cuts the search short: a pin inside a tied layer sends llama3-70b's re-solve to the
    whole 1 M-variable problem, whose LP alone takes longer than a re-solve's share of a
    time limit, and a search cut short before its first plan returned a step far dearer
    than the one-op change it was asked to improve on.

    Raises:
        ValueError: ``options`` differ in anything else.
    """
    if not isinstance(prepared, _Planner):
        raise TypeError(f"replan_prepared(): expected replan(prepare_only=True)'s planner, "
                        f"not {type(prepared).__name__}")
    if _deferred(prepared.options.pins) != _deferred(options.pins):
        return _Planner(prepared.graph, prepared.mesh, prepared.topology, prepared.links,
                        options).run(records=records)
    return prepared.repinned(options, start).run(prepared=True, records=records)


def _deferred(pins: Pins | None) -> bool:
    """Whether the pins hold gradients whole until the step's end (the memory model's
    ``deferred_gradients``)."""
    return pins is not None and pins.gradient_sync == "deferred"


def _overlap(value: Overlap | str) -> Overlap:
    try:
        return Overlap(value)
    except ValueError:
        raise UsageError(f"unknown overlap model {value!r}; choose one of "
                         f"{', '.join(o.value for o in Overlap)}") from None


def _both(first: Callable[[Op, Strategy], bool] | None,
          second: Callable[[Op, Strategy], bool]) -> Callable[[Op, Strategy], bool]:
    if first is None:
        return second
    return lambda op, strategy: first(op, strategy) or second(op, strategy)


def check_memory_limit(memory_limit: float | None) -> None:
    """A memory per device of zero holds no plan: said as such, naming the flag and its unit,
    rather than as a reserve that "leaves nothing of 0 B" (plan) or a row of infeasible points
    (sweep)."""
    if memory_limit is not None and not memory_limit > 0:
        raise UsageError(f"--memory {format_bytes(memory_limit)}: the memory per device must be "
                         "positive; pass bytes with a unit, e.g. --memory 80GiB, or omit "
                         "--memory for the device's HBM")


def _check_reserve(reserve: float, memory_limit: float | None, topology: Topology | str) -> None:
    limit = memory_limit
    if limit is None:
        limit = float(resolve_topology(topology).device.hbm_bytes)
    if reserve < 0 or reserve >= limit:
        raise UsageError(f"the memory reserve of {format_bytes(reserve)} leaves nothing of the "
                         f"{format_bytes(limit)} per device; lower --reserve or raise --memory")


MAX_GAP = 0.1


def check_gap(gap: float) -> None:
    """Below ``OPTIMALITY_GAP`` the solvers' own tolerances cannot deliver; above ``MAX_GAP``
    the plan says little about the mesh it was made for."""
    if not solver.OPTIMALITY_GAP <= gap <= MAX_GAP:
        raise UsageError(f"the gap {gap!r} is outside [{solver.OPTIMALITY_GAP:g}, {MAX_GAP:g}]; "
                         f"pass --gap as a fraction, e.g. 1e-3 for 0.1 %")


def check_time_limit(time_limit: float | None) -> None:
    """A time limit of zero or less leaves the solver no time to find a plan, let alone to
    bound one: refused, rather than returning an unproven plan with an infinite gap."""
    if time_limit is not None and not time_limit > 0:
        raise UsageError(f"the time limit {time_limit!r} s is not positive; pass --time-limit "
                         "as seconds greater than 0, or omit it to solve without a limit")


def training_step_graph(graph: OpGraph, optimizer: str, recompute: str) -> OpGraph:
    """``graph`` with its backward and optimizer steps; bad choices become UsageError."""
    if recompute not in RECOMPUTE_CHOICES:
        raise UsageError(f'unknown recompute "{recompute}"; choose one of '
                         f'{", ".join(RECOMPUTE_CHOICES)}')
    try:
        with fewer_collections():  # .collector: half of a 3-axis training graph's build
            return training_graph(graph, optimizer=optimizer, recompute=recompute)
    except GraphError as exc:
        raise UsageError(f"cannot build the training step of {graph.name}: {exc}") from None


class _Planner:
    """One planning run; holds the per-run caches so that identical ops cost once."""

    def __init__(self, graph: OpGraph, mesh: Mesh, topology: Topology, links: MeshLinks,
                 options: PlanOptions):
        self.graph, self.mesh, self.topology, self.links = graph, mesh, topology, links
        self.options = options
        # Local slices (R→S) are priced as a copy through HBM, as the reshard spec asks.
        self.hbm_bw = float(topology.device.hbm_bw_bytes_per_s)
        self.ops = graph.topo_ops()
        self.timings: dict[str, float] = {}
        self.forward, self.training = graph, False
        self.hand_floor: HandPlan | None = None  # the hand plan a cut-short search returned
        self.start: tuple[int, ...] | None = None  # the caller's plan (replan_prepared)
        self.began = time.perf_counter()  # when the time limit started (reset by run)

    def run(self, *, prepared: bool = False, records: bool = True) -> Any:
        """Prepare (unless ``prepared``: :meth:`repinned` did), solve and decode: the
        :class:`Plan`, or without ``records`` only its :class:`Answer`."""
        # --time-limit counts from here: pricing a 4-axis mesh can take a minute, and a limit
        # that covered only the solve let a 60 s plan run 150 s
        self.began = time.perf_counter()
        with fewer_collections():  # .collector: full collections cost ~5 % of a 3-axis plan
            return self._run(prepared, records)

    def _run(self, prepared: bool = False, records: bool = True) -> Any:
        if not prepared:
            self.prepare()
        nodes, edges, loops = self.nodes, self.edges, self.loops
        limit = self.options.memory_limit
        if limit is None:
            limit = float(self.topology.device.hbm_bytes)
        t2 = time.perf_counter()
        label = f"solving ({len(self.ops)} ops, {sum(len(s) for s in self.strategies)} options)"
        try:
            with status(label, self.options.progress):
                solution = self._solve(limit)
        except solver.NoFiniteOptionError as exc:
            if not self.masks:
                raise
            raise self.restriction.unreachable(exc.node) from None
        solution = self._no_slower_than_hand_plans(solution, limit)
        self.timings["solve_s"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        lean = prefer_less_compute(self.problem, solution.choices, self.strategies, nodes)
        if lean != solution.choices and self.pricing.converged:
            solution = dataclasses.replace(solution, choices=lean,
                                           objective=self.problem.evaluate(lean))
        if not records:  # the step time is the solver's objective (_check_objective)
            return Answer(total_s=float(solution.objective),
                          peak_bytes=float(self.memory.peak(solution.choices))
                          + self.options.reserve,
                          optimal=bool(solution.optimal), gap=float(solution.gap))
        result = self._decode(solution, nodes, edges, loops, limit)
        self.timings["decode_s"] = time.perf_counter() - t3
        return result

    def _hand_floor_may_apply(self) -> bool:
        """Whether a search the time limit cuts short is followed by the hand plans: a time
        limit, no pins, no shared reshards (:mod:`.hand_floor`)."""
        options = self.options
        return options.time_limit is not None and options.pins is None \
            and not self.pricing.shares

    def _search_time_limit(self) -> float | None:
        """The search's part of ``--time-limit``: all of it, less the hand plans' share
        when they may follow, so that search and hand plans together keep to the limit."""
        limit = self.options.time_limit
        if limit is None or not self._hand_floor_may_apply():
            return limit
        return search_share(limit)

    def _no_slower_than_hand_plans(self, solution: Any, limit: float) -> Any:
        """A search the time limit cut short answers with the cheapest named hand plan when
        that is cheaper (:mod:`.hand_floor`); any other answer (proven, or searched to a
        stated gap, or pinned) as it is. The hand plans get what is left of the time limit,
        which started with the run (pricing included)."""
        options = self.options
        if solution.status is not solver.SolveStatus.TIME_LIMIT \
                or not self._hand_floor_may_apply() or options.time_limit is None:
            return solution
        budget = limit - options.reserve

        def fits(choices: Sequence[int]) -> bool:
            return self.memory.constrained_peak(choices[:len(self.ops)]) <= budget

        left_s = options.time_limit - (time.perf_counter() - self.began)
        hand = best_hand_plan(self.problem, self.hand_restriction, fits, left_s,
                              options.backend)
        floored = with_hand_floor(solution, self.problem, hand)
        if floored is not solution:
            self.hand_floor = hand
        return floored

    def hand_restriction(self, name: str) -> Restriction:
        """What named hand plan ``name``'s pins leave of this plan's options (an
        :class:`AutoshardError` when the mesh cannot run it)."""
        return Restriction.build(self.graph, self.mesh, self.ops, self.strategies, self.nodes,
                                 [*self.edges, *self.loops], self.links, self.hbm_bw,
                                 strategy_pins(name, self.mesh))

    def prepare(self) -> _Planner:
        """Strategies, their prices, the reshard matrices, the memory model, the pins' masks
        and the step's problem: everything the solver is given. Sets ``strategies``,
        ``nodes``, ``edges``, ``loops``, ``costs`` (pinned-out options at inf), ``masks``,
        ``memory``, ``blocks``, ``step`` and ``problem`` (what the solver gets: the step's
        costs, pinned-out options at inf)."""
        t0 = time.perf_counter()
        self.strategies = [self._allowed(op, op_strategies(self.graph, op, self.mesh,
                                                           self.options.allow_uneven))
                           for op in self._progress(self.ops, "enumerate")]
        self.timings["enumerate_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        nodes = [node_terms(self.graph, op, strats, self.mesh, self.topology, self.links)
                 for op, strats in self._progress(
                     list(zip(self.ops, self.strategies, strict=True)), "price ops")]
        with status("pricing reshards", self.options.progress):
            edges = edge_matrices(self.graph, self.ops, self.strategies, self.links,
                                  self.hbm_bw)
        loops = next_step_edges(self.graph, self.ops, self.strategies, self.links,
                                   self.hbm_bw)
        pins = self.options.pins
        self.memory = build_memory_model(
            self.graph, self.ops, [n.memory for n in nodes], [n.in_bytes for n in nodes],
            [n.out_bytes for n in nodes],
            deferred_gradients=_deferred(pins))
        if self.options.held_bytes is not None:
            self.memory = dataclasses.replace(self.memory, held=tuple(self.options.held_bytes(
                self.graph, self.ops, [n.out_bytes for n in nodes])))
        self.costs = self._restrict(nodes, [*edges, *loops])
        self.timings["cost_s"] = time.perf_counter() - t1
        self.blocks = repeated_blocks(
            [op.name for op in self.ops],
            [(structure_key(self.graph, op), len(s))
             for op, s in zip(self.ops, self.strategies, strict=True)])
        self.nodes, self.edges, self.loops = nodes, edges, loops
        # shares are looked for only when they will be priced (--share-reshards)
        self.step = step_problem(self.graph, self.ops, self.strategies, nodes, edges, loops,
                                 self.links, self.hbm_bw, self.options.step,
                                 shares=self.options.share_reshards)
        self._build_problem()
        return self

    def repinned(self, options: PlanOptions, start: Sequence[int] | None = None
                 ) -> _Planner:
        """A copy of this prepared planner with other pins (:func:`replan_prepared`): the
        prices, reshard matrices, memory model and step problem are shared, the masks and
        the solver's problem rebuilt; ``start`` is the plan its search starts from."""
        same = ("pins", "op_pins", "time_limit", "progress")
        differs = [f.name for f in dataclasses.fields(PlanOptions) if f.name not in same
                   and getattr(options, f.name) is not getattr(self.options, f.name)
                   and getattr(options, f.name) != getattr(self.options, f.name)]
        if differs or _deferred(self.options.pins) != _deferred(options.pins):
            what = ", ".join(differs) or "the gradient sync (pins' gradient_sync)"
            raise ValueError(f"replan_prepared(): the options differ in {what}, which the "
                             f"prepared planner depends on; use replan()")
        other = copy.copy(self)
        other.options, other.timings, other.hand_floor = options, {}, None  # nothing priced
        other.start = None if start is None else tuple(int(c) for c in start)
        other.costs = other._restrict(self.nodes, [*self.edges, *self.loops])
        other._build_problem()
        return other

    def _build_problem(self) -> None:
        """The solver's problem from the step's costs and the pins' masks (``costs``)."""
        # the pins' excluded options stay impossible (self.costs has them at inf)
        costs = [np.where(np.isfinite(pinned), cost, np.inf)
                 for pinned, cost in zip(self.costs, self.step.node_costs, strict=True)]
        # shared reshards (one per tensor and layout) start relaxed (.shared_solve)
        self.pricing = SharedPricing(step=self.step, edges=self.edges,
                                     strategies=self.strategies,
                                     op_costs=costs, names=[op.name for op in self.ops],
                                     blocks=self.blocks, gap=self.options.gap)
        self.problem = self.pricing.problem()

    def _restrict(self, nodes: list[NodeTerms], edges: list[Edge]) -> list[np.ndarray]:
        """Node costs with the options the pins exclude at inf (unchanged without pins)."""
        self.restriction = Restriction.build(self.graph, self.mesh, self.ops, self.strategies,
                                             nodes, edges, self.links, self.hbm_bw,
                                             self.options.pins, self.options.op_pins)
        self.pinned, self.masks = self.restriction.pinned, self.restriction.masks
        return self.restriction.costs

    def _allowed(self, op: Op, strategies: tuple[Strategy, ...]) -> tuple[Strategy, ...]:
        exclude = self.options.exclude
        if exclude is None:
            return strategies
        kept = tuple(s for s in strategies if not exclude(op, s))
        if not kept:
            raise UsageError(f'the exclusion leaves op "{op.name}" ({op.kind}) no strategy; '
                             "exclude fewer strategies")
        return kept

    def _progress(self, items: Any, phase: str) -> Any:
        """A progress bar on stderr when asked (the CLI asks only on a terminal)."""
        if not self.options.progress:
            return items
        from tqdm import tqdm

        return tqdm(items, desc=phase, unit="op", leave=False, file=sys.stderr,
                    mininterval=0.5, delay=1.0)

    def _solve(self, limit: float) -> Any:
        """Solve without the memory rows first: when that optimum fits, it is the optimum of
        the constrained problem too, found at a fraction of the cost (the rows couple every
        parameter with every op and slow the ILP down ~3x on GPT-2). Otherwise add one row
        per schedule step that could exceed the budget (``limit - reserve``).

        When some step could exceed the budget, the free solve stops as soon as its best
        plan does not fit (``stop_when``): from then on only its bound is of use, and the
        time limit is the constrained solve's (llama3.1-405b on dp=8,fsdp=8,tp=8: the free
        solve ran to the limit, its plan did not fit, and the constrained one, given
        0.01 s, took 300 s more)."""
        options = self.options
        budget = limit - options.reserve
        start = self.began  # the limit holds for pricing and solving together
        time_limit = self._search_time_limit()  # the hand plans' share kept back

        def remaining() -> float | None:  # the time limit covers every solve, not each
            if time_limit is None:
                return None
            return max(time_limit - (time.perf_counter() - start), 0.01)

        def out_of_time() -> bool:  # no further shared-reshard round (.shared_solve)
            return time_limit is not None and time.perf_counter() - start >= time_limit

        def over(choices: tuple[int, ...]) -> bool:
            return self.memory.constrained_peak(choices[:len(self.ops)]) > budget

        stop_when = over if self.memory.may_exceed(budget) else None

        start_fits = self.start is not None and len(self.start) == len(self.ops) \
            and self.memory.constrained_peak(self.start) <= budget

        def solve(p: solver.ChoiceProblem, incumbent: tuple[int, ...] | None, lazy: bool,
                  provisional: bool, **more: Any) -> solver.Solution:
            # what .shared_solve asks of each solve: a round's (lazy), a provisional answer
            if incumbent is None and start_fits and solver.plan_error(p, self.start) is None:
                incumbent = self.start  # obeys the new pins (explain's single change)
            return solver.solve(p, time_limit=remaining(), backend=options.backend,
                                gap=options.gap, incumbent=incumbent, early_look=not lazy,
                                provisional=provisional, **more)

        free, self.problem = self.pricing.solve(
            lambda p: p, lambda *args: solve(*args, stop_when=stop_when), out_of_time,
            timed=time_limit is not None, enough=stop_when)
        if self.memory.constrained_peak(free.choices) <= budget:
            return free
        rows = self.memory.rows(budget)  # once: each shared-reshard round reuses them

        def constrained(p: solver.ChoiceProblem) -> solver.ChoiceProblem:
            return solver.ChoiceProblem(node_costs=p.node_costs, edges=p.edges,
                                        liveness=rows, memory_limit=budget,
                                        blocks=p.blocks, windows=p.windows)

        try:
            # the unconstrained optimum is a proven lower bound of the constrained problem
            answer, self.problem = self.pricing.solve(
                constrained, lambda p, *args: solve(
                    p, *args, known_bound=free.bound,
                    free_choices=free.choices if len(free.choices) == p.num_nodes else None),
                out_of_time, timed=time_limit is not None)
            return answer
        except solver.Infeasible as exc:
            problem = constrained(self.pricing.problem())
            if self.masks:  # blame the pins only when some plan fits without them
                unpinned = self.restriction.unpinned_infeasible(
                    problem, options.backend, options.gap, self.memory.constrained_peak,
                    remaining())
                if unpinned is None:
                    raise self.restriction.memory_error(float(exc.min_peak) + options.reserve,
                                                        float(limit), exact=exc.exact) from None
                exc = unpinned
            found = None if exc.found_peak is None else exc.found_peak + options.reserve
            raise MemoryTooSmallError(needed_bytes=float(exc.min_peak) + options.reserve,
                                      limit_bytes=float(limit), mesh=str(self.mesh),
                                      exact=exc.exact, found_bytes=found) from None

    def _decode(self, solution: Any, nodes: list[NodeTerms], edges: list[Edge],
                loops: list[Edge], limit: float) -> Plan:
        op_choices = solution.choices[:len(self.ops)]  # the rest: shared reshards' nodes
        chosen: list[Strategy] = [s[c] for s, c in
                                  zip(self.strategies, op_choices, strict=True)]
        op_records = {}
        counts, m = self.step.node_counts, self.options.step.micro_batches
        for op, node, strat, choice, count in zip(self.ops, nodes, chosen, op_choices,
                                                  counts, strict=True):
            op_records[op.name] = op_record(self.graph, op, node, strat, int(choice),
                                            self.links, count)
        roles = self.step.roles
        reshards = decode_reshards(self.graph, self.ops, chosen, edges, self.links,
                                   self.hbm_bw, roles[:len(edges)], m, self.step.shares)
        reshards.extend(output_reshards(self.graph, self.ops, chosen, self.links,
                                        self.hbm_bw, counts))
        reshards.extend(decode_next_step(self.graph, self.ops, chosen, loops, self.links,
                                         self.hbm_bw, roles[len(edges):], m))
        tensors = _tensor_records(self.graph, self.ops, chosen, self.links, self.hbm_bw)
        # a reshard's local steps move no bytes: device work, counted as compute
        compute = sum(r.count * r.compute_s for r in op_records.values()) + sum(
            r.count * r.local_seconds for r in reshards)
        comm = sum(r.count * r.comm_s for r in op_records.values()) + sum(
            r.count * r.link_seconds for r in reshards)
        total = step_seconds(self.ops, op_records, reshards, self.options.step)
        _check_objective(total, solution.objective)
        peak = self.memory.peak(solution.choices) + self.options.reserve
        breakdown = self.memory.breakdown(solution.choices)
        breakdown["reserve"] = self.options.reserve
        # by difference, so a plan with nothing overlapped says 0 exactly, not rounding noise;
        # what ran beside another axis's stream is not hidden behind compute (:mod:`.step_parts`)
        overlapped = any(r.overlap for r in reshards)
        concurrent = concurrent_seconds(reshards, m) if overlapped else 0.0
        hidden = max(compute + comm - total - concurrent, 0.0) if overlapped else 0.0
        objective = Objective(
            total_s=total, compute_s=compute, comm_s=comm,
            lower_bound_s=float(min(solution.bound, total)), optimal=bool(solution.optimal),
            gap=float(solution.gap), status=str(solution.status.name).lower(),
            solve_s=self.timings.get("solve_s", 0.0), hidden_s=hidden,
            concurrent_s=concurrent, micro_batches=m)
        return Plan(
            model=self.options.model_name or self.graph.name,
            mesh=tuple(zip(self.mesh.axis_names, self.mesh.axis_sizes, strict=True)),
            topology=self.topology.name,
            links=tuple(self.links.describe()),
            objective=objective,
            peak_bytes_per_device=peak,
            limit_bytes=limit,
            memory_breakdown=dict(sorted(breakdown.items())),
            tensors=tensors, ops=op_records, reshards=tuple(reshards),
            fingerprint=fingerprint(self.graph, self.mesh, self.topology, self.links),
            notes=NOTES + self._solver_notes(solution),
            stats={**{k: round(v, 6) for k, v in self.timings.items()},
                   "ops": len(self.ops), "options": int(sum(len(s) for s in self.strategies)),
                   "edges": len(edges), "solver": solution.stats.backend,
                   **({"shared_reshards": len(self.pricing.shares),
                       "shared_exact": len(self.pricing.exact)}
                      if self.pricing.shares else {}),
                   "layers": 0 if self.blocks is None else len(self.blocks),
                   "settings": {"allow_uneven": self.options.allow_uneven,
                                "gap": self.options.gap, "backend": self.options.backend,
                                "overlap": self.options.step.overlap.value,
                                "micro_batches": self.options.step.micro_batches,
                                "share_reshards": self.options.share_reshards},
                   **({"pinned_tensors": len(self.pinned)} if self.pinned else {})},
            pins=None if self.options.pins is None else self.options.pins.to_dict(),
            throughput=self._throughput(total),
            model_parameters=sum(math.prod(t.shape) for t in self.forward.tensors.values()
                                 if t.role is TensorRole.PARAM),
        )

    def _throughput(self, step_s: float) -> dict[str, Any] | None:
        params = [t for t in self.forward.tensors.values() if t.role is TensorRole.PARAM]
        dtype = params[0].dtype.value if params else "f32"
        return throughput(self.forward, step_s=step_s, devices=self.mesh.size,
                          peak_flops_per_s=peak_flops(dtype, self.topology.device),
                          micro_batches=self.options.step.micro_batches,
                          training=self.training)

    def _solver_notes(self, solution: Any) -> tuple[str, ...]:
        notes = []
        pins = self.options.pins
        if pins is not None:
            notes.append(f"{len(self.pinned)} tensors pinned by {', '.join(pins.sources)}; the "
                         f"plan is optimal among the plans that keep those layouts")
            if pins.gradient_sync == "deferred":
                notes.append("gradients are held whole as produced and accumulate whole over "
                             "the micro-batches; each is reduced once per step, into the layout "
                             "the optimizer step reads (ZeRO-1, gradient_sync = deferred)")
        if solution.restricted:
            notes.append(f"search restricted: {solution.restricted}; the lower bound and gap "
                         f"are those of the unrestricted problem")
        spent = self.timings.get("enumerate_s", 0.0) + self.timings.get("cost_s", 0.0)
        limit = self.options.time_limit
        if limit is not None and spent > limit / 2:
            notes.append(f"pricing the options took {spent:.1f} s of the {limit:g} s time "
                         f"limit, which covers pricing and search; raise --time-limit for a "
                         f"longer search")
        if limit is None and solution.status is solver.SolveStatus.TIME_LIMIT \
                and self.problem.windows:
            notes.append(f"without --time-limit the search of the overlap windows stops its "
                         f"exact phase after {EXACT_DEFAULT_S:g} s (uncut, it ran over 600 s "
                         f"on GPT-2); the plan is the best found, with its gap; pass "
                         f"--time-limit S to search longer")
        if self.hand_floor is not None:
            notes.append(f"the time limit cut the search short at a plan slower than hand plan "
                         f"{self.hand_floor.name} (--strategy {self.hand_floor.name}), which is "
                         f"returned; the lower bound and gap are the search's")
        if self.options.gap > solver.OPTIMALITY_GAP:
            notes.append(f"solved to a relative gap of {self.options.gap:g} (--gap), not to "
                         f"proven optimality")
        return tuple(notes)


def _tensor_records(graph: OpGraph, ops: list[Any], chosen: list[Strategy], links: MeshLinks,
                    hbm_bw: float | None) -> dict[str, TensorRecord]:
    records: dict[str, TensorRecord] = {}
    # identical layers share their strategies' sharding objects: each is spelled once (the
    # sharding is kept in the value, so its id cannot be reused while the dict lives)
    spelled: dict[int, tuple[TensorSharding, tuple[str, ...], Any, str | None]] = {}
    for op, strat in zip(ops, chosen, strict=True):
        for name, sharding in zip(op.outputs, strat.outputs, strict=True):
            tensor = graph.tensors[name]
            if tensor.role is TensorRole.OUTPUT:
                sharding, _ = output_fix(sharding, tensor.shape, tensor.dtype.itemsize, links,
                                            hbm_bw)
            spelled_as = spelled.get(id(sharding))
            if spelled_as is None:
                spelled_as = spelled[id(sharding)] = (sharding, *spelling(sharding))
            records[name] = TensorRecord(
                shape=tensor.shape, dtype=tensor.dtype.value, role=tensor.role.value,
                placements=spelled_as[1], partition_spec=spelled_as[2], sdy=spelled_as[3])
    return {name: records[name] for name in graph.tensors if name in records}


def _check_objective(total: float, solver_objective: float) -> None:
    if not np.isclose(total, solver_objective, rtol=1e-9, atol=1e-15):
        msg = (f"decoded plan costs {total!r} s but the solver's objective is "
               f"{solver_objective!r} s: a priced cost was not emitted or vice versa")
        raise AssertionError(msg)


def fingerprint(graph: OpGraph, mesh: Mesh, topology: Topology, links: MeshLinks) -> str:
    """A digest of everything the plan depends on, so export/verify can refuse a mismatch."""
    payload = json.dumps({"graph": graph.to_dict(), "mesh": repr(mesh),
                          "topology": repr(topology), "links": links.describe()},
                         sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(payload.encode()).hexdigest()
