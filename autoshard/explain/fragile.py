"""The fragile decisions of a plan: the tensors whose layout has the closest alternative.

Re-solving every alternative of every tensor is out of reach (thousands of tensors, dozens of
layouts each, a solve per pair), so the search is two-staged:

1. every (tensor, other layout) is priced by its single-change bound: the plan with only the
   producer switched to its cheapest option writing that layout, every other op kept. It is
   an upper bound of the true change (that plan is feasible, the re-solve can only do better),
   computed from the cost tables in one pass;
2. tensors are grouped by layer pattern (``layers.*.attn.wq``: identical layers make the same
   decision), each group keeps its closest alternative by bound (among equal bounds, a tensor
   of the first or last layer, whose re-solve stays periodic: :func:`inner_layers`), and the
   ``shortlist`` groups with the smallest bounds are re-solved with that alternative pinned
   (each within what is left of the time limit, if one is given). The ``count`` smallest
   re-solved changes are reported (``count=0``: all of them, as ``--limit 0`` is every
   alternative of one tensor).

A decision outside the shortlist can still be closer than one inside (its bound was loose);
the report says how many were re-solved out of how many.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoshard.explain.alternatives import NOT_RESOLVED, Alternative
from autoshard.explain.context import (
    ExplainContext,
    inner_layers,
    resolve_each,
    single_change,
    single_change_deltas,
    time_limit_note,
)
from autoshard.planning.pin_masks import record_layout
from autoshard.planning.pins import forced_pin
from autoshard.planning.summary import layer_pattern
from autoshard.sharding.tensor_sharding import TensorSharding


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """A tensor (standing for its layer pattern), its layout, and its closest alternative."""

    tensor: str
    pattern: str
    tensors: int
    placement: str
    alternative: Alternative


@dataclass(frozen=True, slots=True, kw_only=True)
class Fragility:
    decisions: tuple[Decision, ...]
    note: str
    total_s: float
    peak_bytes: float


def fragile_decisions(ctx: ExplainContext, count: int = 10, shortlist: int = 20) -> Fragility:
    """The ``count`` decisions (0: every one re-solved) whose closest alternative changes the
    step time least, among the ``shortlist`` (at least ``count``) re-solved."""
    candidates, groups = _candidates(ctx)
    candidates.sort(key=lambda c: (c[0], c[1]))
    chosen = candidates[:max(shortlist, count)]
    count = count or len(chosen)
    base_s, base_peak = ctx.plan.objective.total_s, ctx.plan.peak_bytes_per_device
    outcomes = resolve_each(ctx, [(forced_pin(tensor, layout), None, start)
                                  for _, _, tensor, layout, start in chosen],
                            "fragile decisions")
    decisions = []
    for (bound, pattern, tensor, layout, _), outcome in zip(chosen, outcomes, strict=True):
        if outcome is None:  # the time limit ran out: the bound only
            alternative = Alternative(placement=_text(layout), bound_s=bound)
        else:
            alternative = Alternative(
                placement=_text(layout), bound_s=bound, status=outcome.status,
                delta_s=None if outcome.total_s is None else outcome.total_s - base_s,
                delta_peak_bytes=None if outcome.peak_bytes is None
                else outcome.peak_bytes - base_peak)
        decisions.append(Decision(tensor=tensor, pattern=pattern, tensors=groups[pattern],
                                  placement=" ".join(ctx.plan.tensors[tensor].placements),
                                  alternative=alternative))
    decisions.sort(key=lambda d: (*_order(d.alternative), d.pattern))
    done = sum(outcome is not None for outcome in outcomes)
    verb = "re-solved" if done == len(chosen) else "shortlisted"
    note = (f"{verb} {len(chosen)} of {len(candidates)} decisions (one per layer pattern, "
            f"each with its closest alternative by single-change bound, the {len(chosen)} "
            "smallest bounds); each re-solve pins that alternative and re-optimises the rest"
            + time_limit_note(ctx, done, len(chosen)))
    return Fragility(decisions=tuple(decisions[:count]), note=note,
                     total_s=base_s, peak_bytes=base_peak)


def _order(alternative: Alternative) -> tuple[bool, bool, float]:
    """Re-solved with a plan, by change; re-solved without one; not re-solved, by bound."""
    if alternative.delta_s is not None:
        return (False, False, alternative.delta_s)
    if alternative.status == NOT_RESOLVED:
        return (True, True, alternative.bound_s)
    return (True, False, math.inf)


def _candidates(ctx: ExplainContext
                ) -> tuple[list[tuple[float, str, str, TensorSharding, tuple[int, ...]]],
                           dict[str, int]]:
    """Per layer pattern, the (bound, pattern, tensor, layout, start) of its closest
    alternative; ``start`` is the plan with that one change (:func:`single_change`)."""
    deltas = single_change_deltas(ctx)
    prepared = ctx.prepared
    inner = inner_layers(prepared.blocks)
    groups: dict[str, int] = {}
    best: dict[str, tuple[float, str, str, TensorSharding, int, np.ndarray]] = {}
    rank: dict[str, tuple[float, bool, str]] = {}
    cache: dict[tuple[Any, ...], list[tuple[TensorSharding, np.ndarray]]] = {}
    for i, op in enumerate(prepared.ops):
        strategies = prepared.strategies[i]
        if len(strategies) < 2:
            continue
        for j, name in enumerate(op.outputs):
            by_layout = _layouts(ctx, cache, strategies, name, j)
            if len(by_layout) < 2:
                continue
            pattern = layer_pattern(name)
            groups[pattern] = groups.get(pattern, 0) + 1
            chosen = next(lay for lay, options in by_layout if ctx.choices[i] in options)
            for layout, options in by_layout:
                bound = float(deltas[i][options].min())
                if layout == chosen or not np.isfinite(bound):
                    continue
                item = (bound, pattern, name, layout, i, options)
                if pattern not in best or _rank(item, i in inner) < rank[pattern]:
                    best[pattern], rank[pattern] = item, _rank(item, i in inner)
    return [(bound, pattern, name, layout, single_change(ctx, i, options, deltas[i]))
            for bound, pattern, name, layout, i, options in best.values()], groups


def _rank(item: tuple[Any, ...], inner: bool) -> tuple[float, bool, str]:
    """Which tensor stands for its pattern: the smallest bound; among equal bounds one outside
    the inner layers (:func:`~autoshard.explain.context.inner_layers`), then the first name."""
    bound, _, name = item[:3]
    return (bound, inner, name)


def _layouts(ctx: ExplainContext, cache: dict, strategies: tuple, name: str, j: int
             ) -> list[tuple[TensorSharding, np.ndarray]]:
    """The distinct layouts the options write for output ``j``, with the options of each."""
    tensor = ctx.graph.tensors[name]
    key = (id(strategies), j, tensor.role, tensor.shape)
    found = cache.get(key)
    if found is None:
        groups: dict[TensorSharding, list[int]] = {}
        for k, strategy in enumerate(strategies):
            layout = record_layout(ctx.graph, name, strategy.outputs[j], ctx.links,
                                   ctx.prepared.hbm_bw)
            groups.setdefault(layout, []).append(k)
        found = [(layout, np.array(ks)) for layout, ks in groups.items()]
        cache[key] = found
    return found


def _text(layout: TensorSharding) -> str:
    return " ".join(str(p) for p in layout.placements)
