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

import hashlib
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import solver
from autoshard.errors import MemoryTooSmallError, UsageError
from autoshard.planning.decode import (
    decode_next_step,
    decode_reshards,
    op_record,
    output_reshards,
    partition_spec_or_none,
    sdy_string,
)
from autoshard.planning.edge_costs import Edge, edge_matrices, next_step_edges
from autoshard.planning.experts import expert_axes_filter
from autoshard.planning.layers import repeated_blocks
from autoshard.planning.memory import build_memory_model
from autoshard.planning.node_costs import NodeTerms, node_terms, op_strategies, structure_key
from autoshard.planning.output_fix import output_fix
from autoshard.planning.record import Objective, Plan, TensorRecord
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.sharding.mesh import Mesh
from autoshard.strategies.derive import Strategy
from costmodel import Link, Topology, format_bytes
from graphs import GraphError, Op, OpGraph, TensorRole
from graphs.training import RECOMPUTE_CHOICES, training_graph

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


def plan(
    graph: OpGraph,
    mesh: Mesh,
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
    exclude: Callable[[Op, Strategy], bool] | None = None,
    expert_axes: Sequence[str] | None = None,
) -> Plan:
    """Plan the sharding of every tensor of ``graph`` on ``mesh``.

    Args:
        graph: the operator graph (forward only, or with backward and optimizer ops).
        mesh: named mesh axes, major to minor.
        topology: a preset name or a :class:`costmodel.Topology`.
        links: per-axis link overrides, e.g. ``{"dp": "ib", "tp": "alpha:5us,bw:450GB/s"}``.
        memory_limit: bytes per device; ``None`` uses the device's HBM capacity.
        time_limit: seconds for the solver; the best plan found is returned with its gap.
        training: plan one training step. A forward-only graph is first extended with its
            backward and one ``optimizer`` step per parameter (:func:`graphs.training.
            training_graph`); a graph that already holds parameter gradients is planned as is.
        optimizer: "adamw" (fp32 master weights and moments) or "sgd", for ``training``.
        recompute: "none", "selective" or "full" activation recomputation, for ``training``.
        reserve: bytes per device kept free (CUDA context, fragmentation); it is part of the
            reported peak and the solver fits the rest into ``memory_limit - reserve``.
        progress: show progress bars on stderr for phases longer than a second.
        gap: relative gap to the proven lower bound at which the solver may stop. The
            default proves the plan optimal; a what-if study may take 1e-3 (what sweeps use),
            which is far below what separates mesh shapes and spares most of a 3-axis solve.
        exclude: ``exclude(op, strategy)`` True takes the strategy out of the search, for
            "what would the best plan be without X" questions (e.g. without ring attention);
            the plan is then optimal among the rest.
        expert_axes: shard every mixture-of-experts weight's expert dim over exactly these
            mesh axes (expert parallelism by request; by default the search decides), see
            :mod:`autoshard.planning.experts`.

    Returns:
        The :class:`~autoshard.plan.Plan`.

    Raises:
        autoshard.errors.AutoshardError subclasses: bad mesh or links, infeasible memory.
    """
    _check_reserve(reserve, memory_limit, topology)
    check_gap(gap)
    if training and not any(t.role is TensorRole.GRAD for t in graph.tensors.values()):
        graph = training_step_graph(graph, optimizer, recompute)
    topo = resolve_topology(topology)
    if expert_axes:
        exclude = _both(exclude, expert_axes_filter(graph, mesh, expert_axes))
    options = PlanOptions(memory_limit=memory_limit, reserve=float(reserve), time_limit=time_limit,
                          allow_uneven=allow_uneven, backend=backend, model_name=model_name,
                          progress=progress, gap=float(gap), exclude=exclude)
    return _Planner(graph, mesh, topo, MeshLinks.build(mesh, topo, dict(links or {})),
                    options).run()


def _both(first: Callable[[Op, Strategy], bool] | None,
          second: Callable[[Op, Strategy], bool]) -> Callable[[Op, Strategy], bool]:
    if first is None:
        return second
    return lambda op, strategy: first(op, strategy) or second(op, strategy)


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


def training_step_graph(graph: OpGraph, optimizer: str, recompute: str) -> OpGraph:
    """``graph`` with its backward and optimizer steps; bad choices become UsageError."""
    if recompute not in RECOMPUTE_CHOICES:
        raise UsageError(f'unknown recompute "{recompute}"; choose one of '
                         f'{", ".join(RECOMPUTE_CHOICES)}')
    try:
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

    def run(self) -> Plan:
        t0 = time.perf_counter()
        self.strategies = [self._allowed(op, op_strategies(self.graph, op, self.mesh,
                                                           self.options.allow_uneven))
                           for op in self._progress(self.ops, "enumerate")]
        self.timings["enumerate_s"] = time.perf_counter() - t0
        t1 = time.perf_counter()
        nodes = [node_terms(self.graph, op, strats, self.mesh, self.topology, self.links)
                 for op, strats in self._progress(
                     list(zip(self.ops, self.strategies, strict=True)), "price ops")]
        edges = edge_matrices(self.graph, self.ops, self.strategies, self.links,
                                 self.hbm_bw)
        loops = next_step_edges(self.graph, self.ops, self.strategies, self.links,
                                   self.hbm_bw)
        self.memory = build_memory_model(self.graph, self.ops, [n.memory for n in nodes],
                                         [n.in_bytes for n in nodes],
                                         [n.out_bytes for n in nodes])
        self.timings["cost_s"] = time.perf_counter() - t1
        limit = self.options.memory_limit
        if limit is None:
            limit = float(self.topology.device.hbm_bytes)
        self.blocks = repeated_blocks(
            [op.name for op in self.ops],
            [(structure_key(self.graph, op), len(s))
             for op, s in zip(self.ops, self.strategies, strict=True)])
        problem = solver.ChoiceProblem(
            node_costs=[n.cost for n in nodes],
            edges=[(u, v, m) for u, v, m, _ in (*edges, *loops)],
            blocks=self.blocks,
        )
        t2 = time.perf_counter()
        solution = self._solve(problem, limit)
        self.timings["solve_s"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        result = self._decode(solution, nodes, edges, loops, limit)
        self.timings["decode_s"] = time.perf_counter() - t3
        return result

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

    def _solve(self, relaxed: solver.ChoiceProblem, limit: float) -> Any:
        """Solve without the memory rows first: when that optimum fits, it is the optimum of
        the constrained problem too, found at a fraction of the cost (the rows couple every
        parameter with every op and slow the ILP down ~3x on GPT-2). Otherwise add one row
        per schedule step that could exceed the budget (``limit - reserve``)."""
        options = self.options
        budget = limit - options.reserve
        start = time.perf_counter()
        free = solver.solve(relaxed, time_limit=options.time_limit, backend=options.backend,
                            gap=options.gap)
        if self.memory.peak(free.choices) <= budget:
            return free
        problem = solver.ChoiceProblem(node_costs=relaxed.node_costs, edges=relaxed.edges,
                                       liveness=self.memory.rows(budget), memory_limit=budget,
                                       blocks=relaxed.blocks)
        remaining = None  # the time limit covers both solves, not each
        if options.time_limit is not None:
            remaining = max(options.time_limit - (time.perf_counter() - start), 0.01)
        try:
            # the unconstrained optimum is a proven lower bound of the constrained problem
            return solver.solve(problem, time_limit=remaining, backend=options.backend,
                                known_bound=free.bound, gap=options.gap)
        except solver.Infeasible as exc:
            raise MemoryTooSmallError(needed_bytes=float(exc.min_peak) + options.reserve,
                                      limit_bytes=float(limit), mesh=str(self.mesh)) from None

    def _decode(self, solution: Any, nodes: list[NodeTerms], edges: list[Edge],
                loops: list[Edge], limit: float) -> Plan:
        chosen: list[Strategy] = [s[c] for s, c in
                                  zip(self.strategies, solution.choices, strict=True)]
        op_records = {}
        for op, node, strat, choice in zip(self.ops, nodes, chosen, solution.choices,
                                           strict=True):
            op_records[op.name] = op_record(self.graph, op, node, strat, int(choice),
                                                self.links)
        reshards = decode_reshards(self.graph, self.ops, chosen, edges, self.links,
                                      self.hbm_bw)
        reshards.extend(output_reshards(self.graph, self.ops, chosen, self.links,
                                          self.hbm_bw))
        reshards.extend(decode_next_step(self.graph, self.ops, chosen, loops, self.links,
                                            self.hbm_bw))
        tensors = _tensor_records(self.graph, self.ops, chosen, self.links, self.hbm_bw)
        compute = sum(r.compute_s for r in op_records.values())
        comm = sum(r.comm_s for r in op_records.values()) + sum(r.seconds for r in reshards)
        total = compute + comm
        _check_objective(total, solution.objective)
        peak = self.memory.peak(solution.choices) + self.options.reserve
        breakdown = self.memory.breakdown(solution.choices)
        breakdown["reserve"] = self.options.reserve
        objective = Objective(
            total_s=total, compute_s=compute, comm_s=comm,
            lower_bound_s=float(min(solution.bound, total)), optimal=bool(solution.optimal),
            gap=float(solution.gap), status=str(solution.status.name).lower(),
            solve_s=self.timings.get("solve_s", 0.0))
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
                   "layers": 0 if self.blocks is None else len(self.blocks)},
        )

    def _solver_notes(self, solution: Any) -> tuple[str, ...]:
        notes = []
        if solution.restricted:
            notes.append(f"search restricted: {solution.restricted}; the lower bound and gap "
                         f"are those of the unrestricted problem")
        if self.options.gap > solver.OPTIMALITY_GAP:
            notes.append(f"solved to a relative gap of {self.options.gap:g} (--gap), not to "
                         f"proven optimality")
        return tuple(notes)


def _tensor_records(graph: OpGraph, ops: list[Any], chosen: list[Strategy], links: MeshLinks,
                    hbm_bw: float | None) -> dict[str, TensorRecord]:
    records: dict[str, TensorRecord] = {}
    for op, strat in zip(ops, chosen, strict=True):
        for name, sharding in zip(op.outputs, strat.outputs, strict=True):
            tensor = graph.tensors[name]
            if tensor.role is TensorRole.OUTPUT:
                sharding, _ = output_fix(sharding, tensor.shape, tensor.dtype.itemsize, links,
                                            hbm_bw)
            records[name] = TensorRecord(
                shape=tensor.shape, dtype=tensor.dtype.value, role=tensor.role.value,
                placements=tuple(str(p) for p in sharding.placements),
                partition_spec=partition_spec_or_none(sharding),
                sdy=sdy_string(sharding))
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
