"""Per-layer seconds and bytes of an intra-stage plan: what the stage partition works with.

The intra-stage plan is an ordinary plan (one micro-batch, the non-``pp`` axes); its records
say, per op, the seconds of one run and the local shapes. Here they are summed per layer
(:func:`~autoshard.planning.layers.layer_of`) and phase: forward; backward split into B
(input gradients) and W (the ops that produce a parameter's gradient, which the zero-bubble
schedule defers); and the tail that runs once per step (the gradient sync into the optimizer
and the optimizer itself). Each reshard is charged to its consumer op, at what the step model
charges it (exposed in full, or what the op it hides behind does not cover). Beside those
seconds each part keeps what they are made of (its ops' compute, its communication with every
collective counted once, and the part of that which ran beside another mesh axis's), per
micro-batch and per step, so that a stage's step splits into compute, exposed, hidden and
idle time that add up (:func:`.record.pipeline_objective`). Ops outside every
layer are the embedding (``pre``: before the first layer's forward) or the head and loss
(``post``), placed on the first and last stage.

Bytes per device: parameters, their gradients and optimizer state (resident all step), the
forward outputs a backward op reads (kept per micro-batch in flight), and the activation that
crosses each layer boundary (what a stage sends to the next).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from autoshard.planning.layers import layer_of
from autoshard.planning.pipeline.stage_rows import INTO, OUT_OF, PART_NAMES, POST, PRE
from autoshard.planning.record import Plan
from autoshard.planning.step_parts import beside_seconds
from autoshard.planning.step_problem import exposed_seconds
from graphs import Op, OpGraph, TensorRole

STATIC_ROLES = (TensorRole.PARAM, TensorRole.GRAD, TensorRole.OPTIMIZER_STATE)
PREFIXES = ("bwd/", "opt/", "grad/", "recompute/")


@dataclass(frozen=True, slots=True)
class PartCost:
    """One layer (or the embedding, or the head) on one device of its stage: seconds per
    micro-batch of forward, B and W; seconds per step of its tail; bytes resident all step
    (``static_bytes``), saved per micro-batch in flight (``activation_bytes``) and, of those
    plus the output gradients, what the weight-gradient ops read (``weight_bytes``: held
    from B to W when a zero-bubble schedule defers W)."""

    forward_s: float = 0.0
    backward_s: float = 0.0
    weight_s: float = 0.0
    tail_s: float = 0.0
    static_bytes: float = 0.0
    activation_bytes: float = 0.0
    weight_bytes: float = 0.0  # what a deferred W keeps from its B to itself
    # what the seconds above are made of, per micro-batch (forward + backward) and per step
    # (tail): the ops' compute, the communication (every collective once, hidden or not) and,
    # of that, what ran beside another mesh axis's (:mod:`autoshard.planning.step_parts`)
    ops_compute_s: float = 0.0
    comm_s: float = 0.0
    concurrent_s: float = 0.0
    tail_compute_s: float = 0.0
    tail_comm_s: float = 0.0
    tail_concurrent_s: float = 0.0

    def __add__(self, other: PartCost) -> PartCost:
        return PartCost(*(a + b for a, b in zip(_fields(self), _fields(other), strict=True)))

    def scaled(self, factor: float) -> PartCost:
        return PartCost(*(a * factor for a in _fields(self)))

    @property
    def compute_s(self) -> float:
        """Forward plus whole backward, per micro-batch."""
        return self.forward_s + self.backward_s + self.weight_s


def _fields(cost: PartCost) -> tuple[float, ...]:
    return (cost.forward_s, cost.backward_s, cost.weight_s, cost.tail_s, cost.static_bytes,
            cost.activation_bytes, cost.weight_bytes, cost.ops_compute_s, cost.comm_s,
            cost.concurrent_s, cost.tail_compute_s, cost.tail_comm_s, cost.tail_concurrent_s)


@dataclass(frozen=True, slots=True)
class LayerCosts:
    """The parts of a model as an intra-stage plan prices them: ``pre`` (embedding), one
    :class:`PartCost` per layer, ``post`` (head and loss), ``boundary_bytes``, the local
    bytes of one micro-batch's activation from one layer to the next, and the reshards of
    one layer boundary (the mean over the stage model's; not in ``layers``): a
    boundary between two pipeline stages pays them like any other (the activation leaving
    stage ``i`` in its last layer's layout, read in stage ``i + 1``'s first op's; the
    gradient back), besides the point-to-point transfer."""

    pre: PartCost
    layers: tuple[PartCost, ...]
    post: PartCost
    boundary_bytes: float
    into: PartCost = PartCost()  # a layer boundary's reshards at its later layer
    out_of: PartCost = PartCost()  # ... and at its earlier layer (the gradient back)
    # the same per stage-model boundary (``[e - 1]``: between layers ``e - 1`` and ``e``)
    into_at: tuple[PartCost, ...] = ()
    out_of_at: tuple[PartCost, ...] = ()


@dataclass(frozen=True, slots=True)
class Charge:
    """Where a record's seconds go: ``part`` (a layer index, or :data:`PRE`, :data:`POST`,
    :data:`INTO`, :data:`OUT_OF`) and ``phase`` (``forward``, ``backward``, ``weight``: per
    micro-batch; ``tail``: once per step, after the last micro-batch)."""

    part: int
    phase: str

    def __str__(self) -> str:
        return f"{self.phase}:{PART_NAMES.get(self.part, self.part)}"


@dataclass(frozen=True, slots=True)
class Charges:
    """One :class:`Charge` per op of a plan (``ops``, by name) and per reshard record
    (``reshards``, in the plan's order; None for a record no op of the graph runs)."""

    ops: dict[str, Charge]
    reshards: tuple[Charge | None, ...]


def charges(graph: OpGraph, plan: Plan) -> Charges:
    """Which part and phase each of ``plan``'s records is charged to (see the module
    docstring): what :func:`layer_costs` sums, and what a pipelined plan's reports
    (:mod:`.stage_rows`) copy onto the stages."""
    ops = graph.topo_ops()
    part_of = _parts(ops)
    phase = {op.name: _phase(graph, op) for op in ops}
    readers = _layer_readers(graph, ops, part_of)
    found: list[Charge | None] = []
    for reshard in plan.reshards:
        consumer = reshard.consumer if reshard.consumer in part_of else reshard.producer
        if consumer not in part_of:
            found.append(None)
            continue
        where = phase[consumer] if reshard.count > 1 or phase[consumer] == "tail" else "tail"
        found.append(Charge(_charged_to(reshard.producer, consumer, reshard.tensor, part_of,
                                        readers), where))
    return Charges(ops={op.name: Charge(part_of[op.name], phase[op.name]) for op in ops},
                   reshards=tuple(found))


def layer_costs(graph: OpGraph, plan: Plan) -> LayerCosts:
    """Sum ``plan``'s records per part of ``graph`` (the training graph it was planned on)."""
    ops = graph.topo_ops()
    part_of = _parts(ops)
    sums: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    m = max(plan.objective.micro_batches, 1)
    charged = charges(graph, plan)
    for op in ops:
        record, where = plan.ops[op.name], charged.ops[op.name].phase
        scale = record.count / m if where != "tail" else record.count
        sums[part_of[op.name]][where] += scale * (record.compute_s + record.comm_s)
        _made_of(sums[part_of[op.name]], where, scale, record.compute_s, record.comm_s, 0.0)
    phase = {name: charge.phase for name, charge in charged.ops.items()}
    at: dict[tuple[int, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for reshard, charge in zip(plan.reshards, charged.reshards, strict=True):
        if charge is None:
            continue
        part, where = charge.part, charge.phase
        scale = reshard.count / m if where != "tail" else reshard.count
        targets = [sums[part]]
        if part in (INTO, OUT_OF):  # also per boundary, named by its later layer
            edge = max(part_of.get(reshard.producer, -1), part_of.get(reshard.consumer, -1))
            targets.append(at[(part, edge)])
        for target in targets:
            target[where] += scale * exposed_seconds(reshard, plan.ops)
            _made_of(target, where, scale, 0.0, reshard.seconds, beside_seconds(reshard))
    for part, static, saved in _bytes(graph, ops, plan, part_of, phase):
        sums[part]["static"] += static
        sums[part]["saved"] += saved
    for part, nbytes in _weight_inputs(graph, ops, plan, part_of, phase):
        sums[part]["residual"] += nbytes
    layers = sorted(k for k in sums if k >= 0)
    edges = max(len(layers) - 1, 1)  # the stage model's layer boundaries
    return LayerCosts(pre=_cost(sums[PRE]), layers=tuple(_cost(sums[k]) for k in layers),
                      post=_cost(sums[POST]), boundary_bytes=_boundary(graph, ops, plan,
                                                                        part_of),
                      into=_cost(sums[INTO]).scaled(1.0 / edges),
                      out_of=_cost(sums[OUT_OF]).scaled(1.0 / edges),
                      into_at=tuple(_cost(at[(INTO, e)]) for e in range(1, len(layers))),
                      out_of_at=tuple(_cost(at[(OUT_OF, e)]) for e in range(1, len(layers))))


def _made_of(sums: dict[str, float], where: str, scale: float, compute_s: float,
             comm_s: float, concurrent_s: float) -> None:
    """Add one record's compute, communication and beside-another-axis seconds to a part,
    per step for the tail and per micro-batch otherwise."""
    prefix = "tail_" if where == "tail" else ""
    sums[prefix + "ops_compute"] += scale * compute_s
    sums[prefix + "comm"] += scale * comm_s
    sums[prefix + "concurrent"] += scale * concurrent_s




def _charged_to(producer: str, consumer: str, tensor: str, part_of: dict[str, int],
                readers: dict[str, set[int]]) -> int:
    """Where a reshard of ``tensor`` from ``producer`` to ``consumer`` is charged: a layer
    boundary (tensors of one layer read by another: the activation and its saved copy at the
    later layer, :data:`INTO`; the gradient coming back at the earlier one, :data:`OUT_OF`);
    the embedding or the head when it reads or writes a tensor of a single layer (the model's
    first or last: it happens once, not per layer); else the consumer's part."""
    made, read = part_of.get(producer, part_of[consumer]), part_of[consumer]
    if made >= 0 and read >= 0 and made != read:
        return INTO if read > made else OUT_OF
    if made < 0 <= read and len(readers.get(tensor, ())) == 1:
        return made
    return read


def _layer_readers(graph: OpGraph, ops: list[Op], part_of: dict[str, int]
                   ) -> dict[str, set[int]]:
    """Per tensor made outside every layer, the layers that read it (rope tables: all;
    the embedding's output: the first)."""
    out: dict[str, set[int]] = defaultdict(set)
    for op in ops:
        if part_of[op.name] >= 0:
            continue
        for name in op.outputs:
            out[name] = {part_of[c.name] for c in graph.consumers(name)
                         if part_of.get(c.name, -1) >= 0}
    return out


def _parts(ops: list[Op]) -> dict[str, int]:
    """Layer index per op; PRE for non-layer ops whose forward comes before the first layer,
    POST for the rest (a backward or optimizer op follows its forward op's name)."""
    forward_index: dict[str, int] = {}
    first_layer = len(ops)
    for index, op in enumerate(ops):
        if not op.name.startswith(PREFIXES):
            forward_index[op.name] = index
            if layer_of(op.name) is not None:
                first_layer = min(first_layer, index)
    parts = {}
    for op in ops:
        found = layer_of(op.name)
        if found is not None:
            parts[op.name] = found[0]
            continue
        base = op.name
        for prefix in PREFIXES:
            base = base.removeprefix(prefix)
        index = _forward_match(base, forward_index)
        parts[op.name] = PRE if index is not None and index < first_layer else POST
    return parts


def _forward_match(base: str, forward_index: dict[str, int]) -> int | None:
    """The forward op ``base`` names (``head.1`` → ``head``, ``embed.tokens.m`` →
    ``embed.tokens``): the longest dotted prefix that is a forward op."""
    pieces = base.split(".")
    for cut in range(len(pieces), 0, -1):
        index = forward_index.get(".".join(pieces[:cut]))
        if index is not None:
            return index
    return None


def _phase(graph: OpGraph, op: Op) -> str:
    if op.name.startswith("opt/"):
        return "tail"
    if op.name.startswith("recompute/"):  # activation recomputation runs in the backward
        return "backward"
    if op.name.startswith(("bwd/", "grad/")):
        makes_grad = any(graph.tensors[t].role is TensorRole.GRAD for t in op.outputs)
        return "weight" if makes_grad else "backward"
    return "forward"


def _local_bytes(plan: Plan, graph: OpGraph, op: Op) -> Iterable[tuple[str, float]]:
    record = plan.ops[op.name]
    for name, shape in zip(op.outputs, record.local_outputs, strict=True):
        yield name, float(math.prod(shape)) * graph.tensors[name].dtype.itemsize


def _bytes(graph: OpGraph, ops: list[Op], plan: Plan, part_of: dict[str, int],
           phase: dict[str, str]) -> Iterable[tuple[int, float, float]]:
    kinds = output_kinds(graph, ops, phase)
    for op in ops:
        for kind, (_, nbytes) in zip(kinds[op.name], _local_bytes(plan, graph, op),
                                     strict=True):
            if kind == STATIC:
                yield part_of[op.name], nbytes, 0.0
            elif kind == SAVED:
                yield part_of[op.name], 0.0, nbytes


STATIC, SAVED = "static", "saved"


def output_kinds(graph: OpGraph, ops: list[Op], phase: dict[str, str] | None = None
                 ) -> dict[str, tuple[str | None, ...]]:
    """Per op, per output: :data:`STATIC` (a parameter, its gradient or optimizer state:
    resident all step), :data:`SAVED` (a forward output a backward op reads: held per
    micro-batch in flight) or None (neither)."""
    phase = phase or {op.name: _phase(graph, op) for op in ops}
    consumers = _consumers(ops)
    out: dict[str, tuple[str | None, ...]] = {}
    for op in ops:
        kinds: list[str | None] = []
        for name in op.outputs:
            if graph.tensors[name].role in STATIC_ROLES:
                kinds.append(STATIC)
            elif phase[op.name] == "forward" and any(
                    phase[c] in ("backward", "weight") for c in consumers.get(name, ())):
                kinds.append(SAVED)
            else:
                kinds.append(None)
        out[op.name] = tuple(kinds)
    return out


def parts_of(ops: list[Op]) -> dict[str, int]:
    """Per op, its layer index, :data:`PRE` (embedding) or :data:`POST` (head and loss)."""
    return _parts(ops)


def _weight_inputs(graph: OpGraph, ops: list[Op], plan: Plan, part_of: dict[str, int],
                   phase: dict[str, str]) -> Iterable[tuple[int, float]]:
    """Local bytes of the activations and gradients the W ops (weight gradients) read, each
    tensor once per part: held from B until W runs (Qi et al. 2023 §2's ``M_W``)."""
    seen: set[tuple[int, str]] = set()
    for op in ops:
        if phase[op.name] != "weight":
            continue
        shapes = plan.ops[op.name].local_inputs
        for name, shape in zip(op.inputs, shapes, strict=True):
            key = (part_of[op.name], name)
            if graph.tensors[name].role in STATIC_ROLES or key in seen:
                continue
            seen.add(key)
            yield key[0], float(math.prod(shape)) * graph.tensors[name].dtype.itemsize


def _consumers(ops: list[Op]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for op in ops:
        for name in op.inputs:
            found[name].append(op.name)
    return found


def _boundary(graph: OpGraph, ops: list[Op], plan: Plan, part_of: dict[str, int]) -> float:
    """Largest local bytes of forward tensors one layer hands the next (the residual
    stream); zero for a model with fewer than two layers."""
    consumers = _consumers(ops)
    crossing: dict[int, float] = defaultdict(float)
    for op in ops:
        layer = part_of[op.name]
        if layer < 0 or op.name.startswith(PREFIXES):
            continue
        for name, nbytes in _local_bytes(plan, graph, op):
            later = [part_of[c] for c in consumers.get(name, ())
                     if not c.startswith(PREFIXES) and part_of[c] > layer]
            if later:
                crossing[layer] += nbytes
    return max(crossing.values(), default=0.0)


def _cost(sums: dict[str, float]) -> PartCost:
    return PartCost(forward_s=sums.get("forward", 0.0), backward_s=sums.get("backward", 0.0),
                    weight_s=sums.get("weight", 0.0), tail_s=sums.get("tail", 0.0),
                    static_bytes=sums.get("static", 0.0),
                    activation_bytes=sums.get("saved", 0.0),
                    weight_bytes=sums.get("residual", 0.0),
                    ops_compute_s=sums.get("ops_compute", 0.0), comm_s=sums.get("comm", 0.0),
                    concurrent_s=sums.get("concurrent", 0.0),
                    tail_compute_s=sums.get("tail_ops_compute", 0.0),
                    tail_comm_s=sums.get("tail_comm", 0.0),
                    tail_concurrent_s=sums.get("tail_concurrent", 0.0))
