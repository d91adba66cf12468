"""What each strategy of one op costs on its own: local compute, intra-op collectives, memory.

Everything here is cached by the op's *structure* (kind, operand specs, attrs): a 32-layer
model enumerates and prices one layer's worth of distinct ops, and the other 31 layers reuse
the same read-only NumPy arrays.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoshard.planning.output_fix import output_fixups
from autoshard.planning.record import CollectiveRecord
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import Strategy, enumerate_strategies
from costmodel import Attention, CollectiveKind, Gemm, Topology, collective_seconds, kernel_seconds
from graphs import AttentionShape, GemmShape, Op, OpDef, OpGraph, TensorRole, TensorSpec, get_op

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


MIN_RING_BLOCK = 2048
"""Tokens of each device's query block below which the planner leaves ring attention out.

Why: the cost model prices attention at one flat efficiency, but FlashAttention's throughput
still rises with the sequence length up to a few thousand tokens (Dao 2023, FlashAttention-2,
§4.1 benchmarks), and a ring runs one kernel per K/V block with a synchronisation per step; on
short blocks the model would overrate the ring. Megatron-Core likewise recommends context
parallelism for long sequences. A planner setting, not a measured constant: at 2,048 a ring of
8 starts at 16k tokens, and Llama-3.1-8B at 131k tokens on 16 devices (8,192 per device) keeps
it."""


def op_strategies(graph: OpGraph, op: Op, mesh: Mesh, allow_uneven: bool
                  ) -> tuple[Strategy, ...]:
    """The strategies of ``op`` the planner considers: every derived one, less ring attention
    on query blocks shorter than :data:`MIN_RING_BLOCK`."""
    ins, outs = graph.specs(op)
    strategies = enumerate_strategies(op.kind, ins, outs, op.attrs, mesh,
                                      allow_uneven=allow_uneven)
    if op.kind not in ("attention", "attention_bwd"):
        return strategies
    return tuple(s for s in strategies if s.work == 1 or _ring_block(s, ins[0]) >= MIN_RING_BLOCK)


def _ring_block(strategy: Strategy, query: TensorSpec) -> int:
    """Query tokens of the largest per-device block of a ring-attention strategy.

    Why not the exact shard: under ``allow_uneven`` the sequence may not divide by the ring,
    and the planner prices uneven shards by their largest (ceil) block, as :func:`local_specs`
    does; the ring is paced by that block."""
    return strategy.inputs[0].local_shape(query.shape, even=False)[1]


def local_specs(specs: tuple[TensorSpec, ...], shardings: tuple[TensorSharding, ...]
                ) -> tuple[TensorSpec, ...]:
    return tuple(TensorSpec(tuple(s.local_shape(t.shape, even=False)), t.dtype)
                 for t, s in zip(specs, shardings, strict=True))


_NODE_CACHE: dict[tuple[Any, ...], NodeTerms] = {}


def node_terms(graph: OpGraph, op: Op, strategies: tuple[Strategy, ...], mesh: Mesh,
               topology: Topology, links: MeshLinks) -> NodeTerms:
    """Price every strategy of ``op``: local compute (the device's kernel model on the local
    GEMM/attention shape, or the flat roofline), intra-op and output collectives."""
    # strategies are a function of the structure and the mesh, and their labels name them
    # (hashing the Strategy objects themselves cost ~10 % of a gpt2 plan); the topology by its
    # hash, not its repr (a kernel-model device's repr spells ~50 attention rows: 0.1 ms a call)
    key = (structure_key(graph, op), repr(mesh), tuple(s.label for s in strategies),
           topology, links.describe_key())
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
            # a ring-attention strategy runs its local block ``work`` times (one per ring step)
            one_flops = opdef.flops(local_in, local_out, op.attrs)
            flops[k] = strat.work * one_flops
            compute[k] = strat.work * kernel_seconds(
                local_kernel(opdef, local_in, local_out, op.attrs), one_flops,
                opdef.bytes_moved(local_in, local_out, op.attrs), dtype, topology.device)
        comm[k] = sum(c.seconds for c in intra_op_collectives(strat, links, compute[k]))
        fixup[k] = sum(r.seconds for r in output_fixups(graph, op, strat, links,
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


def local_kernel(opdef: OpDef, local_in: tuple[TensorSpec, ...],
                 local_out: tuple[TensorSpec, ...], attrs: Any) -> Gemm | Attention | None:
    """The costmodel kernel the op runs on its local shapes (the op's ``kernel`` hook), or None
    for a kernel priced as memory-bound (or a local shape with an empty dimension)."""
    shape = opdef.kernel(local_in, local_out, attrs) if opdef.kernel is not None else None
    if isinstance(shape, GemmShape) and min(shape.m, shape.n, shape.k, shape.batch) >= 1:
        return Gemm(m=shape.m, n=shape.n, k=shape.k, batch=shape.batch)
    if isinstance(shape, AttentionShape) and min(shape.batch, shape.heads, shape.seq_q,
                                                 shape.seq_k, shape.head_dim,
                                                 shape.head_dim_v) >= 1:
        return Attention(batch=shape.batch, heads=shape.heads, seq_q=shape.seq_q,
                         seq_k=shape.seq_k, head_dim=shape.head_dim,
                         head_dim_v=shape.head_dim_v, causal=shape.causal,
                         backward=shape.backward)
    return None


def _compute_dtype(ins: tuple[TensorSpec, ...], outs: tuple[TensorSpec, ...]) -> str:
    for spec in (*ins, *outs):
        if spec.dtype.is_float:
            return spec.dtype.value
    return "f32"


def intra_op_collectives(strat: Strategy, links: MeshLinks, compute_s: float = 0.0
                         ) -> tuple[CollectiveRecord, ...]:
    """Collectives a hand-written rule performs inside the op (vocab-parallel loss, ring
    attention). A collective that runs beside a fraction ``overlap`` of the op's compute
    (``compute_s``) costs only what that compute does not hide: its record's seconds are the
    exposed max(0, transfer − overlap·compute)."""
    records = []
    for item in getattr(strat, "intra_op", ()):
        kind, axes, nbytes = item.kind, tuple(item.axes), float(item.bytes)
        group = links.group(axes)
        seconds = float(collective_seconds(CollectiveKind(kind), nbytes, group))
        seconds = max(0.0, seconds - float(getattr(item, "overlap", 0.0)) * compute_s)
        size = int(np.prod([n for n, _ in group])) if group else 1
        records.append(CollectiveRecord(kind=kind, axes=axes, group_size=size, bytes=nbytes,
                                        seconds=seconds))
    return tuple(records)
