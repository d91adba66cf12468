"""Memory as a price: a chain whose cheapest plan does not fit, still solved the periodic way.

The periodic LP (:mod:`solver.periodic`) has no memory rows: a peak-memory row at one step of
the schedule names the nodes alive at that step, which differ from block to block, so the rows
break the symmetry between interior blocks that the LP's bound rests on. When the unconstrained
optimum of a chain does not fit (llama3.1-405b on 512 devices: replicated parameters whose
synchronisation the overlap model hides), the fallback was a MIP with the interior blocks tied
and every row kept: minutes, and a 63 % gap at a 300 s limit.

Here memory is priced instead (Lagrangian relaxation; Fisher 1981, "The Lagrangian Relaxation
Method for Solving Integer Programming Problems", Management Science 27(1)). Take one row of
the constraint, ``a·x ≤ B``, and lower its coefficients until they are the same in every
interior block (``a'``: per block position, the smallest coefficient any interior block has
there). Memory is never negative, so ``a'·x ≤ a·x ≤ B`` for every plan that fits, and for any
price ``λ ≥ 0``

    OPT = min {c(x) : x fits}  ≥  min_x  c(x) + λ·(a'·x − B)  ≥  bound(λ) − λ·B,

where ``bound(λ)`` is any proven lower bound of the chain with node costs ``c + λ·a'``. That
chain has no memory rows and identical interior blocks, so the periodic LP solves it; every
plan it returns is checked against *all* the real rows, and those that fit are candidates. The
price is searched on the one-dimensional dual: a price high enough to ask for the least memory
first (if that plan does not fit even after the repair below, no price helps), then prices grown
from low until a plan fits, then the price where the lines of the best fitting and the last
non-fitting plan cross (Kelley's cutting planes in one dimension; the unconstrained optimum,
when the caller has it, is the non-fitting plan at price 0, so a first price that already fits
is cut too). Finally the best fitting plan and each cheaper one that did not fit are mixed block
by block (:func:`_mixed`, :mod:`solver.block_mix`: a MIP optimal over every block-by-block mix
of the two), which a plan with identical interior blocks cannot do; a probe's plan that does not
fit and costs less than the best that fits is also moved under the limit by the cheapest
single-node moves (:mod:`solver.memory_repair`) and kept as a candidate; where that still leaves
more than ``TIED_SEARCH_GAP``, the best tied plan over the options the probes' plans use
(:func:`_tied`, :mod:`solver.tied_plan`: a plan inside the hull of (memory, cost), which no
price asks for) is the last candidate. With one memory row that binds, the Lagrangian dual is
the lower convex hull of the plans' (memory, cost) points at the limit, and a mix of the two
plans beside the limit reaches that hull up to one block's worth and the junctions: what is left
is the periodic LP's own gap at the price. A gap above ``TIGHTEN_GAP`` then gets one more look
at the bound at the last cut's price: the periodic LP alone, by PDLP with adaptive restarts
(:func:`_tighten`, :mod:`solver.periodic_bound`). The probes themselves stop after their first
LP when it is PDLP's (``solve_periodic(probe=True)``): the mix, not a polish, is what improves
their plans; and those before the first cut, which only look for where plans start to fit, stop
PDLP sooner (``EXPLORE_PDLP_ITERATIONS``).

The bound is valid whatever price was tried; only the gap says how good the plan is. The caller
decides whether a gap is small enough or the tied search must still run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass

import numpy as np

from solver.backends.lp import PDLP_PLAN_ITERATIONS, pdlp_tolerance
from solver.block_mix import best_mix
from solver.clock import Clock
from solver.graph_search import Sizes, closed, finish, sizes_of
from solver.memory_repair import REPAIR_SECONDS, repair
from solver.periodic import Chain
from solver.periodic_bound import chain_bound
from solver.periodic_search import GOOD_ENOUGH_GAP, solve_periodic
from solver.problem import ChoiceProblem
from solver.solution import Solution
from solver.tied_plan import best_tied_plan

logger = logging.getLogger(__name__)

MAX_PROBES = 12  # periodic solves at most, per row
ROW_ROUNDS = 2  # rows priced in turn (see solve_priced)
# Prices in units of (objective bound / memory limit): at the ceiling a byte saved is worth
# 2^10 times the whole step per limit's worth of bytes, so the plan takes the least memory.
PRICE_CEILING = 2.0**10
PRICE_START = 1 / 16
PRICE_GROWTH = 4.0
PROBE_SHARE = 0.25
MIX_SECONDS = 10.0  # the block mix's MIP, even past the deadline (see _mixed)
MIX_RESTRICTION = "every layer takes one of two priced plans' strategies"
TIED_RESTRICTION = ("identical interior layers, each op taking a strategy one of the priced "
                    "plans takes there")
# the tied plan's MIP (solver.tied_plan), even without a time limit: on the 6-layer
# gpt2-shaped chain at 90 % of its free peak it took 1.2-2.4 s; over every option (not only
# the probes') 237 s, for a plan 0.04 % cheaper. It is looked for only where the block mix
# leaves more than TIED_SEARCH_GAP: where the mix is close, the layers that differ are what
# its plan gains, which no tied plan has (llama3.1-405b, mix 0.54 % from its bound: the tied
# MIP ran its 30 s out at a plan twice as slow; llama3-70b dp=8,tp=8 at 40 GiB, mix 0.44 %:
# 10.5 s for a tied plan 5 % slower than the mix)
TIED_SECONDS = 30.0
# the cuts stop once the crossing price moves by at most this share: llama3.1-405b's LP bound
# moved 0.07 % between prices 6 % apart (0.003212 and 0.003027 s/GB), and cuts 1.5 % apart
# each took a 19-22 s probe (one found a fitting plan 0.07 % cheaper, the next nothing)
CUT_SETTLED = 0.02
# A priced plan this close to its bound is not handed to the tied search (``api``), nor
# looked for among the tied plans over the probes' options (:func:`_tied`). The price search's
# probes each stop at GOOD_ENOUGH_GAP of their own bound, so its gap ends near GOOD_ENOUGH_GAP
# by construction (llama3.1-405b dp=8,fsdp=8,tp=8: 0.493-0.574 % from run to run); from just
# above it the tied search (a MIP over all 126 layers with every memory row) found nothing
# better in the 45-150 s left, overran the 300 s limit by up to 50 s building its model, and
# took the peak RSS from 3.5 to 8.5 GB.
TIED_SEARCH_GAP = 2 * GOOD_ENOUGH_GAP
# a gap above this after the block mix gets the last look at the bound (_tighten): half of
# GOOD_ENOUGH_GAP, at which each probe stops, so that a search whose gap lands just under
# the bar (llama3.1-405b: 0.49-0.56 % in four runs) gets it too
TIGHTEN_GAP = GOOD_ENOUGH_GAP / 2
# The probes before the first cut (the ceiling and the growing prices) only have to say whether
# their price makes a plan fit and leave a line for the cuts; their PDLP stops one leg after
# the interim looks (``lp.PDLP_CHECKS``) instead of at ``lp.PDLP_MAX_ITERATIONS``, the cuts'
# cap. llama3.1-405b's probe at 0.001027 s/GB, near the free optimum: 5,000 iterations (26 s)
# did not converge, and its support LP then had no value, so the barrier ran too (49.5 s in
# all); at 2,075 (10 s) the support LP had one, the probe took 21 s, and its plan (1.50571 s,
# does not fit) and bound (1.41219 s) were those of the 5,000-iteration run to 1e-5
EXPLORE_PDLP_ITERATIONS = PDLP_PLAN_ITERATIONS  # 2,075


@dataclass(frozen=True, slots=True)
class Probe:
    """One priced solve: the price, the proven bound of the constrained problem it gives, and
    its plan with that plan's real cost, priced memory and whether it fits every row."""

    price: float
    bound: float
    choices: tuple[int, ...]
    cost: float
    priced_bytes: float
    fits: bool
    repaired: bool = False  # a probe's plan moved under the limit (_PriceSearch._repair)


def peak_row(problem: ChoiceProblem, choices: tuple[int, ...]) -> int:
    """Index of the memory row at which ``choices`` peaks."""
    return int(np.argmax(problem.row_sums(choices)))


def priced_row(problem: ChoiceProblem, chain: Chain, index: int | None = None
               ) -> list[np.ndarray] | None:
    """Per node, the coefficients ``a'`` of row ``index``, lowered to be equal in every
    interior block; ``None`` when the problem has no memory rows (or the row holds nothing).

    Without an index the row is the one whose least possible sum is largest: the step no plan
    can make small (in training, the start of the backward pass, where every layer's saved
    activations and all static state are alive)."""
    rows = problem.memory_rows()
    if not rows:
        return None
    if index is None:
        index = int(np.argmax(problem.compiled_rows().least_sums()))
    coefficients = [np.zeros(size) for size in problem.sizes]
    for node, vec in rows[index]:
        coefficients[node] = coefficients[node] + vec
    interior = chain.blocks[1:len(chain.blocks) - 1]
    for position in range(len(chain.blocks[0])):
        shared = np.minimum.reduce([coefficients[block[position]] for block in interior])
        shared.setflags(write=False)
        for block in interior:
            coefficients[block[position]] = shared  # one array: the blocks stay identical
    if not any(c.any() for c in coefficients):
        return None
    return coefficients


class _PriceSearch:
    """The search over the price (mutable state of one solve)."""

    def __init__(self, problem: ChoiceProblem, chain: Chain, row: list[np.ndarray],
                 clock: Clock, gap: float, known_bound: float | None,
                 rescue: tuple[int, ...] | None = None):
        self.problem, self.chain, self.row, self.clock = problem, chain, row, clock
        self.gap = gap
        self.limit = float(problem.memory_limit if problem.memory_limit is not None else math.inf)
        self.bound = -math.inf if known_bound is None else known_bound
        self.probes: list[Probe] = []
        self.repaired: list[Probe] = []  # plans of probes that did not fit, made to (_repair)
        self.crossing: float | None = None  # the last Kelley cut's price (see run)
        self.rescue = rescue  # a plan for a probe out of time before its first (probe)

    @property
    def best(self) -> Probe | None:
        fitting = [p for p in (*self.probes, *self.repaired) if p.fits]
        return min(fitting, key=lambda p: p.cost) if fitting else None

    @property
    def cut_side(self) -> Probe | None:
        """The cheapest probe whose own plan fits: the fitting side of a Kelley cut, whose
        price the cut must stay below (a repaired plan's price is not where it is cheapest)."""
        fitting = [p for p in self.probes if p.fits]
        return min(fitting, key=lambda p: p.cost) if fitting else None

    def _repair(self, found: Probe) -> None:
        """A probe's plan that does not fit, moved under the limit by the cheapest moves
        (:func:`solver.memory_repair.repair`, at most ``REPAIR_SECONDS``) as one more
        candidate: it keeps the probe's price and bound (the bound does not depend on the
        plan), and the search goes on from the probe as it did. Only a plan cheaper than the
        best that fits (``_worth_repairing``). A repaired plan is a candidate beside the
        block mix, not its fitting side while a probe's own plan fits (:func:`_best_plan`):
        llama3-70b on dp=8,tp=8 (seq 8192, 64 micro-batches, 120 s): 86.357 -> 73.583 s from
        the repairs; llama3.1-405b on dp=8,fsdp=8,tp=8: repairs of 1.79 and 1.63 s, 0.7-1.3 s
        each, against the mix's 1.553 s, which they leave as it was."""
        choices = repair(self.problem, found.choices, time.perf_counter() + REPAIR_SECONDS)
        if choices is None:
            return
        cost = self.problem.evaluate(choices)
        self.repaired.append(dataclasses.replace(
            found, choices=choices, cost=cost, fits=True, priced_bytes=self._bytes(choices),
            repaired=True))
        logger.info("memory price %.4g s/GB: its plan repaired to fit: %.6g s",
                    found.price * 1e9, cost)

    def _worth_repairing(self, found: Probe) -> bool:
        """A plan that does not fit is repaired when it costs less than the best that fits:
        the repair only adds cost where it moves (then the descent may take some back)."""
        best = self.best
        return best is None or found.cost < best.cost

    def _bytes(self, choices: tuple[int, ...]) -> float:
        return float(sum(float(a[i]) for a, i in zip(self.row, choices, strict=True)))

    def done(self) -> bool:
        best = self.best
        return best is not None and closed(best.cost, self.bound, self.gap)

    def priced(self, price: float) -> ChoiceProblem:
        """The chain without memory rows, node costs ``c + price·a'``."""
        costs = [cost + price * a for cost, a in zip(self.problem.node_costs, self.row,
                                                      strict=True)]
        return ChoiceProblem(node_costs=costs, edges=self.problem.edges,
                             windows=self.problem.windows, blocks=self.problem.blocks)

    def probe(self, price: float, pdlp_iterations: int | None = None) -> Probe | None:
        """Solve the chain with memory priced at ``price`` seconds per byte (PDLP capped at
        ``pdlp_iterations`` on the large-LP road; ``None``: the periodic search's own cap)."""
        remaining = self.clock.remaining()
        if remaining is not None and remaining <= 0:
            return None
        priced = self.priced(price)
        # after the first, a probe gets at most a share of what is left, so that a cut at
        # the crossing price and the block mix still run (llama3.1-405b: the second probe's
        # polish MIP alone took 153 s of 300 and the mix never ran)
        sub = Clock(remaining if remaining is None or not self.probes
                    else remaining * PROBE_SHARE)
        # a plan for a probe that runs out of time before it has one: every probe's plan and
        # the caller's are plans of every priced problem (the same nodes and options)
        rescue = self.probes[-1].choices if self.probes else self.rescue
        answer = solve_periodic(priced, self.chain, sub, max(self.gap, GOOD_ENOUGH_GAP),
                                sizes_of(priced), probe=True, pdlp_iterations=pdlp_iterations,
                                rescue=rescue)
        self.clock.phases.extend((f"priced_{name}", s) for name, s in answer.stats.seconds)
        self.clock.mark = sub.mark
        choices = answer.choices
        peak = self.problem.peak_memory(choices)
        found = Probe(price=price, bound=answer.bound - price * self.limit, choices=choices,
                      cost=self.problem.evaluate(choices), priced_bytes=self._bytes(choices),
                      fits=peak is not None and peak <= self.limit)
        self.bound = max(self.bound, found.bound)
        self.probes.append(found)
        logger.info("memory price %.4g s/GB: plan %.6g s, %s, bound %.6g (%.1f s)",
                    price * 1e9, found.cost,
                    "fits" if found.fits else f"peak {peak / 2**30:.2f} GiB", self.bound,
                    sum(s for _, s in answer.stats.seconds))
        if not found.fits and self._worth_repairing(found):
            self._repair(found)
        return found

    def free(self, choices: tuple[int, ...]) -> Probe | None:
        """The optimum without memory rows as the probe at price 0 (its cost is the free
        optimum's, a bound the caller already holds), when it does not fit: the cut between
        it and the first fitting plan finds the price where memory starts to bind even when
        the first price tried is already above it."""
        peak = self.problem.peak_memory(choices)
        if peak is not None and peak <= self.limit:
            return None
        found = Probe(price=0.0, bound=self.bound, choices=choices,
                      cost=self.problem.evaluate(choices), fits=False,
                      priced_bytes=self._bytes(choices))
        if self._worth_repairing(found):
            self._repair(found)
        return found

    def run(self, scale: float, free: tuple[int, ...] | None = None) -> None:
        """A price high enough to ask for the least memory first (if neither that plan nor its
        repair fits, no price helps: the caller's exact search says whether anything
        fits; the priced row's lowered coefficients can leave the least priced memory
        above the limit in a row they do not price, and the repair is then the only
        fitting plan until the cuts); then grow the price from low until a plan fits,
        and cut the dual where the lines of the cheapest fitting and the last
        non-fitting plan cross (the free optimum ``free``, at price 0, is the first
        non-fitting plan when the caller has it)."""
        ceiling = self.probe(scale * PRICE_CEILING, EXPLORE_PDLP_ITERATIONS)
        if ceiling is None or self.best is None:
            return
        price, low = scale * PRICE_START, None if free is None else self.free(free)
        if low is not None:
            self.probes.append(low)  # a cheap side for the block-by-block mix too
        while len(self.probes) < MAX_PROBES and price < ceiling.price:
            found = self.probe(price, EXPLORE_PDLP_ITERATIONS)
            if found is None:
                return
            if found.fits:
                break
            if self.cut_side is None and low is not None and low.price > 0 \
                    and found.bound < low.bound:
                # no price has made a plan fit, and the dual has turned down: the bound (the
                # only thing a higher price still offers; repaired plans are as good below)
                # falls from here on (llama3-70b dp=2,fsdp=4,tp=8: five probes past the
                # turn, 25 s, no better bound or plan)
                return
            low = found
            price *= PRICE_GROWTH
        while len(self.probes) < MAX_PROBES and low is not None and not self.done():
            high = self.cut_side
            if high is None:
                return  # only repaired plans fit: no price found one to cut from
            if low.priced_bytes <= high.priced_bytes:
                return  # the lines do not cross: no price between them does better
            price = (high.cost - low.cost) / (low.priced_bytes - high.priced_bytes)
            if not low.price < price < high.price or any(p.price == price for p in self.probes):
                return
            last, self.crossing = self.crossing, price
            if last is not None and abs(price - last) <= CUT_SETTLED * last:
                return  # the crossing has settled: the last look at the bound takes it
            found = self.probe(price)
            if found is None:
                return
            if not found.fits:
                low = found
            elif found.cost >= high.cost:
                return  # the cut found nothing cheaper: the search has converged


def _mixed(problem: ChoiceProblem, chain: Chain, cheap: Probe, fitting: Probe,
           clock: Clock) -> tuple[tuple[int, ...], float] | None:
    """The cheapest fitting plan whose every block (and the rest, as one more unit) takes
    all of the cheap plan's choices or all of the fitting plan's (:func:`block_mix.best_mix`:
    a MIP with one binary per block, optimal over every such mix).

    The price search returns plans with identical interior blocks, but where memory binds
    the optimum often mixes: some layers keep the cheap strategy and the others save the
    memory that lets them (a single priced row cannot express "some layers"). The MIP runs
    even when the deadline has passed, for at most ``MIX_SECONDS``: it is the step that turns
    the price search's two plans into one that is close to its bound (llama3.1-405b: a
    fitting plan at 2.1165 s and one at 1.5057 s that does not fit)."""
    if problem.windows:
        return _run_mix(problem, chain, cheap, fitting, clock)
    units = [block for block in (*chain.blocks, chain.rest) if block]
    remaining = clock.remaining()
    limit = None if remaining is None else max(remaining, MIX_SECONDS)
    return best_mix(problem, units, cheap.choices, fitting.choices, limit)


def _run_mix(problem: ChoiceProblem, chain: Chain, cheap: Probe, fitting: Probe,
             clock: Clock) -> tuple[tuple[int, ...], float] | None:
    """The mix for a problem with windows, whose max terms :func:`block_mix.best_mix` does
    not model: the cheapest fitting plan that takes the cheap plan's choices in a run of
    blocks from one end of the chain (the rest counted as a block before the first and after
    the last) and the fitting plan's everywhere else, the run as long as memory allows (binary
    search on its length, one evaluation of the whole problem per step; a mix is only kept if
    it fits). Stops at the longest run seen to fit once the ``clock``'s deadline has passed
    (llama3-70b on dp=4,pp=4,tp=4 with 128 micro-batches: its stages' problems have windows,
    and without this mix the plan was 0.7 % slower)."""
    units = [*chain.blocks, chain.rest]  # the rest (embedding, head) mixes as one unit
    best: tuple[tuple[int, ...], float] | None = None
    for blocks in ([units[-1], *units[:-1]], [*units[-2::-1], units[-1]]):
        count = len(blocks)

        def mix(length: int, blocks: list = blocks) -> tuple[int, ...]:
            choices = list(fitting.choices)
            for block in blocks[:length]:
                for node in block:
                    choices[node] = cheap.choices[node]
            return tuple(choices)

        low, high = 0, count  # mix(low) fits (it is the fitting plan); find the longest
        while high - low > 1 and not clock.expired():
            middle = (low + high) // 2
            peak = problem.peak_memory(mix(middle))
            if peak is not None and peak <= problem.memory_limit:
                low = middle
            else:
                high = middle
        if low > 0:
            choices = mix(low)
            cost = problem.evaluate(choices)
            if cost < fitting.cost and (best is None or cost < best[1]):
                best = (choices, cost)
    return best


def _best_plan(problem: ChoiceProblem, chain: Chain, probes: list[Probe], bound: float,
               gap: float, clock: Clock) -> tuple[tuple[int, ...], str | None]:
    """The cheapest fitting probe's plan, or a cheaper block mix of it with a cheaper probe
    that does not fit (every such probe as the mix's cheap side, the best mix kept: the
    cheapest one, often the free optimum far over the memory, is not always the best), or a
    cheaper repaired plan (the mix's fitting side only where no probe's own plan fits), or a
    cheaper tied plan over the options of all of these (:func:`_tied`); with the
    restriction the plan was found under (``None`` for a probe's own plan)."""
    best = min((p for p in probes if p.fits), key=lambda p: p.cost)
    # the mix's fitting side: the cheapest probe whose own plan fits, else a repaired one
    own = [p for p in probes if p.fits and not p.repaired]
    side = min(own, key=lambda p: p.cost) if own else best
    cheap = [p for p in probes if not p.fits and p.cost < side.cost]
    if not cheap or closed(best.cost, bound, gap):
        return best.choices, None
    mixes = [found for k, p in enumerate(sorted(cheap, key=lambda p: (p.cost, -p.price)))
             if (k == 0 or not clock.expired())
             and (found := _mixed(problem, chain, p, side, clock)) is not None]
    clock.lap("priced_mix")
    found = [(choices, cost, MIX_RESTRICTION) for choices, cost in mixes]
    found.append((best.choices, best.cost, None))
    choices, cost, how = min(found, key=lambda m: m[1])
    if closed(cost, bound, max(gap, TIED_SEARCH_GAP)) or clock.expired():
        return choices, how
    tied = _tied(problem, chain, [p.choices for p in probes] + [m[0] for m in mixes], gap,
                 clock)
    if tied is not None and tied[1] < cost:
        return tied[0], TIED_RESTRICTION
    return choices, how


def _tied(problem: ChoiceProblem, chain: Chain, plans: list[tuple[int, ...]], gap: float,
          clock: Clock) -> tuple[tuple[int, ...], float] | None:
    """The cheapest fitting plan with identical interior blocks over the options ``plans``
    use (:func:`solver.tied_plan.best_tied_plan`): a plan inside the hull of (memory, cost)
    that no price asks for, searched for at most ``TIED_SECONDS`` (within the deadline)."""
    remaining = clock.remaining()
    limit = TIED_SECONDS if remaining is None else min(remaining, TIED_SECONDS)
    found = best_tied_plan(problem, chain, plans, limit, gap)
    clock.lap("priced_tied")
    return found


def _tighten(problem: ChoiceProblem, chain: Chain, search: _PriceSearch, probes: list[Probe],
             choices: tuple[int, ...], gap: float, clock: Clock) -> float:
    """The bound after one more look at the crossing price (the last Kelley cut's, else the
    best bound's): the bound of the priced chain's periodic LP alone, by PDLP with adaptive
    restarts (:func:`solver.periodic_bound.chain_bound`), until it proves ``gap`` for
    ``choices`` or stops.

    Each probe stops once its plan is within ``GOOD_ENOUGH_GAP`` of its own bound (and after a
    share of the time left), and PDLP without restarts oscillates on the half-integral LPs of
    llama3.1-405b, so the probes' bounds lie up to 0.2 % below the LP's optimum and the
    search's gap lands near ``GOOD_ENOUGH_GAP`` (0.49-0.56 % in four runs). The probe with the
    best bound is not the best price either: at 0.003212 s/GB the LP's bound reaches
    1.54536 s, at the last cut's 0.003027 1.54645 (the plan: 1.55318). No plan is looked
    for: the block mix is cheaper than any plan with identical interior blocks."""
    priced = [p for p in probes if p.price > 0 and math.isfinite(p.bound)]
    if clock.expired() or (search.crossing is None and not priced):
        return search.bound
    price = search.crossing if search.crossing is not None else max(
        priced, key=lambda p: p.bound).price
    cost = problem.evaluate(choices)
    # the priced chain's bound that proves ``gap`` for the plan at hand
    target = cost * (1 - gap) + price * search.limit if math.isfinite(cost) else math.inf
    found = chain_bound(search.priced(price), chain, clock, pdlp_tolerance(gap), target)
    search.bound = max(search.bound, found.bound - price * search.limit)
    logger.info("memory price %.4g s/GB, bound only (%d PDLP iterations): bound %.6g",
                price * 1e9, found.iterations, search.bound)
    return search.bound


def solve_priced(problem: ChoiceProblem, chain: Chain, clock: Clock, gap: float,
                 before: Sizes, known_bound: float | None,
                 free_choices: tuple[int, ...] | None = None,
                 incumbent: tuple[int, ...] | None = None) -> Solution | None:
    """The best fitting plan the price search finds, with the best bound of any price
    (at least ``known_bound``); ``None`` when the rows cannot be priced or no plan fit.

    The row priced first is the one where ``free_choices`` (the optimum without memory
    rows, when the caller has it) peaks: the row that plan must come down on. If the search
    leaves a gap, the row where its cheapest non-fitting plan peaks is priced next (where no
    price made a plan fit, the row where the plan of the highest price peaks: the row that
    kept even the leanest priced plan over; each round's bound is valid, the best is kept).
    ``incumbent``: the caller's plan, a probe's
    first plan only if the time runs out before the probe finds one
    (``solve_periodic(rescue=)``)."""
    if problem.memory_limit is None or not problem.memory_rows():
        return None
    scale = abs(known_bound) if known_bound not in (None, 0.0) else 1.0
    index = None if free_choices is None else peak_row(problem, free_choices)
    tried: list[int | None] = []
    probes: list[Probe] = []
    bound = known_bound
    search: _PriceSearch | None = None
    while len(tried) < ROW_ROUNDS and index not in tried:
        tried.append(index)
        row = priced_row(problem, chain, index)
        if row is None:
            break
        search = _PriceSearch(problem, chain, row, clock, gap, bound,
                              incumbent if not probes else probes[-1].choices)
        search.run(scale / max(problem.memory_limit, 1.0), free_choices)
        probes += [*search.probes, *search.repaired]
        bound = search.bound
        best = search.best
        cheap = [p for p in probes if not p.fits and (best is None or p.cost < best.cost)]
        if best is None or search.done() or not cheap:
            break
        index = peak_row(problem, min(cheap, key=lambda p: p.cost).choices)
        if search.cut_side is None:
            # no price made a plan fit: the row that kept the leanest priced plan over
            index = peak_row(problem, search.probes[0].choices)
    fitting = [p for p in probes if p.fits]
    if not fitting:
        return None
    assert bound is not None
    choices, how = _best_plan(problem, chain, probes, bound, gap, clock)
    if search is not None and not closed(problem.evaluate(choices), bound,
                                         max(gap, TIGHTEN_GAP)):
        bound = _tighten(problem, chain, search, probes, choices, gap, clock)
    timed_out = clock.remaining() == 0.0
    answer = finish(problem, choices, bound, timed_out, clock, "priced", before, before)
    if how is None or answer.optimal:
        return answer
    return dataclasses.replace(answer, restricted=how)

