"""Expert parallelism on request: pin the experts of a mixture-of-experts model to mesh axes.

Why: the search finds expert parallelism by itself (sharding the expert dim of the expert
weights and buffers is an ordinary strategy, and moving a buffer between token- and
expert-sharded layouts an all-to-all), and mesh axis names mean nothing to it. A user who wants
to know what a given expert-parallel layout costs, or who runs a framework that fixes it,
states it: ``expert_axes`` (``--expert-axes``). The experts' weights then shard their expert
dim over exactly those axes (in mesh order) and the search optimises everything else.

Which weights hold experts is read off the graph, not its names: the expert dim starts at dim
1 of every ``moe_dispatch`` output (its buffer [g, E, c, h]), follows einsum letters and ops
that keep the dims up to it (the experts' ``swiglu``) up to ``moe_combine``, and every
parameter an einsum on that path contracts with the buffer's expert letter is an expert
weight, with that dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from autoshard.errors import UsageError
from autoshard.sharding.mesh import Mesh
from autoshard.strategies.derive import Strategy
from graphs import Op, OpGraph
from graphs.ops.einsum import parse_equation


class ExpertAxesError(UsageError):
    """``expert_axes`` that cannot shard the model's experts (names the axes and the count)."""

    def __init__(self, message: str, *, experts: int, axes: tuple[str, ...]) -> None:
        super().__init__(message)
        self.experts, self.axes = experts, axes


def expert_weights(graph: OpGraph) -> dict[str, int]:
    """Every parameter holding experts, with its expert dim (module docstring)."""
    dim_of: dict[str, int] = {}
    weights: dict[str, int] = {}
    for op in graph.topo_ops():
        if op.kind == "moe_dispatch":
            dim_of[op.outputs[0]] = 1
        elif op.kind == "einsum":
            _through_einsum(graph, op, dim_of, weights)
        elif op.kind != "moe_combine" and op.outputs:
            shape = graph.tensors[op.outputs[0]].shape
            carried = [dim_of[t] for t in op.inputs if t in dim_of
                       and graph.tensors[t].shape[:dim_of[t] + 1] == shape[:dim_of[t] + 1]]
            if carried:
                dim_of[op.outputs[0]] = carried[0]
    return weights


def _through_einsum(graph: OpGraph, op: Op, dim_of: dict[str, int],
                    weights: dict[str, int]) -> None:
    terms, out = parse_equation(op.attrs["equation"])
    letters = {terms[i][dim_of[t]] for i, t in enumerate(op.inputs) if t in dim_of}
    if len(letters) != 1:
        return
    (letter,) = letters
    if letter in out:
        dim_of[op.outputs[0]] = out.index(letter)
    for tensor, term in zip(op.inputs, terms, strict=True):
        if letter in term and graph.producer(tensor).kind == "param":
            weights[tensor] = term.index(letter)


def expert_axes_filter(graph: OpGraph, mesh: Mesh, axes: Sequence[str]
                       ) -> Callable[[Op, Strategy], bool]:
    """An ``exclude`` for the planner: expert weights' source ops keep only the strategies
    that shard their expert dim over exactly ``axes`` (mesh order).

    Raises:
        ExpertAxesError: the graph has no experts, an axis is not in the mesh or repeated, or
            the axes' sizes do not divide the number of experts.
    """
    axes = tuple(axes)
    weights = expert_weights(graph)
    if not weights:
        raise ExpertAxesError(f'--expert-axes {",".join(axes)}: graph "{graph.name}" has no '
                              "mixture-of-experts layers", experts=0, axes=axes)
    unknown = [a for a in axes if a not in mesh.axis_names]
    if unknown or len(set(axes)) != len(axes):
        raise ExpertAxesError(f"--expert-axes {','.join(axes)}: each must be a distinct axis "
                              f"of the mesh {mesh}", experts=0, axes=axes)
    name, dim = next(iter(weights.items()))
    experts = graph.tensors[name].shape[dim]
    size = math.prod(mesh.axis_sizes[mesh.axis_names.index(a)] for a in axes)
    if experts % size:
        divisors = ", ".join(str(d) for d in range(1, experts + 1) if experts % d == 0)
        raise ExpertAxesError(
            f"{experts} experts do not divide over --expert-axes {','.join(axes)} "
            f"({size} devices); choose axes whose sizes multiply to one of {divisors}",
            experts=experts, axes=axes)
    ordered = sorted(axes, key=mesh.axis_names.index)
    sources = {graph.producer(name).name: dim for name, dim in weights.items()}

    def exclude(op: Op, strategy: Strategy) -> bool:
        dim = sources.get(op.name)
        if dim is None:
            return False
        sharded = [mesh.axis_names[a] for a, p in enumerate(strategy.outputs[0].placements)
                   if str(p) == f"S({dim})"]
        return sharded != ordered
    return exclude
