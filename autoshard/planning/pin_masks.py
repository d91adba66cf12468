"""Pins turned into what the solver understands: the options each pinned op may still take.

Why masks and not a smaller problem: the per-op cost vectors and reshard matrices are shared
read-only arrays (one per op structure), and the solver drops options of infinite cost before
it does anything else. So an excluded option costs ``inf``, every array keeps its shape, and
the solver package still knows nothing about tensors.

A tensor's layout is the one its producer writes (after the reduction a graph output is owed,
as the plan records it); pinning a tensor keeps the producer's options that write exactly the
pinned layout. Errors name the rules: a pin no option satisfies, two pins on one op that no
option satisfies together, pinned neighbours that no reshard connects.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import solver
from autoshard.errors import PinConflictError, PinError, PinnedMemoryError
from autoshard.planning.output_fix import output_fix
from autoshard.planning.pins import Pins, TensorPin, resolve_pins
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import Strategy
from graphs import Op, OpGraph, TensorRole

SHOWN_LAYOUTS = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Restriction:
    """What the pins leave of one planning problem: per pinned tensor its pin, per node its
    allowed options, the node costs the solver gets, and the rules behind each node."""

    ops: Sequence[Op]
    pinned: Mapping[str, TensorPin] = field(default_factory=dict)
    masks: Mapping[int, np.ndarray] = field(default_factory=dict)
    costs: list[np.ndarray] = field(default_factory=list)
    rules_of: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    source_memory: Sequence[np.ndarray] = ()
    out_bytes: Sequence[tuple[np.ndarray, ...]] = ()
    nodes: Sequence[Any] = ()

    @classmethod
    def build(cls, graph: OpGraph, mesh: Mesh, ops: Sequence[Op],
              strategies: Sequence[tuple[Strategy, ...]],
              nodes: Sequence[Any], edges: Sequence[tuple[Any, ...]], links: MeshLinks,
              hbm_bw: float | None, pins: Pins | None,
              op_pins: Mapping[str, str] | None = None) -> Restriction:
        """Resolve ``pins`` on the graph, mask the options, check pinned neighbours."""
        costs = [n.cost for n in nodes]
        pinned = {} if pins is None else resolve_pins(pins, graph, mesh)
        masks = option_masks(graph, ops, strategies, pinned, links, hbm_bw, op_pins)
        if not masks:
            return cls(ops=ops, costs=costs, nodes=nodes)
        rules_of = rules_by_node(ops, pinned)
        check_edges(ops, masks, costs, edges, rules_of)
        return cls(ops=ops, pinned=pinned, masks=masks, costs=masked_costs(costs, masks),
                   rules_of=rules_of, source_memory=[n.memory for n in nodes],
                   out_bytes=[n.out_bytes for n in nodes], nodes=nodes)

    def unreachable(self, node: int | None) -> PinConflictError:
        """The solver found a node no allowed option of its neighbours can reach."""
        rules = tuple(dict.fromkeys(r for rs in self.rules_of.values() for r in rs))
        where = f"op {self.ops[node].name}" if node is not None else "an op"
        return PinConflictError(f"the pins leave {where} no strategy its pinned neighbours can "
                                f"reach ({'; '.join(rules[:4])})", rules=rules)

    def unpinned_infeasible(self, pinned: Any, backend: str, gap: float,
                            peak: Callable[[Sequence[int]], float],
                            time_limit: float | None = None) -> Any:
        """The memory-constrained ``pinned`` problem without the pins: its Infeasible
        certificate (the smallest unpinned peak), or None when it has a plan (then the pins
        are what does not fit). The unconstrained optimum is tried first: when it fits, no
        memory rows are needed to know a plan exists; then a plan that fits found without a
        search (``solver.fitting_plan``: the leanest plan, or that optimum repaired); only
        then the constrained search, for the certificate, within ``time_limit`` (what the
        plan's own limit leaves; a verdict cut short bounds the peak instead of proving it)."""
        # the ops' costs without the pins; shared reshards' nodes keep theirs
        costs = [n.cost for n in self.nodes] + list(pinned.node_costs[len(self.nodes):])
        began = time.perf_counter()
        quick = solver.solve(solver.ChoiceProblem(node_costs=costs, edges=pinned.edges,
                                                  blocks=pinned.blocks),
                             time_limit=time_limit, backend=backend, gap=gap)
        if peak(quick.choices) <= pinned.memory_limit:
            return None
        free = solver.ChoiceProblem(node_costs=costs, edges=pinned.edges,
                                    liveness=pinned.liveness,
                                    memory_limit=pinned.memory_limit, blocks=pinned.blocks)
        if solver.fitting_plan(free, quick.choices) is not None:
            return None  # a plan fits without the pins: no search needed to say so
        left = None if time_limit is None else max(
            time_limit - (time.perf_counter() - began), 0.01)
        try:
            solver.solve(free, time_limit=left, backend=backend, gap=gap)
        except solver.Infeasible as exc:
            return exc
        return None

    def memory_error(self, needed_bytes: float, limit_bytes: float, *, exact: bool = True
                     ) -> PinnedMemoryError:
        return PinnedMemoryError(needed_bytes=needed_bytes, limit_bytes=limit_bytes, exact=exact,
                                 rules=memory_excess(self.ops, self.pinned, self.masks,
                                                     self.source_memory, self.out_bytes))


def record_layout(graph: OpGraph, name: str, sharding: TensorSharding, links: MeshLinks,
                  hbm_bw: float | None) -> TensorSharding:
    """The layout a plan records for tensor ``name`` written as ``sharding``."""
    tensor = graph.tensors[name]
    if tensor.role is TensorRole.OUTPUT:
        sharding, _ = output_fix(sharding, tensor.shape, tensor.dtype.itemsize, links, hbm_bw)
    return sharding


def option_masks(graph: OpGraph, ops: Sequence[Op], strategies: Sequence[tuple[Strategy, ...]],
                 pins: Mapping[str, TensorPin], links: MeshLinks, hbm_bw: float | None,
                 op_pins: Mapping[str, str] | None = None) -> dict[int, np.ndarray]:
    """Per constrained node, which of its options the pins allow.

    Raises:
        PinError: a pinned layout no option of the producer writes (names rule and tensor).
        PinConflictError: pins on one op that no option satisfies together.
    """
    if not pins and not op_pins:
        return {}
    producer = {name: (i, j) for i, op in enumerate(ops) for j, name in enumerate(op.outputs)}
    cache: dict[tuple[Any, ...], np.ndarray] = {}
    masks: dict[int, np.ndarray] = {}
    why: dict[int, list[TensorPin]] = {}
    for name, pin in pins.items():
        i, j = producer[name]
        strats = strategies[i]
        output = graph.tensors[name].role is TensorRole.OUTPUT
        key = (id(strats), j, output, graph.tensors[name].shape, pin.key)
        mask = cache.get(key)
        if mask is None:
            mask = np.array([pin.matches(record_layout(graph, name, s.outputs[j], links, hbm_bw))
                             for s in strats], dtype=bool)
            cache[key] = mask
        if not mask.any():
            raise _no_option(graph, name, pin, strats, j, links, hbm_bw)
        masks[i] = mask if i not in masks else masks[i] & mask
        why.setdefault(i, []).append(pin)
        if not masks[i].any():
            rules = tuple(r for p in why[i] for r in p.rule_names())
            tensors = ", ".join(p.tensor for p in why[i])
            raise PinConflictError(
                f"no strategy of op {ops[i].name} writes its outputs {tensors} in the pinned "
                f"layouts together ({'; '.join(dict.fromkeys(rules))}); pin fewer of them",
                rules=tuple(dict.fromkeys(rules)), tensor=name)
    for name, label in (op_pins or {}).items():
        i = next(k for k, op in enumerate(ops) if op.name == name)
        mask = np.array([s.label == label for s in strategies[i]], dtype=bool)
        if not mask.any():
            raise PinError(f'op {name} has no strategy "{label}"')
        if i in masks and not (masks[i] & mask).any():
            rules = tuple(dict.fromkeys(r for p in why[i] for r in p.rule_names()))
            raise PinConflictError(f'strategy "{label}" of op {name} does not write its '
                                   f"outputs as {'; '.join(rules)} pin them", rules=rules)
        masks[i] = mask if i not in masks else masks[i] & mask
    return masks


def _no_option(graph: OpGraph, name: str, pin: TensorPin, strats: tuple[Strategy, ...],
               j: int, links: MeshLinks, hbm_bw: float | None) -> PinError:
    layouts = list(dict.fromkeys(
        " ".join(str(p) for p in record_layout(graph, name, s.outputs[j], links,
                                               hbm_bw).placements) for s in strats))
    shown = ", ".join(f"[{x}]" for x in layouts[:SHOWN_LAYOUTS])
    more = f" and {len(layouts) - SHOWN_LAYOUTS} more" if len(layouts) > SHOWN_LAYOUTS else ""
    shape = "x".join(map(str, graph.tensors[name].shape)) or "scalar"
    rule = pin.rule_names()[-1] if pin.rules else "a pin"
    return PinError(f"{rule}: tensor {name} ({shape}) cannot be laid out as {pin.describe()}; "
                    f"its layouts are {shown}{more}", rule=rule, tensor=name)


def check_edges(ops: Sequence[Op], masks: Mapping[int, np.ndarray],
                costs: Sequence[np.ndarray], edges: Sequence[tuple[Any, ...]],
                rules_of: Mapping[int, tuple[str, ...]]) -> None:
    """Pinned ops whose allowed options cost inf, or pinned neighbours no reshard connects.

    Raises:
        PinConflictError: naming the rules of the ops involved.
    """
    for i, mask in masks.items():
        if not np.isfinite(costs[i][mask]).any():
            rules = rules_of.get(i, ())
            raise PinConflictError(f"op {ops[i].name} has no possible strategy left under "
                                   f"{'; '.join(rules) or 'the pins'} (its pinned outputs "
                                   "cannot be completed)", rules=rules)
    for u, v, matrix, (tensor, *_rest) in edges:
        if u in masks and v in masks:
            block = matrix[np.ix_(masks[u], masks[v])]
            if not np.isfinite(block).any():
                rules = tuple(dict.fromkeys((*rules_of.get(u, ()), *rules_of.get(v, ()))))
                raise PinConflictError(
                    f"tensor {tensor} cannot move from op {ops[u].name} to op {ops[v].name} "
                    f"under {'; '.join(rules)}: no reshard connects the pinned layouts",
                    rules=rules, tensor=tensor)


def masked_costs(costs: Sequence[np.ndarray], masks: Mapping[int, np.ndarray]
                 ) -> list[np.ndarray]:
    """``costs`` with excluded options at inf; identical (cost, mask) pairs share one array,
    so identical pinned layers still look identical to the solver's periodic check."""
    shared: dict[tuple[int, bytes], np.ndarray] = {}
    out = list(costs)
    for i, mask in masks.items():
        key = (id(costs[i]), mask.tobytes())
        array = shared.get(key)
        if array is None:
            array = np.where(mask, costs[i], np.inf)
            array.setflags(write=False)
            shared[key] = array
        out[i] = array
    return out


def rules_by_node(ops: Sequence[Op], pins: Mapping[str, TensorPin]) -> dict[int, tuple[str, ...]]:
    """The rule names that constrain each node."""
    producer = {name: i for i, op in enumerate(ops) for name in op.outputs}
    found: dict[int, list[str]] = {}
    for name, pin in pins.items():
        found.setdefault(producer[name], []).extend(pin.rule_names())
    return {i: tuple(dict.fromkeys(names)) for i, names in found.items()}


def memory_excess(ops: Sequence[Op], pins: Mapping[str, TensorPin],
                  masks: Mapping[int, np.ndarray], source_memory: Sequence[np.ndarray],
                  out_bytes: Sequence[tuple[np.ndarray, ...]]) -> tuple[tuple[str, float], ...]:
    """Per rule, the bytes its pinned tensors hold beyond their leanest layouts, largest
    first: which pins to relax when the pinned plan does not fit. A tensor's excess goes to
    the last rule that pinned it (the one that decided its layout)."""
    producer = {name: (i, j) for i, op in enumerate(ops) for j, name in enumerate(op.outputs)}
    excess: dict[str, float] = {}
    for name, pin in pins.items():
        i, j = producer[name]
        vector = source_memory[i] if source_memory[i].any() else out_bytes[i][j]
        extra = float(vector[masks[i]].min() - vector.min())
        if extra > 0 and pin.rules:
            rule = pin.rule_names()[-1]
            excess[rule] = excess.get(rule, 0.0) + extra
    return tuple(sorted(excess.items(), key=lambda item: (-item[1], item[0])))
