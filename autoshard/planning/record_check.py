"""A saved plan's tensor records checked against the ops that write them.

Why: ``plan.json`` states each tensor's layout twice: as the chosen strategy of the op that
writes it (``ops[op].strategy``, what the planner priced and ``autoshard verify`` emulates) and
as the tensor's own record (``tensors[name]``: placements, partition_spec, sdy, shape, dtype,
what ``autoshard export`` emits). The planner writes the second from the first
(:func:`~autoshard.planning.decode.spelling`); a hand-edited file can make them disagree, and
its export would then run something other than what was priced and verified. So ``verify``,
``export --model`` and ``explain`` refuse such a plan, naming the first tensor that differs.

The layout a strategy implies for a tensor is the strategy's output layout, except for a graph
output the strategy leaves Partial: the plan completes it (its ``<output>`` reshard), and the
record holds the completed layout. Worked example (mesh ``dp=2,tp=2``)::

    tensor               op (strategy)                    implied        recorded
    layers.0.mlp.up.out  layers.0.mlp.up ("dp:b tp:b")    S(0) S(0)      S(0) S(2)  <- refused
    loss.out (output)    loss ("dp:P{0,1} tp:P{0,1}")     P(sum) P(sum)
                         <output> reshard to R R          R R            R R

Without the model (``export`` with no ``--model``) :func:`check_reshard_endpoints` checks what
the file says about itself: every reshard starts from the layout its tensor is written in.
"""

from __future__ import annotations

import json
from typing import Any

from autoshard.errors import AutoshardError, PlanRecordError
from autoshard.planning.decode import spelling
from autoshard.planning.record import Plan, ReshardRecord, TensorRecord
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import parse_placement
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import Strategy, enumerate_strategies
from graphs import Op, OpGraph, TensorRole

OUTPUT = "<output>"
FIX = ("the file was edited or mixes two plans: re-plan, or make the tensor's record match "
       "its op's strategy")
FIX_OP = "the file was edited or is of another model: re-plan, or give the op one of its strategies"


def strategy_of(graph: OpGraph, op: Op, mesh: Mesh, label: str) -> Strategy | None:
    """The strategy of ``op`` on ``mesh`` labelled ``label`` (even or, failing that, uneven
    shardings, as the planner enumerates them); None when the op has none so labelled.

    Example:
        >>> from graphs import zoo
        >>> graph = zoo.build("mlp", layers=1, batch=8, seq=16, hidden=32, ffn=64)
        >>> up = graph.op_by_name("layers.0.mlp.up")
        >>> strategy_of(graph, up, Mesh.parse("dp=2"), "dp:b").outputs[0].short()
        '[S(0)]'
        >>> strategy_of(graph, up, Mesh.parse("dp=2"), "no such label") is None
        True
    """
    ins, outs = graph.specs(op)
    for uneven in (False, True):
        for strategy in enumerate_strategies(op.kind, ins, outs, graph.attrs(op), mesh,
                                             allow_uneven=uneven):
            if strategy.label == label:
                return strategy
    return None


def check_tensor_records(plan: Plan, graph: OpGraph) -> None:
    """Every tensor record of ``plan`` must be what its producer's strategy on ``graph`` (the
    graph the plan was made for, a training plan's whole step) writes; see the module
    docstring.

    Raises:
        PlanRecordError: the first tensor (in graph order) whose record differs, an op whose
            strategy is none the op has, or a record of a tensor the graph does not have.

    Example:
        >>> import dataclasses
        >>> from graphs import zoo
        >>> from autoshard.planning.planner import plan as make_plan
        >>> graph = zoo.build("mlp", layers=1, batch=8, seq=16, hidden=32, ffn=64)
        >>> planned = make_plan(graph, Mesh.parse("dp=2"))
        >>> check_tensor_records(planned, graph)  # as written: consistent
        >>> edited = dict(planned.tensors)
        >>> edited["x"] = dataclasses.replace(edited["x"], placements=("R",))
        >>> check_tensor_records(dataclasses.replace(planned, tensors=edited), graph)
        Traceback (most recent call last):
        ...
        autoshard.errors.PlanRecordError: plan.json tensor "x" is laid out R, but op "x" ...
    """
    mesh = Mesh(axes=tuple(plan.mesh))
    chosen: dict[str, Strategy] = {}
    for name, tensor in graph.tensors.items():
        op = graph.producer(name)
        if op.name not in chosen:
            chosen[op.name] = _chosen(plan, graph, op, mesh)
        record = plan.tensors.get(name)
        if record is None:
            raise PlanRecordError(f'plan.json has no record of tensor "{name}", which op '
                                  f'"{op.name}" writes; {FIX}', item=name, recorded="none",
                                  implied=name)
        sharding = chosen[op.name].outputs[op.outputs.index(name)]
        if tensor.role is TensorRole.OUTPUT and sharding.partial_axes:
            sharding = _completed(plan, name, op.name, sharding)
        placements, spec, sdy = spelling(sharding)
        implied = TensorRecord(shape=tensor.shape, dtype=tensor.dtype.value,
                               role=tensor.role.value, placements=placements,
                               partition_spec=spec, sdy=sdy)
        _compare(name, record, implied, op.name, plan.ops[op.name].strategy)
    extra = next((name for name in plan.tensors if name not in graph.tensors), None)
    if extra is not None:
        raise PlanRecordError(f'plan.json records tensor "{extra}", which no op of model '
                              f'"{graph.name}" writes; {FIX}', item=extra, recorded=extra,
                              implied="none")


def _chosen(plan: Plan, graph: OpGraph, op: Op, mesh: Mesh) -> Strategy:
    record = plan.ops.get(op.name)
    if record is None:
        raise PlanRecordError(f'plan.json has no op "{op.name}" ({op.kind}), which model '
                              f'"{graph.name}" has; check the plan against the model it was '
                              "made for, or re-plan", item=op.name, recorded="none",
                              implied=op.kind)
    strategy = strategy_of(graph, op, mesh, record.strategy)
    if strategy is None:
        ins, outs = graph.specs(op)
        labels = [s.label for s in enumerate_strategies(op.kind, ins, outs, graph.attrs(op),
                                                        mesh)]
        some = ", ".join(f'"{label}"' for label in labels[:6])
        raise PlanRecordError(f'plan.json op "{op.name}" ({op.kind}) has strategy '
                              f'"{record.strategy}", which is not a strategy of that op on mesh '
                              f"{mesh} (it has {len(labels)}, e.g. {some}); {FIX_OP}",
                              item=op.name, recorded=record.strategy, implied=labels[0])
    return strategy


def _completed(plan: Plan, name: str, producer: str, sharding: TensorSharding
               ) -> TensorSharding:
    """A Partial graph output's layout after the plan's ``<output>`` reshard from it (the
    strategy's own layout when the plan has none, which the comparison then reports)."""
    own = spelling(sharding)[0]
    for reshard in plan.reshards:
        if (reshard.tensor, reshard.producer, reshard.consumer) == (name, producer, OUTPUT) \
                and tuple(reshard.src) == own:
            try:
                placements = tuple(parse_placement(p) for p in reshard.dst)
                return TensorSharding(sharding.mesh, placements, sharding.ndim)
            except AutoshardError as exc:
                raise PlanRecordError(f'plan.json reshard of tensor "{name}" to {OUTPUT} has '
                                      f"dst {list(reshard.dst)}: {exc}; {FIX}", item=name,
                                      recorded=" ".join(reshard.dst), implied="") from None
    return sharding


def _compare(name: str, record: TensorRecord, implied: TensorRecord, op: str,
             label: str) -> None:
    """The first field of ``record`` that differs from ``implied``, as one error line: the
    shape, dtype and role are the model's, the layout is what the op's strategy writes."""
    writer = f'op "{op}" (strategy "{label}")'
    fields = (("shape", list(record.shape), list(implied.shape)),
              ("dtype", record.dtype, implied.dtype),
              ("role", record.role, implied.role),
              ("layout", " ".join(record.placements), " ".join(implied.placements)),
              ("partition_spec", _plain(record.partition_spec), _plain(implied.partition_spec)),
              ("sdy", record.sdy, implied.sdy))
    for field, recorded, expected in fields:
        if recorded == expected:
            continue
        if field == "layout":
            message = (f'plan.json tensor "{name}" is laid out {recorded}, but {writer} writes '
                       f"it as {expected}")
        elif field in ("shape", "dtype", "role"):
            message = (f'plan.json tensor "{name}" has {field} {json.dumps(recorded)}, but in '
                       f'the model (written by op "{op}") it is {json.dumps(expected)}')
        else:
            message = (f'plan.json tensor "{name}" has {field} {json.dumps(recorded)}, but '
                       f"{writer} writes it with {json.dumps(expected)}")
        raise PlanRecordError(f"{message}; {FIX}", item=name, recorded=str(recorded),
                              implied=str(expected))


def _plain(value: Any) -> Any:
    """A partition_spec as JSON has it (tuples as lists), so read and written ones compare."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def check_reshard_endpoints(plan: Plan) -> None:
    """What ``plan.json`` says about itself, without the model: every reshard of a tensor
    starts from the layout its tensor is written in (the producer's output layout; for a
    graph output completed by an ``<output>`` reshard, that reshard's source), and an
    ``<output>`` reshard ends in the tensor's recorded layout.

    Raises:
        PlanRecordError: naming the tensor, its recorded layout and the reshard's.
    """
    written = {r.tensor: tuple(r.src) for r in plan.reshards if r.consumer == OUTPUT}
    for reshard in plan.reshards:
        record = plan.tensors.get(reshard.tensor)
        if record is None:
            raise PlanRecordError(f'plan.json has a reshard of tensor "{reshard.tensor}" '
                                  f"({reshard.producer} -> {reshard.consumer}) but no record of "
                                  f"that tensor; {FIX}", item=reshard.tensor, recorded="none",
                                  implied=reshard.tensor)
        if reshard.consumer == OUTPUT:
            _endpoint(reshard, f"is laid out {' '.join(record.placements)}",
                      record.placements, reshard.dst, "ends in")
        elif reshard.tensor in written:
            _endpoint(reshard, f"leaves its producer as {' '.join(written[reshard.tensor])} "
                      f"(its {OUTPUT} reshard's source)", written[reshard.tensor],
                      reshard.src, "starts from")
        else:
            _endpoint(reshard, f"is laid out {' '.join(record.placements)}",
                      record.placements, reshard.src, "starts from")


def _endpoint(reshard: ReshardRecord, stated: str, expected: tuple[str, ...],
              found: tuple[str, ...], verb: str) -> None:
    if tuple(expected) == tuple(found):
        return
    raise PlanRecordError(
        f'plan.json tensor "{reshard.tensor}" {stated}, but its reshard {reshard.producer} -> '
        f"{reshard.consumer} {verb} {' '.join(found)}; {FIX}",
        item=reshard.tensor, recorded=" ".join(expected), implied=" ".join(found))
