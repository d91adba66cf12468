"""The solver's choice turned back into records: each op's costs, every explicit reshard.

Reshards are re-found one by one for the chosen pairs (the matrices only kept their prices),
with the same search that priced them, so the collectives recorded are the ones paid for.
"""

from __future__ import annotations

from typing import Any

from autoshard.planning.edge_costs import NEXT_STEP, Edge
from autoshard.planning.node_costs import NodeTerms, intra_op_collectives, local_specs
from autoshard.planning.output_fix import output_fix
from autoshard.planning.record import CollectiveRecord, OpRecord, ReshardRecord
from autoshard.reshard.find import find_reshard
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import Strategy
from graphs import Op, OpGraph, TensorRole


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
        intra_op=intra_op_collectives(strat, links, float(node.compute[choice])),
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
