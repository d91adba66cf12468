"""The solver's choice turned back into records: each op's costs, every explicit reshard.

Reshards are re-found one by one for the chosen pairs (the matrices only kept their prices),
with the same search that priced them, so the collectives recorded are the ones paid for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from autoshard.planning.edge_costs import NEXT_STEP, Edge
from autoshard.planning.node_costs import NodeTerms, intra_op_collectives, local_specs
from autoshard.planning.output_fix import output_fix
from autoshard.planning.record import CollectiveRecord, OpRecord, ReshardRecord
from autoshard.planning.shared_reshards import Share
from autoshard.planning.step import EdgeRole, overlap_label, runs
from autoshard.reshard.find import find_reshard
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import Strategy
from graphs import Op, OpGraph, TensorRole


def decode_next_step(graph: OpGraph, ops: list[Op], chosen: list[Strategy], loops: list[Edge],
                     links: MeshLinks, hbm_bw: float | None,
                     roles: Sequence[EdgeRole] | None = None,
                     micro_batches: int = 1) -> list[ReshardRecord]:
    """The priced next-step reshards of the chosen plan (consumer ``<next step>``)."""
    return [r for _, r in _decode(graph, ops, chosen, loops, links, hbm_bw, roles,
                                  micro_batches, next_step=True)]


def op_record(graph: OpGraph, op: Op, node: NodeTerms, strat: Strategy, choice: int,
              links: MeshLinks, count: int = 1) -> OpRecord:
    ins, outs = graph.specs(op)
    return OpRecord(
        count=count,
        kind=op.kind, strategy=strat.label,
        compute_s=float(node.compute[choice]), comm_s=float(node.comm[choice]),
        flops=float(node.flops[choice]), memory_bytes=float(node.memory[choice]),
        local_inputs=tuple(t.shape for t in local_specs(ins, strat.inputs)),
        local_outputs=tuple(t.shape for t in local_specs(outs, strat.outputs)),
        intra_op=intra_op_collectives(strat, links, float(node.compute[choice])),
    )


def _records(reshard: Any, links: MeshLinks) -> tuple[CollectiveRecord, ...]:
    del links
    return tuple(CollectiveRecord(kind=c.kind, axes=tuple(c.axes), group_size=int(c.group_size),
                                  bytes=float(c.bytes), seconds=float(c.seconds))
                 for c in reshard.collectives)


def decode_reshards(graph: OpGraph, ops: list[Op], chosen: list[Strategy], edges: list[Edge],
                    links: MeshLinks, hbm_bw: float | None,
                    roles: Sequence[EdgeRole] | None = None,
                    micro_batches: int = 1, shares: Sequence[Share] = ()
                    ) -> list[ReshardRecord]:
    """Every producer→consumer conflict of the chosen plan as an explicit, priced reshard,
    with how often a step runs it and the window it overlaps (``roles``, one per edge).
    Consumers of a share (:mod:`.shared_reshards`) that read its layout get one record,
    placed at the first of them, naming the others in ``shared_with``."""
    indexed = _decode(graph, ops, chosen, edges, links, hbm_bw, roles, micro_batches,
                      next_step=False)
    merged = dict(indexed)
    for share in shares:
        readers = [e for e in share.edges if e in merged
                   and chosen[edges[e][1]].inputs[edges[e][3][2]] == share.layout]
        if len(readers) < 2:
            continue
        first = merged[readers[0]]
        names = tuple(dict.fromkeys(ops[edges[e][1]].name for e in readers))
        merged[readers[0]] = dataclasses.replace(first, shared_with=tuple(
            n for n in names if n != first.consumer))
        for e in readers[1:]:
            del merged[e]
    return [merged[e] for e, _ in indexed if e in merged]


def _decode(graph: OpGraph, ops: list[Op], chosen: list[Strategy], edges: list[Edge],
            links: MeshLinks, hbm_bw: float | None, roles: Sequence[EdgeRole] | None,
            micro_batches: int, *, next_step: bool) -> list[tuple[int, ReshardRecord]]:
    records = []
    for index, (u, v, _matrix, (name, j, i)) in enumerate(edges):
        src = chosen[u].outputs[j]
        dst = chosen[v].outputs[0] if next_step else chosen[v].inputs[i]
        if src == dst:
            continue
        tensor = graph.tensors[name]
        reshard = find_reshard(src, dst, tensor.shape, tensor.dtype.itemsize, links, hbm_bw)
        role = None if roles is None else roles[index]
        records.append((index, ReshardRecord(
            tensor=name, producer=ops[u].name, consumer=NEXT_STEP if next_step else ops[v].name,
            src=tuple(str(p) for p in src.placements), dst=tuple(str(p) for p in dst.placements),
            collectives=_records(reshard, links),
            count=1 if role is None else runs(role, src, dst, tensor.shape, micro_batches),
            overlap="" if role is None else overlap_label(role, ops),
            cover=1.0 if role is None or role.hider is None else role.cover)))
    return records


def output_reshards(graph: OpGraph, ops: list[Op], chosen: list[Strategy], links: MeshLinks,
                    hbm_bw: float | None, counts: Sequence[int] | None = None
                    ) -> list[ReshardRecord]:
    """The reductions that keep graph outputs from being left Partial (priced in node costs,
    run as often as their op: ``counts``)."""
    records = []
    for index, (op, strat) in enumerate(zip(ops, chosen, strict=True)):
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
                collectives=_records(reshard, links),
                count=1 if counts is None else counts[index]))
    return records


def spelling(sharding: TensorSharding) -> tuple[tuple[str, ...], tuple[Any, ...] | None,
                                              str | None]:
    """How ``plan.json`` spells a tensor's layout: its placements (short forms), its
    partition_spec and its Shardy string; one function, so the planner writing a record and
    :mod:`.record_check` reading one back agree by construction."""
    return (tuple(str(p) for p in sharding.placements), partition_spec_or_none(sharding),
            sdy_string(sharding))


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
