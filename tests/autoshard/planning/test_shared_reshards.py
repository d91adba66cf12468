"""One reshard per (tensor, target layout), shared by the consumers that read it (issue 30).

The oracle is a brute force over every plan of a small graph that prices the reshards its own
way: the set of distinct (tensor, source layout, target layout) moves the plan needs, each
priced once by ``find_reshard`` (XLA's SPMD partitioner reuses a reshard per target sharding:
``ReshardCache::PerHloCache::reshard_cache`` in openxla/xla xla/service/spmd/spmd_partitioner.h),
never the solver's matrices.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

import autoshard
import solver
from autoshard.planning.pins import pins_from_plan
from autoshard.planning.planner import PlanOptions, replan
from autoshard.planning.step import Overlap, StepOptions
from autoshard.reshard.find import find_reshard
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.verify import emulate
from graphs import DType, OpGraph, zoo
from graphs.training import training_graph


def fanout_graph(readers: int = 2) -> OpGraph:
    """h = x·w0, read by ``readers`` matmuls: when w0 is row-sharded h is Partial and every
    reader needs the same reduction. Two readers take the pair node, three the producer copy
    (:mod:`autoshard.planning.shared_reshards`)."""
    g = OpGraph(name="fanout")
    x = g.input("x", (8, 64, 512), DType.BF16)
    w0 = g.param("w0", (512, 512), DType.BF16)
    h = g.op("einsum", [x, w0], equation="bsh,hf->bsf", name="mm0", outputs=["h"])
    outs = []
    for k in range(1, readers + 1):
        w = g.param(f"w{k}", (512, 256), DType.BF16)
        outs.append(g.op("einsum", [h, w], equation="bsf,fo->bso", name=f"mm{k}",
                         outputs=[f"o{k}"]))
    y = outs[0]
    for k, other in enumerate(outs[1:]):
        y = g.op("add", [y, other], name=f"sum{k}", outputs=[f"y{k}"])
    g.mark_output(y)
    return g


def _replicated(sharding) -> bool:
    return all(str(p) == "R" for p in sharding.placements)


def _forced(op, strategy) -> bool:
    """Excluded strategies: mm0 never leaves h replicated and its readers read it only
    replicated, so every plan moves h, once (shared) or once per reader (per edge); the
    sums and the readers' weights stay replicated (fewer plans to enumerate)."""
    if op.name == "mm0":
        return _replicated(strategy.outputs[0])
    if op.name in ("mm1", "mm2", "mm3"):
        return not _replicated(strategy.inputs[0])
    if op.name.startswith("sum") or op.name in ("w1", "w2", "w3"):  # a smaller brute force
        return not _replicated(strategy.outputs[0])
    return False


def _free_readers(op, strategy) -> bool:
    """The readers choose any layout of h (some plans read it in two layouts, one in one):
    only the sums and the weights stay replicated, and mm0 never leaves h replicated."""
    if op.name in ("mm1", "mm2", "mm3"):
        return False
    return _forced(op, strategy)


def _prepared_free_readers(graph: OpGraph, mesh: autoshard.Mesh):
    """The planner prepared (not solved) with shared reshards and free readers."""
    topo = resolve_topology("dgx-h100")
    return replan(graph, mesh, topo, MeshLinks.build(mesh, topo, {}),
                  PlanOptions(step=StepOptions(overlap=Overlap.NONE), exclude=_free_readers,
                              share_reshards=True),
                  prepare_only=True)


def _brute_force(graph: OpGraph, mesh: autoshard.Mesh, shared: bool,
                 exclude=_forced) -> float:
    """Min over every plan of: the ops' step costs plus each needed reshard, priced once per
    (tensor, src, dst) when ``shared``, once per consumer edge otherwise."""
    topo = resolve_topology("dgx-h100")
    links = MeshLinks.build(mesh, topo, {})
    options = PlanOptions(step=StepOptions(overlap=Overlap.NONE), exclude=exclude,
                          share_reshards=True)
    prepared = replan(graph, mesh, topo, links, options, prepare_only=True)
    ops, strategies = prepared.ops, prepared.strategies
    costs = prepared.step.node_costs[: len(ops)]
    hbm = float(topo.device.hbm_bw_bytes_per_s)
    price: dict[tuple, float] = {}

    def reshard_s(name: str, src, dst) -> float:
        key = (name, src, dst)
        if key not in price:
            tensor = graph.tensors[name]
            price[key] = find_reshard(src, dst, tensor.shape, tensor.dtype.itemsize, links,
                                      hbm).seconds
        return price[key]

    uses = [(ops.index(graph.producer(name)), j, v, i)
            for v, op in enumerate(ops) for i, name in enumerate(op.inputs)
            for j in [graph.producer(name).outputs.index(name)]]
    best = np.inf
    for choice in itertools.product(*(range(len(s)) for s in strategies)):
        total = sum(float(c[k]) for c, k in zip(costs, choice, strict=True))
        if not np.isfinite(total):
            continue
        moves: list[tuple] = []
        for u, j, v, i in uses:
            src = strategies[u][choice[u]].outputs[j]
            dst = strategies[v][choice[v]].inputs[i]
            if src != dst:
                moves.append((ops[u].outputs[j], src, dst))
        for move in (set(moves) if shared else moves):
            total += reshard_s(*move)
        best = min(best, total)
    return best


@pytest.mark.parametrize("readers", [2, 3])
def test_the_planner_prices_each_layout_once_as_a_brute_force_does(readers: int) -> None:
    graph, mesh = fanout_graph(readers), autoshard.Mesh.parse("tp=2")
    shared, per_edge = _brute_force(graph, mesh, True), _brute_force(graph, mesh, False)
    assert shared < per_edge  # the graph is one where sharing changes the optimum
    plan = autoshard.plan(graph, mesh, overlap="none", exclude=_forced, share_reshards=True)
    assert plan.objective.optimal
    assert plan.objective.total_s == pytest.approx(shared, rel=1e-9)
    moves = [(r.tensor, r.src, r.dst) for r in plan.reshards]
    assert len(moves) == len(set(moves))
    (h,) = [r for r in plan.reshards if r.tensor == "h"]
    assert set(h.consumers) == {f"mm{k}" for k in range(1, readers + 1)}
    assert emulate(plan, graph).passed


@pytest.mark.parametrize("readers", [2, 3])
def test_readers_free_to_disagree_are_priced_as_the_brute_force_does(readers: int) -> None:
    """Every layout pair of the readers is a plan: the pair node (two readers) and the
    producer copy (three) must price each as the distinct moves it needs."""
    graph, mesh = fanout_graph(readers), autoshard.Mesh.parse("tp=2")
    shared = _brute_force(graph, mesh, True, _free_readers)
    plan = autoshard.plan(graph, mesh, overlap="none", exclude=_free_readers,
                          share_reshards=True)
    assert plan.objective.optimal
    assert plan.objective.total_s == pytest.approx(shared, rel=1e-9)
    moves = [(r.tensor, r.src, r.dst) for r in plan.reshards]
    assert len(moves) == len(set(moves))
    # every share exact from the start (pair node or producer copy, not the lazy road)
    prepared = _prepared_free_readers(graph, mesh)
    pricing = prepared.pricing
    problem = pricing.problem(exact=range(len(pricing.shares)))
    assert problem.num_nodes > len(prepared.ops)
    answer = solver.solve(problem)
    assert answer.optimal and answer.objective == pytest.approx(shared, rel=1e-9)


def test_the_mlp_down_projection_gradient_is_resharded_once() -> None:
    forward = zoo.build("mlp")
    plan = autoshard.plan(forward, autoshard.Mesh.parse("dp=2,tp=2"), training=True,
                          share_reshards=True)
    records = [r for r in plan.reshards if r.tensor == "grad/layers.0.mlp.down.out"]
    assert len(records) == 1
    (record,) = records
    graph = training_graph(forward)
    readers = {op.name for op in graph.consumers(record.tensor)}
    assert len(record.consumers) == 2 and set(record.consumers) <= readers
    exposed = [(r.tensor, r.src, r.dst, r.count) for r in plan.reshards if not r.overlap]
    assert len(exposed) == len(set(exposed))


@pytest.mark.parametrize(("model", "mesh"), [("mlp", "dp=2,tp=2"), ("transformer", "dp=2,tp=2"),
                                             ("transformer", "dp=2,tp=4")])
def test_the_shared_step_is_the_per_edge_step_with_duplicate_moves_removed(model: str,
                                                                          mesh: str) -> None:
    """The same plan priced per consumer edge (every tensor pinned, sharing off) lists each
    move once per reader; kept once per (tensor, src, dst), its step is the shared plan's,
    and the shared plan is proven optimal and no slower than the per-edge optimum."""
    graph, grid = zoo.build(model), autoshard.Mesh.parse(mesh)
    shared = autoshard.plan(graph, grid, training=True, overlap="none", share_reshards=True)
    assert shared.objective.optimal
    assert _step_without_duplicates(shared, graph, grid) == pytest.approx(
        shared.objective.total_s, rel=1e-9)
    best_per_edge = autoshard.plan(graph, grid, training=True, overlap="none")
    assert shared.objective.total_s <= best_per_edge.objective.total_s * (1 + 1e-9)


def _step_without_duplicates(shared, graph: OpGraph, grid) -> float:
    """``shared``'s plan priced per consumer edge (every tensor pinned, sharing off, no
    overlap), each move kept once per (tensor, src, dst, runs)."""
    per_edge = autoshard.plan(graph, grid, training=True, overlap="none",
                              pins=pins_from_plan(shared, "shared.json"))
    moves: dict[tuple, float] = {}
    for record in per_edge.reshards:
        moves.setdefault((record.tensor, record.src, record.dst, record.count),
                         record.count * record.seconds)
    ops = sum(r.count * (r.compute_s + r.comm_s) for r in per_edge.ops.values())
    return ops + sum(moves.values())


def test_a_round_too_large_to_solve_stops_with_its_plan_priced_at_its_truth(monkeypatch
                                                                            ) -> None:
    """When the next round's problem would be too large (``MAX_ROUND_ENTRIES``, here 0:
    every round is), the last answer is returned as a feasible plan, not proven: its step is
    its truth (the per-edge step with duplicate moves removed), its bound the relaxation's,
    which bounds the proven optimum."""
    from autoshard.planning import shared_solve

    graph, grid = zoo.build("transformer"), autoshard.Mesh.parse("dp=2,tp=4")
    optimum = autoshard.plan(graph, grid, training=True, overlap="none", share_reshards=True)
    assert optimum.objective.optimal and optimum.stats["shared_exact"] > 0  # needs a round
    monkeypatch.setattr(shared_solve, "MAX_ROUND_ENTRIES", 0)
    stopped = autoshard.plan(graph, grid, training=True, overlap="none", share_reshards=True)
    assert stopped.objective.status == "feasible" and not stopped.objective.optimal
    assert stopped.stats["shared_exact"] == 0
    assert any(note.startswith("search restricted: ") and "edge-matrix entries" in note
               for note in stopped.notes)  # says what was restricted, and why
    assert _step_without_duplicates(stopped, graph, grid) == pytest.approx(
        stopped.objective.total_s, rel=1e-9)
    assert stopped.objective.lower_bound_s <= optimum.objective.total_s * (1 + 1e-9)
    assert optimum.objective.total_s <= stopped.objective.total_s * (1 + 1e-9)


def test_a_round_proven_by_the_last_bound_is_the_round_solved_whole(monkeypatch) -> None:
    """gpt2 (2 layers) on dp=2,tp=4: the last round's answer is found by the small solve
    around the shares just made exact (``SharedPricing.repair``) and proven by the previous
    round's bound. Solving every round whole instead (the lazy rounds the tests above hold
    to the brute force) gives the same step, and the repaired plan makes each exposed move
    once."""
    from autoshard.planning.shared_solve import SharedPricing

    graph, grid = zoo.build("gpt2", layers=2), autoshard.Mesh.parse("dp=2,tp=4")
    repaired: list[bool] = []
    repair = SharedPricing.repair

    def counted(self, *args):
        answer = repair(self, *args)
        repaired.append(answer is not None)
        return answer

    monkeypatch.setattr(SharedPricing, "repair", counted)
    shared = autoshard.plan(graph, grid, training=True, share_reshards=True)
    assert shared.objective.optimal and any(repaired)
    assert "re-solved around" in shared.stats["solver"]  # says which solve proved it
    monkeypatch.setattr(SharedPricing, "repair", lambda self, *args: None)
    whole = autoshard.plan(graph, grid, training=True, share_reshards=True)
    assert whole.objective.optimal
    assert shared.objective.total_s == pytest.approx(whole.objective.total_s, rel=1e-9)
    exposed = [(r.tensor, r.src, r.dst, r.count) for r in shared.reshards if not r.overlap]
    assert len(exposed) == len(set(exposed))


def test_an_answer_holding_a_flag_no_reader_needs_is_priced_without_it() -> None:
    """A producer copy's flags are free for the solver to set: an answer cut short may hold
    one no reader needs, a reshard the decoded plan does not make. ``settled`` drops it and
    prices the answer again: back to the optimum the brute force finds."""
    graph, mesh = fanout_graph(3), autoshard.Mesh.parse("tp=2")
    prepared = _prepared_free_readers(graph, mesh)
    pricing = prepared.pricing
    pricing.exact = tuple(range(len(pricing.shares)))
    problem = pricing.problem()
    answer = solver.solve(problem)
    copy = len(prepared.ops)  # the one producer copy: options (producer option, flags)
    flags = 1 << len(pricing.shares)
    every = answer.choices[prepared.ops.index(graph.producer("h"))] * flags + flags - 1
    padded = (*answer.choices[:copy], every, *answer.choices[copy + 1:])
    assert problem.evaluate(padded) > answer.objective  # some flag costs and is not read
    stale = dataclasses.replace(answer, choices=padded, objective=problem.evaluate(padded))
    settled = pricing.settled(stale, problem)
    assert settled.choices == pricing.complete(answer.choices, problem)  # the flags read
    assert settled.objective == pytest.approx(_brute_force(graph, mesh, True, _free_readers),
                                              rel=1e-9)


def _second_round_cut_short(monkeypatch, dear: bool, timed: bool) -> dict[str, list]:
    """Make the second share round end at the time limit (its status says so), solved whole
    (no repair); ``dear``: its answer is a dear plan (the round's problem solved with every
    finite reshard free), not the round's own. Records each round's settled op choices and
    their price at the truth (``SharedPricing``'s own: a precondition, not the check), and
    the op choices the rounds returned. ``timed``: the per-consumer solve comes first."""
    from autoshard.planning.shared_solve import SharedPricing

    real, calls = solver.solve, []
    seen: dict[str, list] = {"rounds": [], "truths": [], "returned": []}
    settle, solve_rounds = SharedPricing.settled, SharedPricing.solve
    per_consumer = SharedPricing.per_consumer

    def cut_short(problem, *args, **kwargs):
        calls.append(problem)
        if len(calls) != (3 if timed else 2):  # the second round's solve
            return real(problem, *args, **kwargs)
        own = real(problem, *args, **kwargs)
        choices = own.choices
        if dear:
            free = [(u, v, np.where(np.isfinite(m), 0.0, np.inf)) for u, v, m in problem.edges]
            choices = real(dataclasses.replace(problem, edges=free, windows=())).choices
        return dataclasses.replace(own, choices=tuple(choices), bound=-np.inf,
                                   objective=problem.evaluate(choices),
                                   status=solver.SolveStatus.TIME_LIMIT)

    def recorded(self, solution, problem):
        answer = settle(self, solution, problem)
        seen["rounds"].append(tuple(answer.choices[:len(self.op_costs)]))
        seen["truths"].append(answer.objective + self.shortfall(answer.choices))
        return answer

    def returned(self, *args, **kwargs):
        answer, problem = solve_rounds(self, *args, **kwargs)
        seen["returned"].append(tuple(answer.choices[:len(self.op_costs)]))
        return answer, problem

    def plain(self, *args):  # the per-consumer optimum, a candidate too
        answer = per_consumer(self, *args)
        seen["rounds"].append(tuple(answer.choices[:len(self.op_costs)]))
        seen["truths"].append(answer.objective)
        return answer

    monkeypatch.setattr(solver, "solve", cut_short)
    monkeypatch.setattr(SharedPricing, "per_consumer", plain)
    monkeypatch.setattr(SharedPricing, "repair", lambda self, *args: None)
    monkeypatch.setattr(SharedPricing, "settled", recorded)
    monkeypatch.setattr(SharedPricing, "solve", returned)
    return seen


@pytest.mark.parametrize("timed", [False, True])
@pytest.mark.parametrize("dear", [False, True])
def test_a_round_cut_short_by_the_time_limit_ends_on_the_cheapest_plan_at_its_truth(
        dear: bool, timed: bool, monkeypatch) -> None:
    """transformer on dp=2,tp=4 needs a second round. Cut short by the time limit, the
    rounds stop and say why; the plan is the cheapest at its truth of the rounds' and the
    per-consumer optimum's (solved first under a time limit, ``timed``, else once the
    rounds stop), priced at that truth (the per-edge step with duplicate moves removed), so
    never dearer than the plan sharing off gives at its truth; and the bound, the best of
    the rounds', is below the proven optimum."""
    graph, grid = zoo.build("transformer"), autoshard.Mesh.parse("dp=2,tp=4")
    optimum = autoshard.plan(graph, grid, training=True, overlap="none", share_reshards=True)
    assert optimum.objective.optimal and optimum.stats["shared_exact"] > 0
    default = autoshard.plan(graph, grid, training=True, overlap="none")
    default_truth = _step_without_duplicates(default, graph, grid)
    seen = _second_round_cut_short(monkeypatch, dear, timed)
    stopped = autoshard.plan(graph, grid, training=True, overlap="none", share_reshards=True,
                             time_limit=3600.0 if timed else None)
    rounds, truths, returned = (list(seen[key]) for key in ("rounds", "truths", "returned"))
    assert len(rounds) == 3  # two rounds and the per-consumer plan: no third round
    assert stopped.objective.status == "time_limit"
    assert any("time limit ran out in shared-reshard round 2" in note
               for note in stopped.notes)
    assert _step_without_duplicates(stopped, graph, grid) == pytest.approx(
        stopped.objective.total_s, rel=1e-9)
    assert optimum.objective.total_s <= stopped.objective.total_s * (1 + 1e-9)
    assert stopped.objective.total_s <= default_truth * (1 + 1e-9)
    assert stopped.objective.lower_bound_s <= optimum.objective.total_s * (1 + 1e-9)
    cheapest = int(np.argmin(truths))
    assert returned == [rounds[cheapest]]
    if dear:  # the second round's plan is dearer at its truth than the first's
        second = 2 if timed else 1  # (timed: the per-consumer plan came first)
        assert truths[second] > truths[second - 1] and rounds[cheapest] != rounds[second]


@pytest.mark.parametrize("share", [False, True])
def test_the_pass_without_memory_rows_stopped_by_its_plan_runs_once(share: bool,
                                                                     monkeypatch) -> None:
    """Where memory binds, the planner's pass without memory rows stops once its plan does
    not fit (``solver.solve(stop_when=)``: the status of a solve out of time), wanting only
    its bound. That stop is not a shared-reshard round cut short by the time limit: the pass
    is solved once (before, without a time limit, the per-consumer problem was solved again:
    the same problem, sharing off), and no note speaks of shared-reshard rounds."""
    graph, grid = zoo.build("transformer"), autoshard.Mesh.parse("dp=2,tp=4")
    free = autoshard.plan(graph, grid, training=True, overlap="none", share_reshards=share)
    real, stopped = solver.solve, []

    def stop_early(problem, *args, **kwargs):
        answer = real(problem, *args, **kwargs)
        if kwargs.get("stop_when") is None:
            return answer
        stopped.append(kwargs["stop_when"](answer.choices))
        if not stopped[-1]:
            return answer
        return dataclasses.replace(answer, status=solver.SolveStatus.TIME_LIMIT)

    monkeypatch.setattr(solver, "solve", stop_early)
    limit = free.peak_bytes_per_device * (0.8 if share else 0.95)  # limits quick to solve
    tight = autoshard.plan(graph, grid, training=True, overlap="none", share_reshards=share,
                           memory_limit=limit)
    assert stopped == [True]  # one pass, and its plan did not fit
    assert tight.peak_bytes_per_device <= limit
    assert not any("shared-reshard" in note for note in tight.notes)


def test_the_rounds_opt_out_of_the_early_look(monkeypatch) -> None:
    """The rounds' problems (shares priced lazily: integral but degenerate LPs) are solved
    with ``early_look=False`` (and ``provisional``); a plan without shares keeps the early
    look and is solved in full."""
    graph, grid = zoo.build("transformer"), autoshard.Mesh.parse("dp=2,tp=4")
    real, asked = solver.solve, []

    def recorded(problem, *args, **kwargs):
        asked.append(kwargs["early_look"])
        return real(problem, *args, **kwargs)

    monkeypatch.setattr(solver, "solve", recorded)
    autoshard.plan(graph, grid, training=True, overlap="none")
    assert asked == [True]
    asked.clear()
    autoshard.plan(graph, grid, training=True, overlap="none", share_reshards=True)
    assert len(asked) > 1 and asked[0] is False  # round 1, and more rounds
    assert asked.count(True) <= 1  # at most the per-consumer problem, if the rounds stop early


def test_a_round_that_undercharges_nothing_is_solved_in_full_from_its_plan(monkeypatch):
    """Rounds are solved ``provisional`` (no barrier after PDLP's cap: their plans say what to
    make exact next). Here every provisional answer proves only half its cost: the round that
    undercharges nothing is then solved again in full, from its plan, and the plan is proven
    at the step sharing gives unpatched."""
    graph, grid = zoo.build("transformer"), autoshard.Mesh.parse("dp=2,tp=4")
    reference = autoshard.plan(graph, grid, training=True, overlap="none",
                               share_reshards=True)
    real, calls = solver.solve, []

    def weakened(problem, *args, **kwargs):
        answer = real(problem, *args, **kwargs)
        calls.append((kwargs["provisional"], kwargs["incumbent"], answer.choices))
        if not kwargs["provisional"]:
            return answer
        return dataclasses.replace(answer, bound=answer.objective / 2,
                                   status=solver.SolveStatus.FEASIBLE)

    monkeypatch.setattr(solver, "solve", weakened)
    shared = autoshard.plan(graph, grid, training=True, overlap="none", share_reshards=True)
    (last, incumbent, _), (before, _, plan_before) = calls[-1], calls[-2]
    assert before and not last  # the provisional round, then the same round in full
    assert incumbent is not None and tuple(incumbent) == tuple(plan_before)
    assert shared.objective.optimal
    assert shared.objective.total_s == pytest.approx(reference.objective.total_s, rel=1e-9)
