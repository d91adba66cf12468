"""The DTensor side of an exported plan: each priced reshard step as exactly one collective.

The choice (plan, export and execution agree): a step over several mesh axes (an all-reduce
over ``dp,tp``) is priced as ONE collective over the product group, and it runs as one: the
script flattens the mesh dims each such step spans into a flattened ``DeviceMesh``
(``mesh["dp", "tp"]._flatten()``, what DTensor's own warning asks for) and runs the step on
its process group. Pricing what ``DTensor.redistribute`` happens to do instead would make the
plan worse for every framework, and redistribute would still not run the priced path:

* it merges consecutive same-kind steps into one collective on a flattened mesh only for
  all-gather, all-reduce and reduce-scatter over mesh dims in ascending order, never for
  all-to-all (``_optimize_transform_infos`` in ``torch/distributed/tensor/_redistribute.py``,
  torch 2.13);
* its planner picks its own path (the greedy planner, or a Dijkstra over its own costs when a
  ``_StridedShard`` is involved), which can differ from the path the plan priced;
* on a CPU mesh it runs every all-to-all as an all-gather plus a local chunk ("Gloo does not
  support alltoall", ``shard_dim_alltoall`` in ``_collective_utils.py``), although Gloo's
  ``all_to_all_single`` works.

So every step runs as one functional collective (``torch.distributed._functional_collectives``,
the ops DTensor itself issues and ``CommDebugMode`` counts) on the local tensor, and the result
is wrapped back with ``DTensor.from_local`` in the planned placements:

=====================  =================================================================
step (axes ``A``)      functional collective on the group of ``A``
=====================  =================================================================
all_gather             ``all_gather_single(x, src_dim)``
reduce_scatter         ``reduce_scatter_single(x, op, dst_dim)`` (avg: sum, then ÷ |A|)
all_reduce             ``all_reduce(x, op)`` (avg: sum, then ÷ |A|; Gloo has no AVG)
all_to_all             ``all_to_all_single`` of the dst_dim pieces, concatenated on src_dim
collective_permute     ``permute_tensor`` (DTensor has no permute: it is one
                       ``all_to_all_single`` with one non-empty piece per rank, and
                       ``CommDebugMode`` counts it as an all-to-all; :func:`executed_kind`)
all_slice              local chunk at the rank's index on ``A``
replicated_to_partial  local: index 0 on the axis keeps the value, the others hold zeros
=====================  =================================================================

A group's process-group ranks follow mesh order; where ``A`` lists its axes in another order
(a dim sharded ``tp``-major, then ``dp``) the pieces are reordered locally before or after the
collective, which moves no extra data. Nothing here imports autoshard: ``autoshard export
--format dtensor`` copies this module into the script it writes. torch is imported inside the
functions.
"""

from __future__ import annotations

import math
from typing import Any

KINDS = {
    "all_reduce": "all_reduce",
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all_single": "all_to_all",
}
"""Functional-collective op names (as ``CommDebugMode`` reports them) → our kinds."""

LOCAL_KINDS = ("all_slice", "replicated_to_partial")


def executed_kind(kind: str, reduce_op: str | None) -> str:
    """The collective a priced step runs as: itself, except a collective-permute, which
    torch runs as one ``all_to_all_single`` (``permute_tensor``).

    Example:
        >>> executed_kind("all_reduce", "sum"), executed_kind("collective_permute", None)
        ('all_reduce', 'all_to_all')
    """
    return "all_to_all" if kind == "collective_permute" else kind


def flattened_groups(step_lists: Any, axis_names: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every set of two or more mesh axes some step runs over, in mesh order, sorted.

    Example:
        >>> steps = [[("all_reduce", ("tp", "dp"), None, None, "sum")], []]
        >>> flattened_groups(steps, ("dp", "tp"))
        [('dp', 'tp')]
    """
    groups = {tuple(sorted(step[1], key=axis_names.index))
              for steps in step_lists for step in steps
              if len(step[1]) > 1 and step[0] not in LOCAL_KINDS}
    return sorted(groups)


def build_mesh(device_type: str, shape: tuple[int, ...], names: tuple[str, ...],
              groups: list[tuple[str, ...]]) -> Any:
    """The DeviceMesh, with a flattened mesh for every multi-axis group in ``groups``."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device_type, shape, mesh_dim_names=names)
    for axes in groups:
        mesh[axes]._flatten("_".join(axes))
    return mesh


def group_of(mesh: Any, axes: tuple[str, ...]) -> Any:
    """The process group of the mesh axes ``axes`` (a flattened mesh's when several)."""
    names = tuple(mesh.mesh_dim_names)
    ordered = tuple(sorted(axes, key=names.index))
    if len(ordered) == 1:
        return mesh.get_group(ordered[0])
    return mesh[ordered]._flatten("_".join(ordered)).get_group()  # made once, then looked up


def member_order(sizes: dict[str, int], names: tuple[str, ...], axes: tuple[str, ...]
                 ) -> list[int]:
    """For each process-group rank of the group over ``axes`` (mesh order), the member's
    index in ``axes`` order (first axis most significant).

    Example:
        >>> member_order({"dp": 2, "tp": 2}, ("dp", "tp"), ("tp", "dp"))
        [0, 2, 1, 3]
    """
    ordered = sorted(axes, key=names.index)
    out = []
    for rank in range(math.prod(sizes[a] for a in axes)):
        coords, rest = {}, rank
        for axis in reversed(ordered):
            coords[axis] = rest % sizes[axis]
            rest //= sizes[axis]
        index = 0
        for axis in axes:
            index = index * sizes[axis] + coords[axis]
        out.append(index)
    return out


def _sizes(mesh: Any) -> dict[str, int]:
    return {name: int(mesh.size(i)) for i, name in enumerate(mesh.mesh_dim_names)}


def _index(mesh: Any, axes: tuple[str, ...]) -> int:
    sizes, index = _sizes(mesh), 0
    for axis in axes:
        index = index * sizes[axis] + int(mesh.get_local_rank(axis))
    return index


def _wait(tensor: Any) -> Any:
    return tensor.wait() if hasattr(tensor, "wait") else tensor


def run_step(mesh: Any, x: Any, step: tuple) -> Any:
    """One priced step on this rank's local tensor ``x``; ``step`` is ``(kind, axes, src_dim,
    dst_dim, reduce_op)``."""
    import torch

    kind, axes, src_dim, dst_dim, reduce_op = step
    axes = tuple(axes)
    count = math.prod(_sizes(mesh)[a] for a in axes)
    if kind == "all_slice":
        return x.chunk(count, dim=dst_dim)[_index(mesh, axes)].contiguous()
    if kind == "replicated_to_partial":
        keep = reduce_op != "sum" or mesh.get_local_rank(axes[0]) == 0
        return x.clone() if keep else torch.zeros_like(x)
    order = member_order(_sizes(mesh), tuple(mesh.mesh_dim_names), axes)
    group = group_of(mesh, axes)
    if kind == "collective_permute":
        return _permute(x, axes, _sizes(mesh), tuple(mesh.mesh_dim_names), group)
    if kind == "all_gather":
        return _all_gather(x, src_dim, order, group)
    if kind == "all_to_all":
        return _all_to_all(x, src_dim, dst_dim, order, group)
    return _reduce(x, kind, dst_dim, reduce_op, order, group)


def _all_gather(x: Any, dim: int, order: list[int], group: Any) -> Any:
    import torch
    import torch.distributed._functional_collectives as funcol

    out = _wait(funcol.all_gather_single(x.contiguous(), dim, group))
    if order == sorted(order):
        return out
    pieces = out.chunk(len(order), dim=dim)
    return torch.cat([pieces[order.index(i)] for i in range(len(order))], dim=dim)


def _all_to_all(x: Any, src_dim: int, dst_dim: int, order: list[int], group: Any) -> Any:
    import torch
    import torch.distributed._functional_collectives as funcol

    pieces = x.chunk(len(order), dim=dst_dim)
    sent = torch.stack([pieces[index].contiguous() for index in order])
    got = _wait(funcol.all_to_all_single(sent, None, None, group))
    return torch.cat([got[order.index(i)] for i in range(len(order))], dim=src_dim)


def _reduce(x: Any, kind: str, dim: int | None, reduce_op: str, order: list[int],
            group: Any) -> Any:
    import torch
    import torch.distributed._functional_collectives as funcol

    op = "sum" if reduce_op == "avg" else reduce_op
    if kind == "all_reduce":
        out = _wait(funcol.all_reduce(x.contiguous(), op, group))
    else:
        pieces = x.chunk(len(order), dim=dim)
        sent = torch.cat([pieces[index] for index in order], dim=dim).contiguous()
        out = _wait(funcol.reduce_scatter_single(sent, op, dim, group))
    return out / len(order) if reduce_op == "avg" else out


def _permute(x: Any, axes: tuple[str, ...], sizes: dict[str, int], names: tuple[str, ...],
             group: Any) -> Any:
    """Swap two equal-sized axes: the rank at (i, j) on them sends its block to (j, i)."""
    import torch.distributed._functional_collectives as funcol

    ordered = sorted(axes, key=names.index)
    n = sizes[ordered[0]]
    destination = [(rank % n) * n + rank // n for rank in range(n * n)]
    flat = x.contiguous().reshape(-1)  # permute_tensor sends the whole of dim 0
    return _wait(funcol.permute_tensor(flat, destination, group)).reshape(x.shape)


def run_steps(mesh: Any, x: Any, steps: tuple, placements: tuple) -> Any:
    """Run ``steps`` on the DTensor ``x`` and return the DTensor in ``placements``."""
    from torch.distributed.tensor import DTensor

    local = x.to_local()
    for step in steps:
        local = run_step(mesh, local, step)
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=x.shape,
                              stride=x.stride())


def partition(mesh: Any, x: Any, placements: tuple) -> Any:
    """``x`` (replicated on the Partial axes of ``placements``) as those Partial placements,
    without communication: index 0 on the Partial axes keeps a sum's value, the others hold
    zeros; avg, max and min keep it everywhere."""
    import torch
    from torch.distributed.tensor import DTensor

    local = x.to_local()
    for axis, placement in enumerate(placements):
        if placement.is_partial() and placement.reduce_op == "sum" and \
                mesh.get_local_rank(axis) != 0:
            local = torch.zeros_like(local)
    return DTensor.from_local(local, mesh, placements, run_check=False, shape=x.shape,
                              stride=x.stride())


def collective_log(mesh: Any, groups: list[tuple[str, ...]]) -> Any:
    """A ``CommDebugMode`` that also records, per collective, our kind and its mesh axes
    (read off the process-group name each functional collective is called with): its
    ``calls`` is a list of ``(kind, axes)``."""
    from torch.distributed.tensor.debug import CommDebugMode

    names = tuple(mesh.mesh_dim_names)
    axes_of = {mesh.get_group(name).group_name: (name,) for name in names}
    axes_of.update({group_of(mesh, axes).group_name: axes for axes in groups})

    class CollectiveLog(CommDebugMode):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[tuple[str, tuple[str, ...]]] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kind = KINDS.get(getattr(func, "__name__", "").split(".")[0])
            if kind is not None:
                group = [a for a in args if isinstance(a, str)][-1]
                self.calls.append((kind, axes_of.get(group, ("?",))))
            return super().__torch_dispatch__(func, types, args, kwargs)

    return CollectiveLog()
