"""Per-device memory of a plan over a sequential schedule, and its rows for the ILP.

Why liveness and not a sum: a training step never holds every activation and every gradient
at once. Run the ops one at a time in the graph's topological order (forward, then backward,
then the optimizer steps, which is the order autodiff appends them in); at step ``t`` a device
holds

* the resident tensors: parameters, optimizer state and graph inputs, in the layout their
  source op stores (they persist across steps);
* every tensor produced before ``t`` and still needed at or after ``t`` (saved activations,
  gradients waiting for the optimizer), in the layout its producer wrote it — the reshard to
  a consumer's layout happens at the consumer, so a sequence-parallel activation is saved
  sharded and gathered again in backward;
* the running op's working set: its inputs as it reads them (an all-gathered weight is a full
  copy) and its outputs.

One exception follows what DDP, ZeRO-2 and FSDP do: a parameter gradient is reduced as soon as
it is produced (bucketed reduce-scatter or all-reduce), so between its producer and the
optimizer it is held in the layout the optimizer reads. ``deferred_gradients`` drops the
exception, as ZeRO stage 1 does (Rajbhandari et al. 2020, §5.1: P_os partitions only the
optimizer state, every device keeps whole gradients): each gradient is then held as produced
until the optimizer step and reduced there. Outputs an op overwrites in place (``updates``:
optimizer steps) take no new memory, and an in-place step reads resident state where it lies.

A tensor read at a step where it is also alive (it has later readers) is counted twice at that
step, once as stored and once as the op reads it; when the two layouts coincide that is one
copy too many, so the profile is an upper bound of the true one by at most the running op's
inputs (tests/test_autoshard_memory_model.py shows it at the ``down`` step of its hand
schedule). Pricing the difference exactly needs a term per (producer, consumer) pair of
choices, which the ILP rows do not have.

The peak over the steps is the plan's memory; the ILP gets one row per step. Rows that cannot
exceed the limit under any choice are dropped before solving (exact: such a row never binds);
the full profile is always evaluated for the reported peak.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from graphs import Op, OpGraph, TensorRole, get_op
from graphs.autodiff import Phase, phase_of
from solver import Span, SpanRows

SOURCE_KINDS = ("input", "param", "state")
SOURCE_CATEGORY = {TensorRole.PARAM: "params", TensorRole.OPTIMIZER_STATE: "optimizer",
                   TensorRole.INPUT: "inputs"}
CATEGORIES = ("params", "grads", "optimizer", "activations", "inputs")


@dataclass(frozen=True, slots=True, kw_only=True)
class Term:
    """``bytes[choice of node]`` held from step ``start`` to step ``stop`` (inclusive)."""

    node: int
    vector: np.ndarray
    start: int
    stop: int
    category: str
    tensor: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryModel:
    """Every term of the memory profile of one graph's schedule.

    ``steps`` is the number of schedule steps (non-source ops, in topological order);
    ``saved`` lists the forward tensors that backward ops read (Korthikanti's "activations
    saved for backward"), with their producer node and byte vector. ``held``: bytes the
    memory *constraint* adds at every step (``bytes[choice of node]``, any sign), not part of
    the profile: a stage model standing in for a pipeline stage adds the copies of its layers'
    state and saved activations the real stage holds besides (:mod:`.pipeline.stage_memory`).
    """

    terms: tuple[Term, ...]
    steps: int
    step_ops: tuple[str, ...]
    saved: tuple[tuple[int, np.ndarray], ...]
    held: tuple[tuple[int, np.ndarray], ...] = ()

    def profile(self, choices: Sequence[int]) -> np.ndarray:
        """Bytes per device at each step for the given choices."""
        delta = np.zeros(self.steps + 1)
        for term in self.terms:
            value = float(term.vector[choices[term.node]])
            delta[term.start] += value
            delta[term.stop + 1] -= value
        return np.cumsum(delta)[: self.steps]

    def peak(self, choices: Sequence[int]) -> float:
        profile = self.profile(choices)
        return float(profile.max()) if profile.size else 0.0

    def constrained_peak(self, choices: Sequence[int]) -> float:
        """What the constraint (:meth:`rows`) sees: the peak plus the ``held`` bytes."""
        return self.peak(choices) + float(sum(v[choices[n]] for n, v in self.held))

    def breakdown(self, choices: Sequence[int]) -> dict[str, float]:
        """Bytes per category at the peak step, plus ``peak_step`` (the op at the peak) and
        ``activations_saved`` (all saved-for-backward activations, whether live at the peak
        or not)."""
        profile = self.profile(choices)
        peak_step = int(np.argmax(profile)) if profile.size else 0
        totals = dict.fromkeys(CATEGORIES, 0.0)
        for term in self.terms:
            if term.start <= peak_step <= term.stop:
                totals[term.category] += float(term.vector[choices[term.node]])
        result: dict[str, float] = dict(totals)
        if self.saved:
            result["activations_saved"] = float(sum(v[choices[n]] for n, v in self.saved))
        return result

    def peak_op(self, choices: Sequence[int]) -> str:
        profile = self.profile(choices)
        return self.step_ops[int(np.argmax(profile))] if profile.size else ""

    def _worst(self) -> np.ndarray:
        """Per step, the most it could hold under any choices (each term at its largest)."""
        most = np.zeros(self.steps + 1)
        for term in self.terms:
            top = float(term.vector.max())
            most[term.start] += top
            most[term.stop + 1] -= top
        return np.cumsum(most)[: self.steps] + sum(float(v.max()) for _, v in self.held)

    def may_exceed(self, limit: float) -> bool:
        """Whether some step could exceed ``limit`` under some choices (``rows`` is not
        empty), without building the rows."""
        worst = self._worst()
        return bool(worst.size and worst.max() > limit)

    def rows(self, limit: float) -> SpanRows | tuple[()]:
        """One liveness row per step that could exceed ``limit`` under some choice, each
        with the ``held`` bytes added, as spans of rows (:class:`solver.SpanRows`; ``()``
        when no step can exceed the limit).

        Built node by node, not term by step: a node's terms are summed into the runs of
        kept steps over which they are constant (:func:`_node_runs`, one array per run), and
        each run is one span: a run that covers every kept step (parameters and optimizer
        state, most of each row) enters every row as the *same* ``(node, bytes)`` pair.
        Adding vectors per (term, step) instead took 126 s for llama3.1-405b on
        dp=8,fsdp=8,tp=8, and building its 8,077 rows as tuples of 45 M pairs took seconds
        more, then as long again for every check and compilation of them."""
        keep = np.flatnonzero(self._worst() > limit)
        if not keep.size:
            return ()
        first = np.searchsorted(keep, np.arange(self.steps + 1))  # first kept step >= t
        spans: dict[int, list[tuple[int, int, np.ndarray]]] = {}
        for term in self.terms:
            a, b = int(first[term.start]), int(first[term.stop + 1])  # kept rows [a, b)
            if a < b:
                spans.setdefault(term.node, []).append((a, b, term.vector))
        for node, vector in self.held:
            spans.setdefault(node, []).append((0, keep.size, vector))
        runs = []
        for node in sorted(spans):
            for a, b, bytes_ in _node_runs(spans[node]):
                vector = np.asarray(bytes_, dtype=np.float64).view()
                vector.setflags(write=False)  # read-only: the solver takes the pair as it is
                runs.append(Span(node=node, vector=vector, first=a, stop=b))
        return SpanRows(runs, keep.size)


def _node_runs(spans: list[tuple[int, int, np.ndarray]]
               ) -> list[tuple[int, int, np.ndarray]]:
    """One node's ``(start, stop, bytes)`` spans (rows ``[start, stop)``) as disjoint runs
    with the bytes of every span covering them summed; a run covered by one span keeps that
    span's array."""
    if len(spans) == 1:
        return spans
    cuts = sorted({a for a, _, _ in spans} | {b for _, b, _ in spans})
    runs = []
    for a, b in itertools.pairwise(cuts):
        covering = [vector for lo, hi, vector in spans if lo <= a and b <= hi]
        if not covering:
            continue
        total = covering[0]
        for vector in covering[1:]:
            total = total + vector
        runs.append((a, b, total))
    return runs


def build_memory_model(graph: OpGraph, ops: Sequence[Op], source_memory: Sequence[np.ndarray],
                       in_bytes: Sequence[tuple[np.ndarray, ...]],
                       out_bytes: Sequence[tuple[np.ndarray, ...]], *,
                       deferred_gradients: bool = False) -> MemoryModel:
    """The terms of ``graph`` scheduled in the order of ``ops`` (a topological order).

    Args:
        graph: the graph (roles decide categories and the gradient rule).
        ops: every op, sources included, in schedule order (the planner's node order).
        source_memory: per node, the bytes of a source op's output per option (0 otherwise).
        in_bytes / out_bytes: per node, per operand, local bytes per option.
        deferred_gradients: hold parameter gradients as produced until the optimizer step
            (ZeRO-1) instead of in the optimizer's layout from their production on.
    """
    node_of = {op.name: i for i, op in enumerate(ops)}
    steps = [i for i, op in enumerate(ops) if op.kind not in SOURCE_KINDS]
    step_of = {node: t for t, node in enumerate(steps)}
    last = max(len(steps) - 1, 0)
    terms: list[Term] = []
    for i, op in enumerate(ops):
        if op.kind in SOURCE_KINDS:
            tensor = graph.tensors[op.outputs[0]]
            terms.append(Term(node=i, vector=source_memory[i], start=0, stop=last,
                              category=SOURCE_CATEGORY.get(tensor.role, "inputs"),
                              tensor=tensor.name))
    saved: list[tuple[int, np.ndarray]] = []
    for i, op in enumerate(ops):
        if op.kind == "input":
            readers = [ops[node_of[c.name]] for c in graph.consumers(op.outputs[0])]
            forward = any(phase_of(r.name) is Phase.FORWARD for r in readers)
            if forward and _is_saved(op, readers):  # the first layer's input, kept for backward
                saved.append((i, source_memory[i]))
        if op.kind in SOURCE_KINDS:
            continue
        t = step_of[i]
        terms.append(_working_term(graph, op, i, t, in_bytes[i], out_bytes[i]))
        aliased = set(range(len(get_op(op.kind).updates)))
        for j, name in enumerate(op.outputs):
            if j in aliased:
                continue
            users = [node_of[c.name] for c in graph.consumers(name)]
            stop = max((step_of[u] for u in users), default=t)
            if name in graph.outputs:
                stop = last
            if stop - 1 >= t + 1:
                terms.append(_live_term(graph, name, i, t + 1, stop - 1, users, ops,
                                        in_bytes, out_bytes[i][j], deferred_gradients))
            if _is_saved(op, [ops[u] for u in users]):
                saved.append((i, out_bytes[i][j]))
    return MemoryModel(terms=tuple(terms), steps=len(steps),
                       step_ops=tuple(ops[i].name for i in steps), saved=tuple(saved))


def _working_term(graph: OpGraph, op: Op, node: int, step: int,
                  ins: tuple[np.ndarray, ...], outs: tuple[np.ndarray, ...]) -> Term:
    """The running op's inputs as it reads them and its outputs. An in-place step (optimizer)
    reads resident state where it lies and writes it back in place: neither is new memory."""
    updates = get_op(op.kind).updates
    total = np.zeros_like(outs[0] if outs else ins[0], dtype=np.float64)
    for k, vec in enumerate(ins):
        resident = graph.producer(op.inputs[k]).kind in SOURCE_KINDS
        if not (updates and resident):
            total = total + vec
    for j, vec in enumerate(outs):
        if j >= len(updates):
            total = total + vec
    return Term(node=node, vector=total, start=step, stop=step, category="activations",
                tensor=f"<working set of {op.name}>")


def _live_term(graph: OpGraph, name: str, producer: int, start: int, stop: int,
               users: list[int], ops: Sequence[Op], in_bytes: Sequence[tuple[np.ndarray, ...]],
               produced: np.ndarray, deferred_gradients: bool) -> Term:
    tensor = graph.tensors[name]
    if tensor.role is TensorRole.GRAD and len(users) == 1 and not deferred_gradients:
        consumer = users[0]
        k = ops[consumer].inputs.index(name)
        return Term(node=consumer, vector=in_bytes[consumer][k], start=start, stop=stop,
                    category="grads", tensor=name)
    category = "grads" if tensor.role is TensorRole.GRAD else "activations"
    return Term(node=producer, vector=produced, start=start, stop=stop, category=category,
                tensor=name)


def _is_saved(op: Op, users: list[Op]) -> bool:
    """A forward tensor read by a backward or recompute op: what the step keeps from the
    forward pass for the backward pass."""
    if phase_of(op.name) is not Phase.FORWARD:
        return False
    return any(phase_of(u.name) in (Phase.BACKWARD, Phase.RECOMPUTE) for u in users)
