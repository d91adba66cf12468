"""Why a tensor or op is laid out as the plan has it: what it costs there, and what each other
layout (or strategy) would change in the whole step, by re-solving with it pinned.

Alternatives are first ranked by their single-change bound (:mod:`autoshard.explain.context`),
then the ``limit`` best of them are re-solved; the report says how many. A re-solve that
proves optimality gives the exact change of the best plan that uses the alternative.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoshard.errors import UsageError
from autoshard.explain.context import (
    ExplainContext,
    resolve_each,
    single_change,
    single_change_deltas,
    time_limit_note,
    warn_if_whole_model,
)
from autoshard.planning.pin_masks import record_layout
from autoshard.planning.pins import forced_pin
from autoshard.sharding.tensor_sharding import TensorSharding
from graphs import DType

NOT_RESOLVED = "not re-solved"


@dataclass(frozen=True, slots=True, kw_only=True)
class Alternative:
    """One other placement (or strategy) and what forcing it changes."""

    placement: str
    bound_s: float
    delta_s: float | None = None
    delta_peak_bytes: float | None = None
    status: str = NOT_RESOLVED  # or how the re-solve ended


@dataclass(frozen=True, slots=True, kw_only=True)
class Explanation:
    """The chosen placement of a tensor or strategy of an op, its costs, its alternatives."""

    kind: str
    name: str
    placement: str
    facts: dict[str, Any]
    reshards_in: tuple[dict[str, Any], ...]
    reshards_out: tuple[dict[str, Any], ...]
    alternatives: tuple[Alternative, ...]
    note: str
    total_s: float
    peak_bytes: float
    extra: dict[str, Any] = field(default_factory=dict)


def explain_tensor(ctx: ExplainContext, name: str, limit: int = 0) -> Explanation:
    """The chosen layout of tensor ``name`` and each other layout its producer can write.

    Raises:
        UsageError: no tensor of that name in the plan.
    """
    plan = ctx.plan
    if name not in plan.tensors:
        raise UsageError(_unknown("tensor", name, plan.tensors))
    index = ctx.node_index()
    op = ctx.graph.producer(name)
    i, j = index[op.name], list(op.outputs).index(name)
    deltas = single_change_deltas(ctx)[i]
    layouts: dict[TensorSharding, float] = {}
    options: dict[TensorSharding, list[int]] = {}
    for k, strategy in enumerate(ctx.prepared.strategies[i]):
        layout = record_layout(ctx.graph, name, strategy.outputs[j], ctx.links,
                               ctx.prepared.hbm_bw)
        layouts[layout] = min(layouts.get(layout, math.inf), float(deltas[k]))
        options.setdefault(layout, []).append(k)
    chosen_layout = record_layout(ctx.graph, name,
                                  ctx.prepared.strategies[i][ctx.choices[i]].outputs[j],
                                  ctx.links, ctx.prepared.hbm_bw)
    candidates = [(bound, layout) for layout, bound in layouts.items() if layout != chosen_layout]
    candidates.sort(key=lambda item: (item[0], _text(item[1])))
    warn_if_whole_model(ctx, i, _count(limit, len(candidates)), output=j)
    alternatives, note = _resolve_all(
        ctx, [(_text(lay), bound, {"pins": forced_pin(name, lay),
                                   "start": single_change(ctx, i, options[lay], deltas)})
              for bound, lay in candidates],
        limit, f"tensor {name}")
    record = plan.tensors[name]
    local = chosen_layout.local_shape(record.shape, even=False)
    facts = {"role": record.role, "shape": list(record.shape), "dtype": record.dtype,
             "local_shape": list(local),
             "memory_bytes": float(np.prod(local)) * DType(record.dtype).itemsize,
             "producer": op.name, "producer_strategy": plan.ops[op.name].strategy,
             "compute_s": plan.ops[op.name].compute_s, "comm_s": plan.ops[op.name].comm_s,
             "pinned_by": _pinned_by(ctx, name)}
    return Explanation(kind="tensor", name=name, placement=_text(chosen_layout), facts=facts,
                       reshards_in=_reshards(plan, consumer=op.name),
                       reshards_out=_reshards(plan, tensor=name), alternatives=alternatives,
                       note=note, total_s=plan.objective.total_s,
                       peak_bytes=plan.peak_bytes_per_device)


def explain_op(ctx: ExplainContext, name: str, limit: int = 0) -> Explanation:
    """The chosen strategy of op ``name`` and each other strategy it has.

    Raises:
        UsageError: no op of that name in the plan.
    """
    plan = ctx.plan
    if name not in plan.ops:
        raise UsageError(_unknown("op", name, plan.ops))
    i = ctx.node_index()[name]
    deltas = single_change_deltas(ctx)[i]
    strategies = ctx.prepared.strategies[i]
    candidates = sorted(((k, (float(deltas[k]), s.label)) for k, s in enumerate(strategies)
                         if k != ctx.choices[i]), key=lambda item: item[1])
    warn_if_whole_model(ctx, i, _count(limit, len(candidates)))
    alternatives, note = _resolve_all(
        ctx, [(label, bound, {"op_pins": {name: label},
                              "start": single_change(ctx, i, [k], deltas)})
              for k, (bound, label) in candidates],
        limit, f"op {name}")
    record, node = plan.ops[name], ctx.prepared.nodes[i]
    facts = {"kind": record.kind, "compute_s": record.compute_s, "comm_s": record.comm_s,
             "flops": record.flops,
             "working_set_bytes": float(node.working[ctx.choices[i]]),
             "resident_bytes": record.memory_bytes,
             "outputs": _outputs(ctx, name)}
    return Explanation(kind="op", name=name, placement=record.strategy, facts=facts,
                       reshards_in=_reshards(plan, consumer=name),
                       reshards_out=tuple(r for t in facts["outputs"]
                                          for r in _reshards(plan, tensor=t)),
                       alternatives=alternatives, note=note, total_s=plan.objective.total_s,
                       peak_bytes=plan.peak_bytes_per_device)


def _outputs(ctx: ExplainContext, name: str) -> dict[str, str]:
    op = ctx.prepared.ops[ctx.node_index()[name]]
    return {t: " ".join(ctx.plan.tensors[t].placements) for t in op.outputs}


def _resolve_all(ctx: ExplainContext, candidates: list[tuple[str, float, dict[str, Any]]],
                 limit: int, what: str) -> tuple[tuple[Alternative, ...], str]:
    """Re-solve the ``limit`` candidates with the smallest bound (all when 0), sorted by the
    re-solved change (then by bound for the rest)."""
    count = _count(limit, len(candidates))
    base_s, base_peak = ctx.plan.objective.total_s, ctx.plan.peak_bytes_per_device
    outcomes = resolve_each(ctx, [(forced.get("pins"), forced.get("op_pins"),
                                   forced.get("start")) for _, _, forced in candidates[:count]],
                            f"alternatives of {what}")
    done, rest = [], []
    for (text, bound, _), outcome in zip(candidates,
                                         outcomes + [None] * (len(candidates) - count),
                                         strict=True):
        if outcome is None:
            rest.append(Alternative(placement=text, bound_s=bound))
        elif outcome.feasible:
            done.append(Alternative(placement=text, bound_s=bound,
                                    delta_s=outcome.total_s - base_s,
                                    delta_peak_bytes=outcome.peak_bytes - base_peak,
                                    status=outcome.status))
        else:
            done.append(Alternative(placement=text, bound_s=bound, status=outcome.status))
    done.sort(key=lambda a: (a.delta_s is None, a.delta_s if a.delta_s is not None else 0.0,
                             a.placement))
    note = (f"each alternative of {what} re-solved with it pinned (the rest of the plan "
            f"re-optimised): {count} of {len(candidates)}")
    if count < len(candidates):
        note += (", those with the smallest single-change bound; the others show only that "
                 "bound (an upper bound of the change)")
    note += time_limit_note(ctx, len(done), count)
    return tuple(done + rest), note


def _count(limit: int, candidates: int) -> int:
    """How many of ``candidates`` alternatives are re-solved under ``--limit``."""
    return candidates if limit <= 0 else min(limit, candidates)


def _reshards(plan: Any, *, tensor: str | None = None, consumer: str | None = None
              ) -> tuple[dict[str, Any], ...]:
    rows = []
    for r in plan.reshards:
        if (tensor is not None and r.tensor != tensor) or \
                (consumer is not None and r.consumer != consumer):
            continue
        rows.append({"tensor": r.tensor, "producer": r.producer, "consumer": r.consumer,
                     "src": " ".join(r.src), "dst": " ".join(r.dst),
                     "collectives": " + ".join(f"{c.kind} over {','.join(c.axes)}"
                                               for c in r.collectives),
                     "seconds": r.seconds})
    return tuple(rows)


def _pinned_by(ctx: ExplainContext, name: str) -> list[str]:
    pins = ctx.prepared.pinned.get(name)
    return list(pins.rule_names()) if pins is not None else []


def _text(layout: TensorSharding) -> str:
    return " ".join(str(p) for p in layout.placements)


def _unknown(what: str, name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, list(known), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; plan.json lists them"
    return f'the plan has no {what} "{name}"{hint}'
