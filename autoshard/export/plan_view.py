"""A saved plan read back as values the exporters work on: the mesh, every tensor's
`TensorSharding` (graph order, as stored), the links it was priced with, and its fingerprint.

``plan.json`` stores placements in short form; a dim sharded by several mesh axes in an order
other than mesh order is recovered from the tensor's ``partition_spec``, which keeps the order.
The links are rebuilt from the topology the plan names (or one the caller gives) plus link
overrides, and must describe the same links the plan recorded: a plan is only re-lowered with
the prices it was planned with. The fingerprint check recomputes
`autoshard.planning.planner.fingerprint` on a graph the caller rebuilds, so `export` refuses a plan
that belongs to another graph, mesh, topology or link set.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.errors import AutoshardError, PlanFileError, TopologyError
from autoshard.export.pipeline_view import stage_plan
from autoshard.planning.layers import layer_count
from autoshard.planning.planner import fingerprint
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import parse_placement
from autoshard.sharding.tensor_sharding import TensorSharding
from graphs import DType

logger = logging.getLogger(__name__)

EDITED = ("the plan file was edited or is corrupt: re-plan, or restore the placements it was "
          "written with")


class PlanMismatchError(AutoshardError):
    """The plan does not belong to the graph, topology or links it is exported with.

    Attributes: ``expected`` (what the plan recorded) and ``actual`` (what was recomputed).
    """

    def __init__(self, message: str, *, expected: str, actual: str) -> None:
        super().__init__(message)
        self.expected, self.actual = expected, actual


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanShardings:
    """The plan's mesh and every tensor's sharding, shape and dtype, in the plan's order."""

    mesh: Mesh
    shardings: Mapping[str, TensorSharding]
    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    roles: Mapping[str, str]
    source: str = "plan"

    def itemsize(self, tensor: str) -> int:
        return int(DType(self.dtypes[tensor]).itemsize)

    def parse(self, tensor: str, placements: Sequence[str]) -> TensorSharding:
        """A reshard endpoint's sharding: the tensor's own (with its axis order) when the
        placements are the tensor's, else the placements in mesh order."""
        own = self.shardings[tensor]
        if tuple(placements) == tuple(str(p) for p in own.placements):
            return own
        return _sharding(self.mesh, tensor, placements, None, len(self.shapes[tensor]),
                         self.source)


def plan_shardings(plan: Any, source: str = "plan") -> PlanShardings:
    """Read the mesh and every tensor's sharding out of a loaded `Plan`; errors name the plan
    file as ``source`` (its path, when the caller knows it). Every reshard's endpoints are
    parsed too (those of tensors the plan records), so a placement no tensor can have is
    refused here, whichever command reads the plan.

    Raises:
        PlanFileError: a placement (of a tensor or of a reshard's ``src``/``dst``) that does
            not parse or does not fit its tensor or mesh.

    Example:
        >>> from autoshard.planning.record import Plan
        >>> data = {"format": "autoshard.plan/v1", "model": "m", "fingerprint": "f",
        ...         "mesh": {"axes": [{"name": "dp", "size": 2}, {"name": "tp", "size": 2}]},
        ...         "topology": {"name": "dgx-h100", "links": []},
        ...         "objective": {"total_s": 0, "compute_s": 0, "comm_s": 0,
        ...                       "lower_bound_s": 0, "optimal": True, "gap": 0,
        ...                       "status": "optimal", "solve_s": 0},
        ...         "memory": {"peak_bytes_per_device": 0, "limit_bytes": None},
        ...         "tensors": {"w": {"shape": [8], "dtype": "f32", "role": "param",
        ...                           "placements": ["S(0)", "S(0)"],
        ...                           "partition_spec": [["tp", "dp"]], "sdy": None}},
        ...         "ops": {}, "reshards": []}
        >>> plan_shardings(Plan.from_dict(data)).shardings["w"].dim_axes
        (('tp', 'dp'),)
    """
    try:
        mesh = Mesh(axes=tuple(plan.mesh))
    except AutoshardError as exc:
        raise PlanFileError(source, f"bad mesh: {exc}") from None
    shardings = {
        name: _sharding(mesh, name, rec.placements, rec.partition_spec, len(rec.shape), source)
        for name, rec in plan.tensors.items()
    }
    view = PlanShardings(
        mesh=mesh,
        shardings=shardings,
        shapes={n: tuple(int(s) for s in r.shape) for n, r in plan.tensors.items()},
        dtypes={n: str(r.dtype) for n, r in plan.tensors.items()},
        roles={n: str(r.role) for n, r in plan.tensors.items()},
        source=source,
    )
    for reshard in plan.reshards:
        if reshard.tensor in shardings:  # one without a record: check_reshard_endpoints says so
            for end, placements in (("src", reshard.src), ("dst", reshard.dst)):
                where = (f'tensor "{reshard.tensor}" (reshard {reshard.producer} -> '
                         f"{reshard.consumer}, {end})")
                _sharding(mesh, reshard.tensor, placements, None,
                          len(view.shapes[reshard.tensor]), source, where)
    return view


def check_layouts(plan: Any, source: str = "plan") -> PlanShardings:
    """Every placement in a saved plan parses and fits its tensor and mesh (a pipelined
    plan's on its stage mesh, the mesh its tensors are laid out on): the check ``export`` and
    ``verify`` make before their work, for commands such as ``trace`` and ``diff`` that read
    a plan without lowering it. Returns the plan's shardings.

    Raises:
        PlanFileError: naming ``source``, the tensor and what does not fit, e.g. ``plan file
            x/plan.json: tensor "h": mesh axis "dp" shards dim 9 of a tensor with 3 dims``.
    """
    return plan_shardings(stage_plan(plan) or plan, source)


def _sharding(
    mesh: Mesh, tensor: str, placements: Sequence[str], spec: Any, ndim: int,
    source: str = "plan", where: str | None = None,
) -> TensorSharding:
    """The sharding ``placements`` (and ``spec``'s axis order) give ``tensor``; a
    `PlanFileError` names ``source`` and ``where`` (default: the tensor) otherwise."""
    where = where or f'tensor "{tensor}"'
    try:
        ts = TensorSharding(mesh, tuple(parse_placement(p) for p in placements), ndim)
        if spec is None:
            return ts
        ordered = TensorSharding.from_partition_spec(mesh, tuple(spec), ndim)
    except AutoshardError as exc:
        raise PlanFileError(source, f"{where}: {exc}; {EDITED}") from None
    if [sorted(a) for a in ordered.dim_axes] != [sorted(a) for a in ts.dim_axes]:
        message = (
            f'tensor "{tensor}": placements {list(placements)} and partition_spec '
            f"{list(spec)} disagree; {EDITED}"
        )
        raise PlanFileError(source, message)
    return TensorSharding(mesh, ts.placements, ndim, ordered.shard_order)


def plan_links(
    plan: Any,
    mesh: Mesh,
    topology: str | None = None,
    overrides: Mapping[str, str] | None = None,
) -> tuple[Any, Any]:
    """Rebuild ``(topology, MeshLinks)`` the plan was priced with.

    Raises:
        PlanMismatchError: the rebuilt links do not describe the links the plan recorded
            (the plan used other --topology/--link options).
        TopologyError: the plan's topology is no preset (it came from a TOML file) and no
            `topology` was given, or the given one does not load.
    """
    try:
        topo = resolve_topology(topology or plan.topology)
    except TopologyError as exc:
        if topology is not None:
            raise
        message = (
            f"{exc}; the plan names topology {plan.topology!r}: pass the TOML file it was "
            "planned with as --topology FILE"
        )
        raise TopologyError(message) from None
    links = MeshLinks.build(mesh, topo, dict(overrides or {}))
    expected = _normal(plan.links)
    actual = _normal(links.describe())
    if expected != actual:
        message = (
            f"the plan was priced on topology {plan.topology} with links {expected}, but "
            f"topology {topo.name} with overrides {dict(overrides or {})} gives {actual}; "
            "pass the --topology and --link options the plan was made with"
        )
        raise PlanMismatchError(message, expected=expected, actual=actual)
    return topo, links


def _normal(rows: Any) -> str:
    return json.dumps([dict(r) for r in rows], sort_keys=True)


def check_fingerprint(plan: Any, graph: Any, mesh: Mesh, topology: Any, links: Any) -> None:
    """Refuse a plan whose fingerprint is not that of `graph` on this mesh and these links.

    Raises:
        PlanMismatchError: naming both fingerprints.
    """
    actual = fingerprint(graph, mesh, topology, links)
    if actual != plan.fingerprint:
        hint = _pipeline_hint(plan, graph) if plan.pipeline else _training_hint(plan, graph)
        message = (
            f"the plan's fingerprint {plan.fingerprint} is not that of model {graph.name} on "
            f"mesh {mesh} and topology {topology.name} ({actual}){hint}"
            f"{_first_difference(plan, graph)}; pass the --model and shape options the plan "
            "was made with, or re-plan"
        )
        raise PlanMismatchError(message, expected=plan.fingerprint, actual=actual)


def _training_hint(plan: Any, graph: Any) -> str:
    planned_training = any(str(t.role) == "grad" for t in plan.tensors.values())
    given_training = any(str(t.role.value) == "grad" for t in graph.tensors.values())
    if planned_training == given_training:
        return ""
    return (" (the plan is of a training step: pass --training)" if planned_training
            else " (the plan is of inference: drop --training)")


def _pipeline_hint(plan: Any, graph: Any) -> str:
    """A pipelined plan's fingerprint is the whole forward model's and its tensors are the
    stage model's (fewer layers), so the layers to compare are the pipeline's."""
    planned = sum(int(n) for n in plan.pipeline.get("layers_per_chunk", ()))
    given = layer_count(op.name for op in graph.ops)
    if not planned or given is None or planned == given:
        return ""
    return f" (the plan pipelines {planned} layers, the model has {given}: --layers {planned})"


def _first_difference(plan: Any, graph: Any) -> str:
    """What differs, when a tensor says so: the first tensor of the model (graph order,
    forward first) whose shape or dtype is not plan.json's, e.g. the batch dim of the inputs
    after another --batch; "" when every tensor agrees (the difference is in an op's
    attributes)."""
    for name, tensor in graph.tensors.items():
        record = plan.tensors.get(name)
        if record is None:
            continue
        for field, planned, given in (("shape", list(record.shape), list(tensor.shape)),
                                      ("dtype", record.dtype, tensor.dtype.value)):
            if planned != given:
                return (f': tensor "{name}" has {field} {planned} in plan.json but {given} in '
                        f"the model{_batch_hint(plan, record.role)}")
    return ""


def _batch_hint(plan: Any, role: str) -> str:
    """An input's shape differs, and the plan splits a step into micro-batches: the batch
    options it was made with are the likely difference."""
    micro_batches = int(plan.objective.micro_batches)
    if role != "input" or micro_batches == 1:
        return ""
    return (f" (the plan runs {micro_batches} micro-batches per step: pass the --global-batch "
            "and --micro-batch, or --batch, it was made with)")
