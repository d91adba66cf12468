"""The numbers the planner hands to the solver: node cost and memory vectors, edge matrices.

Everything here is cached by the op's *structure* (kind, operand specs, attrs): a 32-layer
model enumerates, prices and builds matrices for one layer's worth of distinct ops, and the
other 31 layers reuse the same NumPy arrays.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoshard.errors import AutoshardError, TopologyError
from autoshard.links import MeshLinks
from autoshard.mesh import Mesh
from autoshard.placements import Partial, Replicate, Shard
from autoshard.plan_record import CollectiveRecord, OpRecord, ReshardRecord
from autoshard.reshard import ReshardError, find_reshard, reshard_cost_matrix
from autoshard.sharding import TensorSharding
from autoshard.strategies import Strategy, enumerate_strategies
from costmodel import (
    CollectiveKind,
    CostModelError,
    Topology,
    collective_seconds,
    compute_seconds,
    get_preset,
    load_topology,
)
from graphs import Op, OpGraph, TensorRole, TensorSpec, get_op

SOURCE_KINDS = ("input", "param", "state")


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeTerms:
    """Per-option numbers of one op: total cost = compute + comm (intra-op collectives) +
    fixup (reducing a Partial graph output, reported as a reshard), memory, FLOPs."""

    cost: np.ndarray
    compute: np.ndarray
    comm: np.ndarray
    fixup: np.ndarray
    memory: np.ndarray
    working: np.ndarray
    flops: np.ndarray
    in_bytes: tuple[np.ndarray, ...]
    out_bytes: tuple[np.ndarray, ...]


Edge = tuple[int, int, np.ndarray, tuple[str, int, int]]
"""(producer index, consumer index, cost matrix, (tensor, producer output, consumer input))."""


def resolve_topology(topology: Topology | str) -> Topology:
    if isinstance(topology, Topology):
        return topology
    try:
        if topology.endswith(".toml"):
            return load_topology(topology)
        return get_preset(topology)
    except CostModelError as exc:
        raise TopologyError(str(exc)) from None


def attrs_key(attrs: Any) -> str:
    return json.dumps(_plain(attrs), sort_keys=True)


def _plain(value: Any) -> Any:
    if hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def structure_key(graph: OpGraph, op: Op) -> tuple[Any, ...]:
    ins, outs = graph.specs(op)
    roles = tuple(graph.tensors[t].role is TensorRole.OUTPUT for t in op.outputs)
    return (op.kind, ins, outs, attrs_key(op.attrs), roles)


def op_strategies(graph: OpGraph, op: Op, mesh: Mesh, allow_uneven: bool
                  ) -> tuple[Strategy, ...]:
    ins, outs = graph.specs(op)
    return enumerate_strategies(op.kind, ins, outs, op.attrs, mesh, allow_uneven=allow_uneven)


def local_specs(specs: tuple[TensorSpec, ...], shardings: tuple[TensorSharding, ...]
                ) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(tuple(s.local_shape(t.shape, even=False)), t.dtype)
                 for t, s in zip(specs, shardings, strict=True))


_NODE_CACHE: dict[tuple[Any, ...], NodeTerms] = {}


def node_terms(graph: OpGraph, op: Op, strategies: tuple[Strategy, ...], mesh: Mesh,
               topology: Topology, links: MeshLinks) -> NodeTerms:
    """Price every strategy of ``op``: local roofline compute, intra-op and output collectives."""
    # strategies are a function of the structure and the mesh, and their labels name them
    # (hashing the Strategy objects themselves cost ~10 % of a gpt2 plan)
    key = (structure_key(graph, op), repr(mesh), tuple(s.label for s in strategies),
           repr(topology), links.describe_key())
    cached = _NODE_CACHE.get(key)
    if cached is not None:
        return cached
    ins, outs = graph.specs(op)
    opdef = get_op(op.kind)
    dtype = _compute_dtype(ins, outs)
    count = len(strategies)
    compute, comm, fixup = np.zeros(count), np.zeros(count), np.zeros(count)
    memory, working, flops = np.zeros(count), np.zeros(count), np.zeros(count)
    in_bytes = tuple(np.zeros(count) for _ in ins)
    out_bytes = tuple(np.zeros(count) for _ in outs)
    for k, strat in enumerate(strategies):
        local_in, local_out = local_specs(ins, strat.inputs), local_specs(outs, strat.outputs)
        for vec, spec in zip((*in_bytes, *out_bytes), (*local_in, *local_out), strict=True):
            vec[k] = spec.nbytes
        if op.kind not in SOURCE_KINDS:
            flops[k] = opdef.flops(local_in, local_out, op.attrs)
            compute[k] = compute_seconds(flops[k], opdef.bytes_moved(local_in, local_out,
                                                                     op.attrs),
                                         dtype, topology.device)
        comm[k] = sum(c.seconds for c in intra_op_collectives(strat, links))
        fixup[k] = sum(r.seconds for r in _output_fixups(graph, op, strat, links,
                                                          topology.device.hbm_bw_bytes_per_s))
        if op.kind in SOURCE_KINDS:
            memory[k] = sum(t.nbytes for t in local_out)
        else:
            working[k] = sum(t.nbytes for t in (*local_in, *local_out))
    terms = NodeTerms(cost=compute + comm + fixup, compute=compute, comm=comm, fixup=fixup,
                      memory=memory, working=working, flops=flops, in_bytes=in_bytes,
                      out_bytes=out_bytes)
    for array in (terms.cost, terms.compute, terms.comm, terms.fixup, terms.memory,
                  terms.working, terms.flops, *in_bytes, *out_bytes):
        array.setflags(write=False)  # shared by every op of this structure, never copied
    _NODE_CACHE[key] = terms
    return terms


def _compute_dtype(ins: tuple[TensorSpec, ...], outs: tuple[TensorSpec, ...]) -> str:
    for spec in (*ins, *outs):
        if spec.dtype.is_float:
            return spec.dtype.value
    return "f32"


def intra_op_collectives(strat: Strategy, links: MeshLinks) -> tuple[CollectiveRecord, ...]:
    """Collectives a hand-written rule performs inside the op (e.g. vocab-parallel loss)."""
    records = []
    for item in getattr(strat, "intra_op", ()):
        kind, axes, nbytes = item.kind, tuple(item.axes), float(item.bytes)
        group = links.group(axes)
        seconds = float(collective_seconds(CollectiveKind(kind), nbytes, group))
        size = int(np.prod([n for n, _ in group])) if group else 1
        records.append(CollectiveRecord(kind=kind, axes=axes, group_size=size, bytes=nbytes,
                                        seconds=seconds))
    return tuple(records)


def without_partial(sharding: TensorSharding) -> TensorSharding:
    placements = tuple(Replicate() if isinstance(p, Partial) else p
                       for p in sharding.placements)
    if placements == sharding.placements:
        return sharding
    return TensorSharding(sharding.mesh, placements, sharding.ndim, sharding.shard_order)


_FIX_CACHE: dict[tuple[Any, ...], tuple[TensorSharding, Any]] = {}


@dataclass(frozen=True, slots=True)
class _Unreachable:
    """The fix-up of a Partial output no collective can complete: an impossible option."""

    seconds: float = float("inf")
    collectives: tuple = ()


UNREACHABLE = _Unreachable()


def output_fix(sharding: TensorSharding, shape: tuple[int, ...], itemsize: int,
               links: MeshLinks, hbm_bw: float | None) -> tuple[TensorSharding, Any]:
    """The cheapest non-Partial layout a graph output can be reduced to, and the reshard.

    Each Partial axis becomes Replicate (all-reduce) or shards a dim (reduce-scatter): a graph
    output need not be replicated, only complete. Returns ``(sharding, None)`` when nothing is
    Partial.
    """
    partial_axes = [a for a, p in enumerate(sharding.placements) if isinstance(p, Partial)]
    if not partial_axes:
        return sharding, None
    key = (sharding, shape, itemsize, links.describe_key(), hbm_bw)
    if key in _FIX_CACHE:
        return _FIX_CACHE[key]
    choices = [Replicate(), *(Shard(d) for d in range(sharding.ndim))]
    best: tuple[TensorSharding, Any] | None = None
    for combo in itertools.product(choices, repeat=len(partial_axes)):
        placements = list(sharding.placements)
        for axis, placement in zip(partial_axes, combo, strict=True):
            placements[axis] = placement
        try:
            target = TensorSharding(sharding.mesh, tuple(placements), sharding.ndim)
        except AutoshardError:
            continue
        if not target.is_divisible(shape):
            continue
        reshard = find_reshard(sharding, target, shape, itemsize, links, hbm_bw)
        if best is None or reshard.seconds < best[1].seconds:
            best = (target, reshard)
    if best is None:  # nothing divides: replicate, if even that is reachable
        target = without_partial(sharding)
        try:
            best = (target, find_reshard(sharding, target, shape, itemsize, links, hbm_bw))
        except ReshardError:  # an uneven dim that no collective can move: never choose it
            best = (target, UNREACHABLE)
    _FIX_CACHE[key] = best
    return best


def _output_fixups(graph: OpGraph, op: Op, strat: Strategy, links: MeshLinks,
                   hbm_bw: float | None) -> list[Any]:
    fixes = []
    for name, sharding in zip(op.outputs, strat.outputs, strict=True):
        tensor = graph.tensors[name]
        if tensor.role is TensorRole.OUTPUT:
            _target, reshard = output_fix(sharding, tensor.shape, tensor.dtype.itemsize, links,
                                          hbm_bw)
            if reshard is not None:
                fixes.append(reshard)
    return fixes


def edge_matrices(graph: OpGraph, ops: list[Op], strategies: list[tuple[Strategy, ...]],
                  links: MeshLinks, hbm_bw: float | None) -> list[Edge]:
    """One matrix per (producer output → consumer input) use, in a stable order."""
    index = {op.name: i for i, op in enumerate(ops)}
    produced_by: dict[str, tuple[int, int]] = {}
    for i, op in enumerate(ops):
        for j, name in enumerate(op.outputs):
            produced_by[name] = (i, j)
    # within one run an op's strategies follow from its structure: key matrices by the two
    # structures (small ints), not by the tuples of shardings (slow to hash)
    structures: dict[tuple[Any, ...], int] = {}
    kind = [structures.setdefault(structure_key(graph, op), len(structures)) for op in ops]
    cache: dict[tuple[Any, ...], np.ndarray] = {}
    edges: list[Edge] = []
    for v, op in enumerate(ops):
        for i, name in enumerate(op.inputs):
            u, j = produced_by[name]
            tensor = graph.tensors[name]
            key = (kind[u], j, kind[v], i)
            matrix = cache.get(key)
            if matrix is None:
                srcs = tuple(s.outputs[j] for s in strategies[u])
                dsts = tuple(s.inputs[i] for s in strategies[v])
                matrix = reshard_cost_matrix(srcs, dsts, tensor.shape, tensor.dtype.itemsize,
                                             links, hbm_bw)
                matrix.setflags(write=False)  # shared by every edge of this structure
                cache[key] = matrix
            edges.append((u, v, matrix, (name, j, i)))
    del index
    return edges


NEXT_STEP = "<next step>"


def next_step_edges(graph: OpGraph, ops: list[Op], strategies: list[tuple[Strategy, ...]],
                    links: MeshLinks, hbm_bw: float | None) -> list[Edge]:
    """Edges from each in-place output of an optimizer step back to the source op that stores
    the value it overwrites: the updated parameter (or moment) must be in its stored layout
    when the next step starts. ZeRO-1/2's all-gather of updated parameters is this reshard.
    The edge's (tensor, output, input) names the updated tensor and the step's output index;
    the input index is -1 (the target is the source op's stored output)."""
    index = {op.name: i for i, op in enumerate(ops)}
    edges: list[Edge] = []
    for u, op in enumerate(ops):
        for j, k in enumerate(get_op(op.kind).updates[: len(op.outputs)]):
            source = graph.producer(op.inputs[k])
            if source.kind not in SOURCE_KINDS:
                continue
            v = index[source.name]
            tensor = graph.tensors[op.outputs[j]]
            srcs = tuple(s.outputs[j] for s in strategies[u])
            dsts = tuple(s.outputs[0] for s in strategies[v])
            matrix = reshard_cost_matrix(srcs, dsts, tensor.shape, tensor.dtype.itemsize,
                                         links, hbm_bw)
            matrix.setflags(write=False)
            edges.append((u, v, matrix, (tensor.name, j, -1)))
    return edges


def decode_next_step(graph: OpGraph, ops: list[Op], chosen: list[Strategy], loops: list[Edge],
                     links: MeshLinks, hbm_bw: float | None) -> list[ReshardRecord]:
    """The priced next-step reshards of the chosen plan (consumer ``<next step>``)."""
    records = []
    for u, v, _matrix, (name, j, _i) in loops:
        src, dst = chosen[u].outputs[j], chosen[v].outputs[0]
        if src == dst:
            continue
        tensor = graph.tensors[name]
        reshard = find_reshard(src, dst, tensor.shape, tensor.dtype.itemsize, links, hbm_bw)
        records.append(ReshardRecord(
            tensor=name, producer=ops[u].name, consumer=NEXT_STEP,
            src=tuple(str(p) for p in src.placements), dst=tuple(str(p) for p in dst.placements),
            collectives=_records(reshard, links)))
    return records


def op_record(graph: OpGraph, op: Op, node: NodeTerms, strat: Strategy, choice: int,
              links: MeshLinks) -> OpRecord:
    ins, outs = graph.specs(op)
    return OpRecord(
        kind=op.kind, strategy=strat.label,
        compute_s=float(node.compute[choice]), comm_s=float(node.comm[choice]),
        flops=float(node.flops[choice]), memory_bytes=float(node.memory[choice]),
        local_inputs=tuple(t.shape for t in local_specs(ins, strat.inputs)),
        local_outputs=tuple(t.shape for t in local_specs(outs, strat.outputs)),
        intra_op=intra_op_collectives(strat, links),
    )


def _records(reshard: Any, links: MeshLinks) -> tuple[CollectiveRecord, ...]:
    del links
    return tuple(CollectiveRecord(kind=c.kind, axes=tuple(c.axes), group_size=int(c.group_size),
                                  bytes=float(c.bytes), seconds=float(c.seconds))
                 for c in reshard.collectives)


def decode_reshards(graph: OpGraph, ops: list[Op], chosen: list[Strategy], edges: list[Edge],
                    links: MeshLinks, hbm_bw: float | None) -> list[ReshardRecord]:
    """Every producer→consumer conflict of the chosen plan as an explicit, priced reshard."""
    records = []
    for u, v, _matrix, (name, j, i) in edges:
        src, dst = chosen[u].outputs[j], chosen[v].inputs[i]
        if src == dst:
            continue
        tensor = graph.tensors[name]
        reshard = find_reshard(src, dst, tensor.shape, tensor.dtype.itemsize, links, hbm_bw)
        records.append(ReshardRecord(
            tensor=name, producer=ops[u].name, consumer=ops[v].name,
            src=tuple(str(p) for p in src.placements), dst=tuple(str(p) for p in dst.placements),
            collectives=_records(reshard, links)))
    return records


def output_reshards(graph: OpGraph, ops: list[Op], chosen: list[Strategy], links: MeshLinks,
                    hbm_bw: float | None) -> list[ReshardRecord]:
    """The reductions that keep graph outputs from being left Partial (priced in node costs)."""
    records = []
    for op, strat in zip(ops, chosen, strict=True):
        for name, sharding in zip(op.outputs, strat.outputs, strict=True):
            tensor = graph.tensors[name]
            if tensor.role is not TensorRole.OUTPUT:
                continue
            target, reshard = output_fix(sharding, tensor.shape, tensor.dtype.itemsize, links,
                                         hbm_bw)
            if reshard is None:
                continue
            records.append(ReshardRecord(
                tensor=name, producer=op.name, consumer="<output>",
                src=tuple(str(p) for p in sharding.placements),
                dst=tuple(str(p) for p in target.placements),
                collectives=_records(reshard, links)))
    return records


def partition_spec_or_none(sharding: TensorSharding) -> tuple[Any, ...] | None:
    try:
        return tuple(sharding.to_partition_spec())
    except Exception:
        return None


def sdy_string(sharding: TensorSharding) -> str | None:
    """``#sdy.sharding<@mesh, [{"dp"}, {}]>`` when the sharding is expressible in Shardy."""
    spec = partition_spec_or_none(sharding)
    if spec is None:
        return None
    dims = []
    for entry in spec:
        axes = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
        dims.append("{" + ", ".join(f'"{a}"' for a in axes) + "}")
    dims.extend("{}" for _ in range(sharding.ndim - len(spec)))
    unreduced = [axis for axis, _op in sharding.partial_axes]
    tail = f", unreduced={{{', '.join(repr(a) for a in unreduced)}}}" if unreduced else ""
    return f"#sdy.sharding<@mesh, [{', '.join(dims)}]{tail}>"
