"""Closing a periodic LP's last gap exactly: integral end blocks and reduced-cost fixing.

The periodic LP (:mod:`solver.periodic`) bounds the whole chain by mapping every plan of it
onto one LP point: the rest ``R`` and the distinct end blocks keep the plan's own 0/1
choices, while the representative of the tied blocks holds their *average*. So the LP stays a
relaxation when the nodes of ``R`` and of the distinct blocks (and the LP nodes the reductions
merged from them alone) are required to be integral, and only they: the tied representative
may stay fractional. The optimum of that partial MIP is a lower bound of the whole problem, at
least the LP's.

Where the LP is fractional it is usually fractional there: llama3-70b on dp=8,tp=8 under the
op overlap objective splits the embedding and the first layer's attention 50/50 between two
strategies (40 of 200 LP nodes, all in ``R`` and block 0; every tied node integral); the
LP's bound is 6.2e-6 below the best plan and stays 5.9e-6 below with two distinct blocks at
each end. The partial MIP proves that plan optimal (its bound meets the plan to 3e-14).

The MIP is made smaller first by **reduced-cost fixing** (Nemhauser & Wolsey, *Integer and
Combinatorial Optimization*, 1988, II.2.1): with row multipliers y, bound ``DB`` and reduced
costs ``d = c − Aᵀy``, every LP point v costs at least ``DB + d_j·v_j`` (the weak-duality sum
with that one term kept). A plan cheaper than the best one ``U`` maps onto an LP point with
``v_j`` 0 or 1 on an integral node, so an option there with ``DB + d_j ≥ U`` is in no such
plan; on the tied representative a used option has ``v_j ≥ 1/w`` (w tied blocks), so there
it goes when ``DB + d_j/w ≥ U``. Fixed options get an upper bound of 0, and the bound proven
is then ``min(U, partial MIP bound)``: valid for the whole problem, as any plan either costs
at least U or lives in the restricted MIP. On 70b this leaves 2,902 of 4,599 options and
HiGHS closes the MIP at its root in ~5 s (14 s without the fixing; 2-core machine under load).

The same holds for every other LP variable, edge variables and flow arcs included: a plan's
image routes each edge's unit along one cheapest route, so an arc's value there is 0/1 when
both ends are integral nodes and a multiple of ``1/w`` when one is tied (the edge then
belongs to the tied blocks). Fixing them all is what makes the MIP small on 3-axis meshes,
where nine tenths of the ~1 M variables are arcs. It also turns PDLP's approximate duals
into a proof: on mixtral-8x7b dp=2,ep=4,tp=8, PDLP at a relative tolerance of 1e-5 leaves
its bound 2.4e-5 below the plan; fixing against the plan keeps 27,797 of 915,976 variables
and the MIP over them proves the plan optimal in 0.4 s.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from solver.backends import mathopt
from solver.backends.flow_arcs import FlowArcs
from solver.backends.formulation import Formulation, cheapest_route, decode
from solver.backends.lp_answer import objective_factor, reduced_costs
from solver.backends.mip_bound import partial_mip
from solver.periodic import Aggregated, PeriodicLP

SAFETY = 1e-9  # relative margin an option's reduced-cost bound must clear to be fixed
FRACTIONAL = 1e-6  # an LP node whose chosen option's x is below 1 by more is split
MAX_VARS = 200_000  # above this (3-axis LPs for PDLP) the MIP costs more than the restricted search


@dataclass(frozen=True, slots=True, eq=False)
class Closed:
    """The partial MIP's answer: ``bound`` (a lower bound of the whole problem, at most the
    incumbent it was given), and ``x``, the LP node choices of its best point (``None`` when it
    found none)."""

    bound: float
    x: np.ndarray | None


def integral_mask(lp: PeriodicLP, agg: Aggregated) -> tuple[np.ndarray, np.ndarray]:
    """``(integral, tied)`` per LP node: all its members in ``R`` or a distinct block (so
    0/1 in every plan's image), or all in the tied representative (image ``count / w``)."""
    distinct = set(agg.rest)
    for k, nodes in enumerate(agg.block_nodes):
        if k not in agg.tied:
            distinct.update(nodes)
    representative = set(agg.block_nodes[agg.tied[0]])
    integral = np.array([all(m in distinct for m in group) for group in lp.members], dtype=bool)
    tied = np.array([all(m in representative for m in group) for group in lp.members],
                    dtype=bool)
    return integral, tied


def worth_closing(lp: PeriodicLP, agg: Aggregated, weight: np.ndarray) -> bool:
    """Whether the partial MIP can raise an *exact* LP's bound: the LP is small enough for a
    MIP and split some node the MIP makes integral. Where it split none, the LP's point is
    already the partial MIP's optimum and the gap is the relaxed junctions' (mixtral-8x7b on
    ep=8,tp=8 without the last-tied-block rows: LP integral, 1e-4 short of the plan, closed
    by two distinct end blocks). A first-order LP's duals are another matter: there the
    MIP over what fixing leaves is solved exactly and lifts the bound to the LP optimum at
    least (:func:`kept_after_fixing`)."""
    if lp.form.num_vars > MAX_VARS:
        return False
    integral, _ = integral_mask(lp, agg)
    return bool((integral & (weight < 1.0 - FRACTIONAL)).any())


def column_weights(lp: PeriodicLP, agg: Aggregated) -> tuple[np.ndarray, np.ndarray]:
    """``(weight, integral)`` per LP variable: the least positive value a variable takes in
    the image of a plan of the whole problem (1 on nodes of ``R``, the distinct blocks and
    their copies of a distinct block; ``1/w`` on the tied representative and its copies of
    the block before it, whose image is a count of tied blocks over ``w``; the smaller of
    its two ends' on an edge variable), 0 where no such value is known (merged nodes of
    both kinds, window time variables): never fixed. ``integral`` marks the x variables of
    nodes whose image is 0/1."""
    form = lp.form
    integral, tied = integral_mask(lp, agg)
    w = float(len(agg.tied))
    copies_0_1 = {terms[0][0] for terms in agg.links if len(terms) == 2}
    copies_0_1 |= {terms[1][0] for terms in agg.links if len(terms) == 4}
    copies_tied = {terms[0][0] for terms in agg.links if len(terms) == 4}
    node_weight = np.zeros(len(lp.members))
    for i, group in enumerate(lp.members):
        if integral[i] or all(m in copies_0_1 for m in group):
            node_weight[i], integral[i] = 1.0, True
        elif tied[i] or all(m in copies_tied for m in group):
            node_weight[i] = 1.0 / w
    weight = np.zeros(form.num_vars)
    weight[:form.num_x] = np.repeat(node_weight, np.diff(form.offsets))
    for u, v, _, _, lookup in form.edge_maps:
        weight[lookup[lookup >= 0]] = min(node_weight[u], node_weight[v])
    for flow in form.flow_maps:  # a substituted arc (-1) rides on its node's x
        weight[flow.variables[flow.variables >= 0]] = min(node_weight[flow.u],
                                                          node_weight[flow.v])
    for window in form.window_maps:
        weight[window.var] = 0.0
    return weight, np.repeat(integral, np.diff(form.offsets))


def fixed_options(lp: PeriodicLP, agg: Aggregated, duals: np.ndarray, incumbent: float
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(upper, integers)`` over the LP's variables: upper bound 0 on every variable no plan
    cheaper than ``incumbent`` can use (module docstring: ``DB + d_j·weight_j ≥ U``, the
    weight from :func:`column_weights`), 1 elsewhere; and the mask of the variables that
    must be integral."""
    form = lp.form
    bound, reduced = reduced_costs(form, duals)
    weight, integral_x = column_weights(lp, agg)
    threshold = incumbent + SAFETY * abs(incumbent)
    with np.errstate(invalid="ignore"):
        drop = (weight > 0) & (reduced > 0) & (bound + reduced * weight > threshold)
    upper = np.where(drop, 0.0, 1.0)
    integers = np.zeros(form.num_vars, dtype=bool)
    integers[:form.num_x] = integral_x
    return upper, integers


def kept_after_fixing(lp: PeriodicLP, agg: Aggregated, duals: np.ndarray, incumbent: float
                      ) -> int:
    """How many variables fixing against ``incumbent`` leaves free: the size of the MIP."""
    upper, _ = fixed_options(lp, agg, duals, incumbent)
    return int(np.count_nonzero(upper))


def threshold_keeping(lp: PeriodicLP, agg: Aggregated, duals: np.ndarray, incumbent: float,
                      budget: int) -> float | None:
    """The largest ``T ≤ incumbent`` at which fixing against ``T`` (:func:`fixed_options`)
    keeps at most ``budget`` variables, ``None`` when even ``T`` at the duals' bound keeps
    more.

    :func:`close_gap` given ``T`` instead of a plan's cost still proves ``min(T, MIP
    bound)``: a plan that uses a fixed variable j costs at least ``DB + d_j·weight_j > T``,
    and every other one lives in the MIP. So where fixing against the plan keeps too many
    variables for the MIP, a lower ``T`` proves part of the gap (llama3-8b-shaped
    dp=4,fsdp=4,tp=4, 4 layers, whole LP: fixing against the best plan keeps 267 k of 710 k
    variables and HiGHS does not finish in 200 s; at a quarter of the gap it keeps 67 k and
    proves that quarter in 9 s, at half of it 150 k in 46 s)."""
    form = lp.form
    bound, reduced = reduced_costs(form, duals)
    weight, _ = column_weights(lp, agg)
    with np.errstate(invalid="ignore"):
        droppable = (weight > 0) & (reduced > 0)
    reach = np.sort(reduced[droppable] * weight[droppable])
    room = budget - (form.num_vars - reach.size)
    if room <= 0 or not math.isfinite(bound):
        return None
    if room >= reach.size:
        return incumbent
    # T below the room-th smallest reach (by the fixing's safety margin): that one is fixed
    threshold = (bound + float(reach[room])) / (1.0 + 2 * SAFETY)
    return min(threshold, incumbent) if threshold > bound else None


# the first look's MIP keeps at most this share of the LP's variables, and its threshold is at
# most this far above the LP bound (relative): a first look is for LPs a hair below the
# optimum (``first_look_target``)
FIRST_LOOK_SHARE = 1 / 4
FIRST_LOOK_GAP = 1e-4


def first_look_target(lp: PeriodicLP, agg: Aggregated, duals: np.ndarray,
                      share: float = FIRST_LOOK_SHARE) -> float | None:
    """The threshold ``T`` of a first look (:func:`first_look_plan`): the largest at which
    fixing keeps at most ``share`` of the LP's variables (:func:`threshold_keeping`), and at
    most ``FIRST_LOOK_GAP`` above the duals' bound; ``None`` when fixing cannot get below that
    share. Every plan cheaper than ``T`` uses only the variables fixing keeps (its image is on
    no fixed variable), so a MIP over those finds it. An exact LP that split integral nodes
    is often only a hair below the optimum: llama3-70b dp=8,tp=8 under measured-curve prices,
    LP bound 1.2048846, optimum 1.2048918 (6e-6 above it); ``T`` is 3.3e-5 above the bound
    and keeps 10,690 of 42,760 variables."""
    bound, _ = reduced_costs(lp.form, duals)
    if not math.isfinite(bound):
        return None
    budget = int(lp.form.num_vars * share)
    target = threshold_keeping(lp, agg, duals, bound + FIRST_LOOK_GAP * abs(bound), budget)
    return target if target is not None and math.isfinite(target) else None


def first_look_plan(lp: PeriodicLP, agg: Aggregated, duals: np.ndarray, target: float,
                    time_limit: float | None, gap: float) -> np.ndarray | None:
    """LP node choices of the best periodic plan (every node integral, the tied
    representative too, as in :func:`support_plan`) among the variables fixing against
    ``target`` keeps (whenever a periodic plan costs less than ``target``, its image is among
    them), ``None`` when HiGHS found none. A plan, not a bound: the caller proves it with
    :func:`close_gap`. The MIP
    is small (a quarter of the LP at most, :func:`first_look_target`) and, unlike rounding
    the LP's split nodes and polishing around them, it weighs the whole periodic plan at
    once: llama3-8b dp=8,tp=8 with every axis priced at alpha-beta NVLink rates gets the
    optimum with one distinct block at each end, where the polishes ended 0.6 % above it."""
    started = time.perf_counter()
    upper, _ = fixed_options(lp, agg, duals, target)
    keep = upper > 0
    keep[[w.var for w in lp.form.window_maps]] = True
    starts, ends = lp.form.offsets[:-1], lp.form.offsets[1:]
    if not all(keep[a:b].any() for a, b in zip(starts, ends, strict=True)):
        return None
    return _periodic_mip(lp, agg, keep, time_limit, started, gap)


def close_gap(lp: PeriodicLP, agg: Aggregated, duals: np.ndarray, incumbent: float,
              time_limit: float | None, gap: float) -> Closed:
    """The partial MIP of the periodic LP, after reduced-cost fixing against ``incumbent``
    (the cost of a plan of the whole problem): its bound, capped at ``incumbent``. Only the
    variables fixing leaves go into the model (a 3-axis LP keeps a few thousand of ~1 M)."""
    started = time.perf_counter()
    form = lp.form
    upper, integers = fixed_options(lp, agg, duals, incumbent)
    starts = form.offsets[:-1]
    if not all(upper[a:b].any() for a, b in zip(starts, form.offsets[1:], strict=True)):
        return Closed(bound=incumbent, x=None)  # every plan costs at least the incumbent
    columns = np.flatnonzero(upper)
    sub = _columns(form, columns)
    answer = partial_mip(sub, integers[columns], incumbent, gap,
                         mathopt.left(time_limit, started))
    if answer.infeasible:
        return Closed(bound=incumbent, x=None)  # likewise: nothing below the incumbent
    bound = min(answer.bound, incumbent)
    if answer.values is None:
        return Closed(bound=bound, x=None)
    values = np.zeros(form.num_vars)
    values[columns] = answer.values
    return Closed(bound=bound, x=decode(form, values))


def _columns(form: Formulation, columns: np.ndarray) -> Formulation:
    """``form`` on the given columns only (every row kept), as a plain LP/MIP."""
    keep = np.zeros(form.num_vars, dtype=bool)
    keep[columns] = True
    renumber = np.full(form.num_vars, -1, dtype=np.int64)
    renumber[columns] = np.arange(columns.size)
    used = keep[form.cols]
    return dataclasses.replace(form, obj=form.obj[columns], rows=form.rows[used],
                               cols=renumber[form.cols[used]], coefs=form.coefs[used],
                               num_x=0, offsets=np.zeros(1, dtype=np.int64), edge_maps=(),
                               flow_maps=(), window_maps=())


SUPPORT_X = 1e-3  # an option with LP x above this is on the support


def support_columns(form: Formulation, values: np.ndarray, deadline: float | None = None
                    ) -> np.ndarray | None:
    """The variables a plan using only the LP's support options (x above ``SUPPORT_X``, and
    each node's largest) needs: those options, every edge's pairs between their groups, one
    cheapest route of each flow network between them (a route prices its pair exactly and
    no combination of arcs prices a pair below its cost, so the MIP on these columns costs
    every such plan exactly), and the window time variables. ``None`` once ``deadline``
    (``perf_counter``) has passed: a PDLP point stopped early spreads over so many options
    that the routes take minutes (llama3.1-405b's second periodic LP, 787 k variables after
    189 iterations: 200 s past the search's time limit)."""
    form_x = values[:form.num_x]
    keep = np.zeros(form.num_vars, dtype=bool)
    keep[:form.num_x] = form_x > SUPPORT_X
    for a, b in zip(form.offsets[:-1], form.offsets[1:], strict=True):
        keep[a + int(np.argmax(form_x[a:b]))] = True
    chosen = [keep[a:b] for a, b in zip(form.offsets[:-1], form.offsets[1:], strict=True)]
    for u, v, inv_r, inv_c, lookup in form.edge_maps:
        rows, cols = np.unique(inv_r[chosen[u]]), np.unique(inv_c[chosen[v]])
        ids = lookup[np.ix_(rows, cols)]
        keep[ids[ids >= 0]] = True
    for flow in form.flow_maps:
        for row in np.unique(flow.inv_r[chosen[flow.u]]):
            if deadline is not None and time.perf_counter() > deadline:
                return None
            reach = _reachable(flow.arcs, int(row))
            for column in np.unique(flow.inv_c[chosen[flow.v]]):
                target = flow.rows + int(column)
                if target >= reach.size or not reach[target]:
                    continue  # an impossible pair (inf): no plan uses it, no column needed
                route = flow.variables[cheapest_route(flow.arcs, int(row), target)]
                keep[route[route >= 0]] = True  # a substituted arc rides on a kept x
    for window in form.window_maps:
        keep[window.var] = True
    return keep


def _reachable(arcs: FlowArcs, source: int) -> np.ndarray:
    """Per network node, whether some route from ``source`` reaches it (a pair priced inf has
    no arc path: an edge's matrix may forbid pairs, e.g. a copy node that must agree with its
    original)."""
    nodes = int(max(arcs.tails.max(), arcs.heads.max())) + 1
    seen = np.zeros(max(nodes, source + 1), dtype=bool)
    seen[source] = True
    while True:
        grown = seen.copy()
        grown[arcs.heads[seen[arcs.tails]]] = True
        if (grown == seen).all():
            return seen
        seen = grown


def support_plan(lp: PeriodicLP, agg: Aggregated, values: np.ndarray,
                 time_limit: float | None, gap: float) -> np.ndarray | None:
    """LP node choices of the best point of the MIP on the LP's support (:func:`support_columns`)
    with the rest, the distinct blocks *and* the tied representative integral; ``None`` if it
    found none. With the last-tied-block rows an integral representative forces the copy
    after the run to its choice, so the MIP's cost is that of the periodic plan it expands
    to: where the LP averages two mirror-image plans (equal mesh axes: llama3.1-405b on
    dp=8,fsdp=8,tp=8 splits 188 of 200 nodes 50/50), rounding node by node mixes the mirrors
    and pays for it, while the MIP picks one."""
    started = time.perf_counter()
    form = lp.form
    keep = support_columns(form, values, None if time_limit is None else started + time_limit)
    if keep is None:
        return None
    return _periodic_mip(lp, agg, keep, time_limit, started, gap)


NEIGHBOURHOOD = 1 / 32  # share of the incumbent's gap the neighbourhood plan searches


def neighbourhood_plan(lp: PeriodicLP, agg: Aggregated, duals: np.ndarray, incumbent: float,
                       time_limit: float | None, gap: float) -> np.ndarray | None:
    """LP node choices of the best periodic plan the MIP finds on the variables whose reduced
    cost is below ``NEIGHBOURHOOD`` of the gap between ``incumbent`` and the duals' bound,
    with every node integral (the tied representative too, so the point is a periodic plan);
    ``None`` if it found none. A heuristic (``solver.backends.fixing.neighbourhood_plan`` on
    the periodic LP): it only looks for a better plan, the bound is not touched. The plan on
    the LP's support prices the LP's split between two plans; where the LP averages plans
    that cannot be joined (frustrated cycles: llama3-8b-shaped dp=4,fsdp=4,tp=4 splits 131
    of 251 nodes 50/50 around 95 cycles), the best plan uses options off the support."""
    started = time.perf_counter()
    form = lp.form
    bound, reduced = reduced_costs(form, duals)
    limit = (incumbent - bound) * NEIGHBOURHOOD
    keep = np.ones(form.num_vars, dtype=bool)
    with np.errstate(invalid="ignore"):
        keep &= ~(reduced > limit)
    keep[[w.var for w in form.window_maps]] = True
    starts, ends = form.offsets[:-1], form.offsets[1:]
    if not all(keep[a:b].any() for a, b in zip(starts, ends, strict=True)):
        return None
    return _periodic_mip(lp, agg, keep, time_limit, started, gap)


def _periodic_mip(lp: PeriodicLP, agg: Aggregated, keep: np.ndarray, time_limit: float | None,
                  started: float, gap: float) -> np.ndarray | None:
    """LP node choices of the best plan HiGHS finds on the ``keep`` columns with every node
    integral (the tied representative too: a periodic plan), ``None`` if it found none;
    ``time_limit`` counts from ``started`` (``perf_counter``), the model's build included."""
    from ortools.math_opt import solution_pb2

    form = lp.form
    columns = np.flatnonzero(keep)
    _, tied = integral_mask(lp, agg)
    _, integral_x = column_weights(lp, agg)
    integers = np.zeros(form.num_vars, dtype=bool)
    integers[:form.num_x] = integral_x | np.repeat(tied, np.diff(form.offsets))
    sub = _columns(form, columns)
    proto = mathopt.model_proto(sub, objective_factor(form), integers=integers[columns])
    params, model_params = mathopt.parameters(mathopt.left(time_limit, started), gap, None, sub)
    result = mathopt.run(proto, "HIGHS", params, model_params)
    for solution in result.solutions:
        primal = solution.primal_solution
        if primal.feasibility_status == solution_pb2.SOLUTION_STATUS_FEASIBLE:
            full = np.zeros(form.num_vars)
            full[columns] = mathopt.values(sub, primal)
            return decode(form, full)
    return None
