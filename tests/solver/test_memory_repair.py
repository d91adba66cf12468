"""The repair of a plan above the memory limit (``solver.memory_repair``) and its use by the
memory price search.

Oracles: exhaustive search (``solver.exact``, which shares no code with either), rows written
out term by term and summed here with numpy (the repair keeps running sums over runs of rows;
the check does not), and small cases worked by hand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from solver import ChoiceProblem, Infeasible, solve
from solver.exact import exhaustive
from solver.memory_price import solve_priced
from solver.memory_repair import repair
from solver.periodic import find_chain
from solver.span_rows import Span, SpanRows
from tests.solver.test_span_rows import _random_spans, _written_out


def _peak(problem: ChoiceProblem, rows: list[tuple], choices) -> float:
    """The largest row sum, term by term."""
    return max((sum(float(vec[choices[node]]) for node, vec in row) for row in rows),
               default=0.0)


def _spanned(seed: int, overlapping: bool) -> tuple[ChoiceProblem, list[tuple]]:
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(2, 5, 8)]
    count = 10
    spans = _random_spans(rng, sizes, count, whole=True)
    if overlapping:  # a second term of some nodes over rows their first term covers too
        spans += [Span(node=s.node, vector=np.asarray(rng.integers(0, 2**39, sizes[s.node]),
                                                      dtype=np.float64),
                       first=s.first, stop=min(count, s.stop + 2)) for s in spans[::3]]
    costs = [rng.uniform(0, 10, s) for s in sizes]
    edges = [(k, k + 1, rng.uniform(0, 5, (sizes[k], sizes[k + 1]))) for k in range(7)]
    rows = SpanRows(spans, count)
    least = max(rows.sums().least_sums().tolist(), default=0.0)
    most = max((sum(float(v.max()) for _, v in row) for row in rows), default=0.0)
    problem = ChoiceProblem(node_costs=costs, edges=edges, liveness=rows,
                            memory_limit=least + 0.3 * (most - least))
    return problem, _written_out(spans, count)


def test_a_repaired_plan_fits_every_row_written_out() -> None:
    """From the heaviest plan (each node's heaviest option, 1.4-2x the limit) on 50 random
    problems, half with nodes whose terms overlap: every plan the repair returns fits every
    row summed term by term. Where it returns nothing, exhaustive search says whether a plan
    fits at all: single-node moves that never raise the peak can stall short of the limit,
    and did on 1 of the 48 problems that have a plan."""
    stalled = 0
    for overlapping in (False, True):
        for seed in range(25):
            problem, rows = _spanned(seed, overlapping)
            heaviest = tuple(
                int(np.argmax(sum((vec for row in rows for node, vec in row if node == n),
                                  np.zeros(size))))
                for n, size in enumerate(problem.sizes))
            assert _peak(problem, rows, heaviest) > problem.memory_limit
            found = repair(problem, heaviest)
            if found is not None:
                assert _peak(problem, rows, found) <= problem.memory_limit
                assert np.isfinite(problem.evaluate(found))
                continue
            try:
                exhaustive(problem)
                stalled += 1
            except Infeasible:
                pass
    assert stalled <= 2


@pytest.mark.parametrize("seed", range(10))
def test_a_plan_that_fits_comes_back_no_dearer(seed: int) -> None:
    """A random plan that already fits (the first of 200 draws that does) is only
    descended: it comes back fitting and no dearer."""
    problem, rows = _spanned(100 + seed, overlapping=False)
    rng = np.random.default_rng(seed)
    draws = (tuple(int(rng.integers(size)) for size in problem.sizes) for _ in range(200))
    start = next((plan for plan in draws if _peak(problem, rows, plan) <= problem.memory_limit),
                 None)
    assert start is not None
    found = repair(problem, start)
    assert found is not None
    assert problem.evaluate(found) <= problem.evaluate(start) + 1e-12
    assert _peak(problem, rows, found) <= problem.memory_limit


def test_the_cheapest_move_per_byte_is_taken_first() -> None:
    """Two nodes, no edges, one row, limit 16; both at option 0 hold 20 bytes. Moves (added
    cost per byte saved): node 0 to option 1, 1/5; node 0 to option 2, 3/9; node 1 to option
    1, 2/5. The first fits (15 bytes, cost 1): the exhaustive optimum, by hand and by search."""
    costs = [np.array([0.0, 1.0, 3.0]), np.array([0.0, 2.0])]
    memory = [np.array([10.0, 5.0, 1.0]), np.array([10.0, 5.0])]
    problem = ChoiceProblem(node_costs=costs, edges=[(0, 1, np.zeros((3, 2)))],
                            liveness=[tuple(enumerate(memory))], memory_limit=16.0)
    assert repair(problem, (0, 0)) == (1, 0)
    assert exhaustive(problem)[1] == pytest.approx(1.0)


def test_nothing_fits_without_moving_tied_nodes() -> None:
    """Nodes tied in a group never move one at a time: when only they could save the bytes,
    there is no repair."""
    costs = [np.array([0.0, 1.0])] * 2
    memory = np.array([10.0, 1.0])
    problem = ChoiceProblem(node_costs=costs, edges=[(0, 1, np.zeros((2, 2)))],
                            liveness=[((0, memory), (1, memory))], memory_limit=11.0,
                            groups=((0, 1),))
    assert repair(problem, (0, 0)) is None


def _lowered_row_chain() -> ChoiceProblem:
    """Six one-node layers, options (cost, bytes): 0 (0, 10), 1 (1, 3), 2 (5, 2); layer 1's
    option 1 holds 1 byte, not 3. One row holds every layer; limit 13.

    The priced row takes each interior position's smallest coefficient (layer 1's 1 byte for
    option 1), so at every price the search's plans take option 1 inside and option 2 at the
    ends (if anything), 14 bytes or more: none fits. By hand: all option 1 holds 16 bytes at
    cost 6; each move of a layer other than 1 to option 2 saves 1 byte for 4, so the optimum
    moves three: 18. The best plan with identical interior layers (the tied search) costs 30:
    option 1 inside holds at least 10 + 4 at the ends."""
    layers = 6
    costs = [np.array([0.0, 1.0, 5.0])] * layers
    edges = [(k, k + 1, np.zeros((3, 3))) for k in range(layers - 1)]
    row = tuple((k, np.array([10.0, 1.0 if k == 1 else 3.0, 2.0])) for k in range(layers))
    return ChoiceProblem(node_costs=costs, edges=edges, liveness=[row], memory_limit=13.0,
                         blocks=tuple((k,) for k in range(layers)))


def test_the_price_search_repairs_plans_that_do_not_fit() -> None:
    problem = _lowered_row_chain()
    _, best = exhaustive(problem)
    assert best == pytest.approx(18.0)
    chain = find_chain(problem)
    assert chain is not None
    from solver.clock import Clock
    from solver.graph_search import sizes_of

    priced = solve_priced(problem, chain, Clock(None), 1e-6, sizes_of(problem), None)
    assert priced is not None  # before the repair: None, no priced plan fitted
    assert priced.objective == pytest.approx(best)
    assert priced.peak_memory <= problem.memory_limit
    answer = solve(problem)
    assert answer.objective == pytest.approx(best)  # not the tied search's 30
    assert answer.bound <= best + 1e-9


def test_a_fitting_plan_is_the_leanest_when_it_fits_else_the_repair() -> None:
    from solver import fitting_plan

    problem = _lowered_row_chain()  # the leanest plan (option 2, layer 1 option 1) fits
    assert fitting_plan(problem) == (2, 1, 2, 2, 2, 2)
    costs = [np.array([0.0, 1.0]), np.array([0.0, 1.0])]
    # two rows: option 1 saves 5 bytes in row 0 and costs 1 in row 1, so it is the leanest
    # option in total for neither node; both at option 0 peak 20 in row 0, one move fits
    rows = [((0, np.array([10.0, 5.0])), (1, np.array([10.0, 5.0]))),
            ((0, np.array([0.0, 6.0])), (1, np.array([0.0, 6.0])))]
    tight = ChoiceProblem(node_costs=costs, edges=[(0, 1, np.zeros((2, 2)))], liveness=rows,
                          memory_limit=15.0)
    assert fitting_plan(tight) is None  # leanest (0, 0) peaks at 20: nothing without a start
    found = fitting_plan(tight, (0, 0))
    assert found in ((0, 1), (1, 0))
    assert _peak(tight, rows, found) <= 15.0


def test_prices_stop_growing_once_the_dual_turns_down_while_only_repairs_fit(monkeypatch):
    """Probes whose own plans never fit, with bounds 1, 3, 2, 5, ... as the price grows: the
    search stops at the first fall (the third probe after the ceiling), since only the bound
    could still improve and the Lagrangian dual is concave in the price."""
    from solver import memory_price
    from solver.clock import Clock

    problem = _lowered_row_chain()
    chain = find_chain(problem)
    assert chain is not None
    row = memory_price.priced_row(problem, chain)
    bounds = iter([0.5, 1.0, 3.0, 2.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    tried = []

    def probe(self, price, pdlp_iterations=None):
        tried.append(price)
        found = memory_price.Probe(price=price, bound=next(bounds), choices=(1,) * 6, cost=6.0,
                                   priced_bytes=0.0, fits=False)
        self.probes.append(found)
        if self.cut_side is None:
            self.repaired.append(dataclasses.replace(found, choices=(2,) * 6, fits=True))
        return found

    monkeypatch.setattr(memory_price._PriceSearch, "probe", probe)
    search = memory_price._PriceSearch(problem, chain, row, Clock(None), 1e-6, None)
    search.run(1.0)
    assert len(tried) == 4  # the ceiling, then 1.0, 3.0 and the fall to 2.0
    assert tried[1:] == sorted(tried[1:])


def test_the_second_row_priced_is_where_the_leanest_priced_plan_peaks(monkeypatch) -> None:
    """Six one-node layers, options (cost; bytes in rows A and B): 0 (0; 10, 0), 1 (1; 1,
    10), 2 (5; 2, 1), limit 20. The free optimum (all 0) peaks in row A, so A is priced
    first; option 1 is the leanest there, so no price of A makes a plan fit (all 1 holds 60
    bytes in B). The next row priced is B, where the ceiling's plan peaks (the cheapest plan
    that does not fit peaks in A again, which ended the search before)."""
    from solver import memory_price
    from solver.clock import Clock
    from solver.graph_search import sizes_of

    layers = 6
    costs = [np.array([0.0, 1.0, 5.0])] * layers
    edges = [(k, k + 1, np.zeros((3, 3))) for k in range(layers - 1)]
    row_a = tuple((k, np.array([10.0, 1.0, 2.0])) for k in range(layers))
    row_b = tuple((k, np.array([0.0, 10.0, 1.0])) for k in range(layers))
    problem = ChoiceProblem(node_costs=costs, edges=edges, liveness=[row_a, row_b],
                            memory_limit=20.0, blocks=tuple((k,) for k in range(layers)))
    free = (0,) * layers
    priced_rows = []
    original = memory_price.priced_row

    def recording(problem, chain, index=None):
        priced_rows.append(index)
        return original(problem, chain, index)

    monkeypatch.setattr(memory_price, "priced_row", recording)
    chain = find_chain(problem)
    assert chain is not None
    answer = solve_priced(problem, chain, Clock(None), 1e-6, sizes_of(problem),
                          problem.evaluate(free), free)
    assert priced_rows == [0, 1]
    _, best = exhaustive(problem)
    assert answer is not None and answer.objective >= best - 1e-9
    assert answer.bound <= best + 1e-9


def test_a_plan_is_repaired_only_when_it_is_cheaper_than_the_best_that_fits(monkeypatch):
    """Probes (their periodic solves replaced by set plans) on the lowered-row chain, limit 13:
    all option 2 fits at cost 30; then all option 1 (cost 6, 16 bytes) does not fit and is
    cheaper, so it is repaired; then (2, 2, 2, 2, 2, 0) (cost 25, 20 bytes) does not fit but
    a cheaper plan already fits (the repair's), so it is not. The repaired plan is the best,
    but the cuts keep the probe's own fitting plan."""
    import types

    from solver import memory_price
    from solver.clock import Clock

    problem = _lowered_row_chain()
    chain = find_chain(problem)
    assert chain is not None
    plans = iter([(2,) * 6, (1,) * 6, (2, 2, 2, 2, 2, 0)])

    def fake_periodic(priced, chain, clock, gap, sizes, **kwargs):
        return types.SimpleNamespace(choices=next(plans), bound=0.0,
                                     stats=types.SimpleNamespace(seconds=()))

    repaired = []
    original = memory_price.repair

    def recording(problem, choices, deadline=None):
        repaired.append(tuple(choices))
        return original(problem, choices, deadline)

    monkeypatch.setattr(memory_price, "solve_periodic", fake_periodic)
    monkeypatch.setattr(memory_price, "repair", recording)
    search = memory_price._PriceSearch(problem, chain, memory_price.priced_row(problem, chain),
                                       Clock(None), 1e-6, None)
    first, second, third = (search.probe(price) for price in (1.0, 0.5, 0.25))
    assert first.fits and not second.fits and not third.fits
    assert third.cost == pytest.approx(25.0) and second.cost == pytest.approx(6.0)
    assert repaired == [(1,) * 6]
    assert search.best is search.repaired[0] and search.best.repaired
    assert search.best.cost == pytest.approx(18.0)  # the exhaustive optimum, by hand above
    assert search.cut_side is search.probes[0]  # the cuts keep the probe's own plan


def test_the_block_mix_mixes_with_the_probes_own_fitting_plan(monkeypatch) -> None:
    from solver import memory_price
    from solver.clock import Clock

    problem = _lowered_row_chain()
    chain = find_chain(problem)
    assert chain is not None
    sides = []

    def fake_mixed(problem, chain, cheap, fitting, clock):
        sides.append((cheap.cost, fitting.cost))
        return (2, 1, 2, 2, 2, 2), 9.0

    monkeypatch.setattr(memory_price, "_mixed", fake_mixed)

    def probe(cost, fits, repaired=False):
        return memory_price.Probe(price=1.0, bound=0.0, choices=(2,) * 6, cost=cost,
                                  priced_bytes=0.0, fits=fits, repaired=repaired)

    probes = [probe(10.0, True), probe(8.0, True, repaired=True), probe(5.0, False)]
    _, how = memory_price._best_plan(problem, chain, probes, 0.0, 1e-6, Clock(None))
    assert sides == [(5.0, 10.0)]  # mixed with the probe's own plan, not the repaired one
    assert how is None  # the repaired plan (8) is cheaper than the mix (9): it is the answer
