"""The Plan: what the planner decided, in a form that outlives the process.

A plan is a frozen value: per tensor its placements, per op its strategy and costs, every
explicit reshard with the collectives that implement it, and the solver's certificate.
It round-trips through ``plan.json`` (format ``autoshard.plan/v1``, see docs/architecture.md) and
renders as pandas DataFrames / CSV. The costs add up by construction: each per-op row and each
per-collective row times its ``count`` (runs per step), summed, less ``objective.hidden_s``
(communication that ran beside compute) and ``objective.concurrent_s`` (beside another mesh
axis's), equals ``objective.total_s`` (a pipelined plan's records are one stage model's; its
objective is the stage that finishes last, plus ``objective.bubble_s``, and its CSVs,
:meth:`Plan.step_costs` and :meth:`Plan.step_collectives`, copy the records onto the stages
that run them, so that stage's rows add up the same way). Of those rows,
``objective.compute_s`` counts the ops' compute and the reshards' local steps (``all_slice``,
``replicated_to_partial``: no bytes cross a link), ``objective.comm_s`` the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from autoshard.errors import PlacementError, PlanFileError
from autoshard.planning.pipeline.stage_rows import StageOp, StageReshard, StageRows, stage_rows
from autoshard.reshard.state import LOCAL_KINDS
from autoshard.sharding.frameworks import dtensor_placements, jax_partition_spec
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import parse_placement
from autoshard.sharding.tensor_sharding import TensorSharding

PLAN_FORMAT = "autoshard.plan/v1"


# the sections of plan.json with one entry per tensor, op or reshard: an entry per line
RECORD_SECTIONS = ("tensors", "ops", "reshards")


def _record_lines(document: Mapping[str, Any]) -> str:
    """``document`` as JSON text with one top-level field per line and, in
    :data:`RECORD_SECTIONS`, one record per line (each record compact).

    Why not ``json.dumps(indent=1)``: an indent sends the whole document through the json
    module's pure-Python encoder; record by record the C encoder writes it. llama3-70b on
    dp=8,tp=8 (7.3 MB, 10,359 tensors): 0.58 s indented against 0.13 s compact, once per
    ``plan --out`` and once per sweep point. A record per line also keeps the file
    greppable, tensor by tensor."""
    fields = []
    for key, value in document.items():
        name = json.dumps(key)
        if key in RECORD_SECTIONS and isinstance(value, Mapping) and value:
            body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in value.items())
            fields.append(f" {name}: {{\n{body}\n }}")
        elif key in RECORD_SECTIONS and isinstance(value, list) and value:
            body = ",\n".join(f"  {json.dumps(v)}" for v in value)
            fields.append(f" {name}: [\n{body}\n ]")
        else:
            fields.append(f" {name}: {json.dumps(value)}")
    return "{\n" + ",\n".join(fields) + "\n}\n"


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveRecord:
    """One priced and emitted collective of a reshard: a collective, or a local step
    (:attr:`local`)."""

    kind: str
    axes: tuple[str, ...]
    group_size: int
    bytes: float
    seconds: float

    @property
    def local(self) -> bool:
        """A local step: ``all_slice`` (each device keeps its slice of what it holds) or
        ``replicated_to_partial`` (all but one device zero theirs). No byte crosses a link;
        the step is work on the device, priced as a copy of ``bytes`` in HBM, so it counts as
        compute (``objective.compute_s``, the trace's compute track), not communication."""
        return self.kind in LOCAL_KINDS


@dataclass(frozen=True, slots=True, kw_only=True)
class ReshardRecord:
    """A producer→consumer sharding conflict made explicit, with its collectives in order."""

    tensor: str
    producer: str
    consumer: str
    src: tuple[str, ...]
    dst: tuple[str, ...]
    collectives: tuple[CollectiveRecord, ...]
    count: int = 1  # runs per training step (micro-batches, or once per step)
    overlap: str = ""  # the window it runs beside, e.g. "bwd layer 3"; "" when exposed
    # further consumers that read the result (one reshard per tensor and layout, run once
    # before ``consumer``, the first in topological order)
    shared_with: tuple[str, ...] = ()
    # overlapped behind an op (``overlap == "op H"``): the share of H's compute it may hide
    # behind (the reshards hidden behind one op split its compute by their tensors' bytes)
    cover: float = 1.0

    @property
    def consumers(self) -> tuple[str, ...]:
        """Every op that reads the result, ``consumer`` first."""
        return (self.consumer, *self.shared_with)

    @property
    def seconds(self) -> float:
        """Seconds of one run."""
        return sum(c.seconds for c in self.collectives)

    @property
    def local_seconds(self) -> float:
        """Seconds of one run's local steps (:attr:`CollectiveRecord.local`): compute."""
        return sum(c.seconds for c in self.collectives if c.local)

    @property
    def link_seconds(self) -> float:
        """Seconds of one run's collectives, local steps left out: communication."""
        return sum(c.seconds for c in self.collectives if not c.local)


@dataclass(frozen=True, slots=True, kw_only=True)
class TensorRecord:
    """One tensor of a plan: shape, dtype, role and its sharding, as stored in ``plan.json``:
    ``placements`` (DTensor's short forms, one per mesh axis), ``partition_spec`` (per dim the
    mesh axes sharding it, major → minor, as plain strings and tuples; None for a layout no
    PartitionSpec states) and ``sdy``.

    The objects a framework takes come from the methods: :meth:`jax_partition_spec` (a
    ``jax.sharding.PartitionSpec`` for ``NamedSharding``), :meth:`dtensor_placements` (DTensor
    placements for ``distribute_tensor``) and :meth:`sharding` (autoshard's own
    TensorSharding). They need the plan's mesh, which the :class:`Plan` holding the record
    sets (``mesh``; not part of ``plan.json``).
    """

    shape: tuple[int, ...]
    dtype: str
    role: str
    placements: tuple[str, ...]
    partition_spec: tuple[Any, ...] | None
    sdy: str | None
    mesh: tuple[tuple[str, int], ...] = field(default=(), compare=False, repr=False)

    def sharding(self) -> TensorSharding:
        """The TensorSharding on the plan's mesh (axis order on a dim from
        ``partition_spec``).

        Raises:
            PlacementError: the record belongs to no plan (no mesh) or does not parse.
        """
        if not self.mesh:
            raise PlacementError("this tensor record belongs to no plan, so it has no mesh; "
                                 "read it from Plan.tensors")
        mesh = Mesh(axes=self.mesh)
        ndim = len(self.shape)
        placements = tuple(parse_placement(p) for p in self.placements)
        plain = TensorSharding(mesh, placements, ndim)
        if self.partition_spec is None or plain.is_view_strided:
            return plain
        ordered = TensorSharding.from_partition_spec(mesh, tuple(self.partition_spec), ndim)
        return TensorSharding(mesh, placements, ndim, ordered.shard_order)

    def jax_partition_spec(self) -> Any:
        """The ``jax.sharding.PartitionSpec`` (needs jax), e.g. ``P(None, ('dp', 'tp'))``;
        a pending sum is ``unreduced={...}`` (JAX takes that with Explicit mesh axes only).

        Raises:
            PlacementError: a strided view layout or a pending max/min/avg (no PartitionSpec
                says those).
        """
        return jax_partition_spec(self.sharding())

    def dtensor_placements(self) -> tuple[Any, ...]:
        """The DTensor placements, one per mesh axis (needs torch), e.g.
        ``(Replicate(), Shard(dim=1))``; an axis order against mesh order is written with
        ``_StridedShard``."""
        return tuple(p.to_torch() for p in dtensor_placements(self.sharding()))


@dataclass(frozen=True, slots=True, kw_only=True)
class OpRecord:
    kind: str
    strategy: str
    compute_s: float
    comm_s: float
    flops: float
    memory_bytes: float
    local_inputs: tuple[tuple[int, ...], ...]
    local_outputs: tuple[tuple[int, ...], ...]
    intra_op: tuple[CollectiveRecord, ...] = ()
    count: int = 1  # runs per training step (micro-batches, or once per step)


@dataclass(frozen=True, slots=True, kw_only=True)
class Objective:
    """Seconds of one step. ``compute_s`` and ``comm_s`` count every run of every op and
    collective (their records' ``count``; a reshard's local steps are compute, see
    :attr:`CollectiveRecord.local`); ``hidden_s`` is the communication that ran beside
    compute (never more than the compute beside it), ``concurrent_s`` the communication that
    ran beside another mesh axis's (the steps of one overlapped reshard pipelined across
    axes, :mod:`autoshard.planning.step_parts`) and ``bubble_s`` the time the step waits with
    nothing to run (a pipelined plan's bubble and point-to-point transfers), so ``total_s =
    compute_s + comm_s - hidden_s - concurrent_s + bubble_s``. A pipelined plan's parts are
    those of the stage that finishes last. Plans written before ``concurrent_s`` and
    ``bubble_s`` existed have them 0 (their ``hidden_s`` counted both overlaps; a pipelined
    one's parts were an average stage's and did not add up)."""

    total_s: float
    compute_s: float
    comm_s: float
    lower_bound_s: float
    optimal: bool
    gap: float
    status: str
    solve_s: float
    hidden_s: float = 0.0
    micro_batches: int = 1
    concurrent_s: float = 0.0
    bubble_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The result of :func:`autoshard.plan`; see the module docstring."""

    model: str
    mesh: tuple[tuple[str, int], ...]
    topology: str
    links: tuple[Mapping[str, Any], ...]
    objective: Objective
    peak_bytes_per_device: float
    limit_bytes: float | None
    memory_breakdown: Mapping[str, float]
    tensors: Mapping[str, TensorRecord]
    ops: Mapping[str, OpRecord]
    reshards: tuple[ReshardRecord, ...]
    fingerprint: str
    notes: tuple[str, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)
    verification: Mapping[str, Any] | None = None
    pins: Mapping[str, Any] | None = None
    throughput: Mapping[str, Any] | None = None
    pipeline: Mapping[str, Any] | None = None  # stages, schedule, timeline (pipelined plans)
    model_parameters: int | None = None  # the whole model's (a pipelined plan's tensors are
    # one stage model's); None in plans written before it was recorded

    def __post_init__(self) -> None:
        """Give every tensor record the plan's mesh (what its framework objects need)."""
        if any(record.mesh != self.mesh for record in self.tensors.values()):
            tensors = {name: replace(record, mesh=self.mesh)
                       for name, record in self.tensors.items()}
            object.__setattr__(self, "tensors", tensors)

    # ---- reports -------------------------------------------------------------------------
    def costs(self) -> pd.DataFrame:
        """One row per op: strategy, local shapes, FLOPs, compute and intra-op comm seconds
        (a pipelined plan's: the stage model's ops; :meth:`step_costs` has every stage's)."""
        return pd.DataFrame([_cost_row(name, rec) for name, rec in self.ops.items()],
                            columns=_COST_COLUMNS)

    def collectives(self) -> pd.DataFrame:
        """One row per collective of every explicit reshard, in plan order (a pipelined
        plan's: the stage model's; :meth:`step_collectives` has every stage's); ``local``
        marks a local step (no bytes cross a link: compute, see
        :attr:`CollectiveRecord.local`)."""
        rows = [row for r in self.reshards for row in _collective_rows(r)]
        return pd.DataFrame(rows, columns=_RESHARD_COLUMNS)

    def step_costs(self) -> pd.DataFrame:
        """``costs.csv``: :meth:`costs`, or for a pipelined plan one row per op of the whole
        model as a stage runs it (:mod:`autoshard.planning.pipeline.stage_rows`), led by its
        ``stage`` and ``phase`` and ending with the stage-model op it copies."""
        rows = self._stage_rows()
        if rows is None:
            return self.costs()
        return _stage_costs(rows.ops)

    def step_collectives(self) -> pd.DataFrame:
        """``reshards.csv``: :meth:`collectives`, or for a pipelined plan one row per
        collective of the whole model's reshards as a stage runs them, led by ``stage`` and
        ``phase`` and ending with the stage-model tensor and consumer they copy."""
        rows = self._stage_rows()
        if rows is None:
            return self.collectives()
        return _stage_collectives(rows.reshards)

    def _stage_rows(self) -> StageRows | None:
        return stage_rows(self.ops, self.reshards, self.pipeline) if self.pipeline else None

    # ---- serialization -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        obj = asdict(self.objective)
        return {
            "format": PLAN_FORMAT,
            "model": self.model,
            **({"model_parameters": self.model_parameters}
               if self.model_parameters is not None else {}),
            "fingerprint": self.fingerprint,
            "mesh": {"axes": [{"name": n, "size": s} for n, s in self.mesh]},
            "topology": {"name": self.topology, "links": [dict(x) for x in self.links]},
            "objective": obj,
            "memory": {"peak_bytes_per_device": self.peak_bytes_per_device,
                       "limit_bytes": self.limit_bytes,
                       "breakdown": dict(self.memory_breakdown)},
            "tensors": {n: _tensor_dict(t) for n, t in self.tensors.items()},
            "ops": {n: _op_dict(o) for n, o in self.ops.items()},
            "reshards": [_reshard_dict(r) for r in self.reshards],
            "notes": list(self.notes),
            "stats": dict(self.stats),
            **({"verification": dict(self.verification)} if self.verification else {}),
            **({"pins": dict(self.pins)} if self.pins is not None else {}),
            **({"throughput": dict(self.throughput)} if self.throughput else {}),
            **({"pipeline": dict(self.pipeline)} if self.pipeline else {}),
        }

    def to_json(self) -> str:
        """plan.json's text (:func:`_record_lines`)."""
        return _record_lines(self.to_dict())

    def save(self, out_dir: Path) -> list[Path]:
        """Write plan.json, costs.csv and reshards.csv into ``out_dir``; return the paths."""
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = [out_dir / "plan.json", out_dir / "costs.csv", out_dir / "reshards.csv"]
        paths[0].write_text(self.to_json())
        self.step_costs().to_csv(paths[1], index=False, float_format="%.9g")
        self.step_collectives().to_csv(paths[2], index=False, float_format="%.9g")
        return paths

    @classmethod
    def from_dict(cls, data: Any, source: str = "plan") -> Plan:
        """A plan from a parsed plan.json; `PlanFileError` names ``source`` and the field that
        is missing or of the wrong type."""
        if not isinstance(data, Mapping):
            raise PlanFileError(source, "not a plan (a JSON object written by "
                                        "autoshard plan --out)")
        if data.get("format") != PLAN_FORMAT:
            raise PlanFileError(source, f'format is {data.get("format")!r}, '
                                        f'expected "{PLAN_FORMAT}"')
        try:
            _check_fields(data)
            return _plan_from_dict(data)
        except _MalformedField as exc:
            raise PlanFileError(source, str(exc)) from None
        except (KeyError, TypeError, ValueError) as exc:
            raise PlanFileError(source, f"missing or malformed field {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """The plan in ``path``: a plan.json, or the directory ``plan --out`` wrote it to."""
        path = plan_file(Path(path))
        if path.is_dir():
            raise PlanFileError(str(path), f'a directory without {PLAN_FILE_NAME}; pass the '
                                           f"{PLAN_FILE_NAME} that autoshard plan --out wrote")
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise PlanFileError(str(path), "no such file") from None
        except json.JSONDecodeError as exc:
            raise PlanFileError(str(path), f"not JSON ({exc.msg} at line {exc.lineno})") from None
        return cls.from_dict(data, str(path))


PLAN_FILE_NAME = "plan.json"


def plan_file(path: Path) -> Path:
    """``path``, or the plan.json in it when ``path`` is a directory that holds one (what
    ``plan --out DIR`` wrote): every command that reads a plan takes either."""
    inside = path / PLAN_FILE_NAME
    return inside if path.is_dir() and inside.is_file() else path


_COST_COLUMNS = ["op", "kind", "strategy", "local_inputs", "local_outputs", "flops",
                 "compute_s", "comm_s", "count", "memory_bytes"]
_RESHARD_COLUMNS = ["tensor", "producer", "consumer", "src", "dst", "collective", "mesh_axes",
                    "group_size", "bytes", "seconds", "count", "overlap", "shared_with", "local"]


def _cost_row(name: str, rec: OpRecord) -> dict[str, Any]:
    """One costs.csv row."""
    return {
        "op": name, "kind": rec.kind, "strategy": rec.strategy,
        "local_inputs": " ".join("x".join(map(str, s)) or "scalar" for s in rec.local_inputs),
        "local_outputs": " ".join("x".join(map(str, s)) or "scalar" for s in rec.local_outputs),
        "flops": rec.flops, "compute_s": rec.compute_s, "comm_s": rec.comm_s,
        "count": rec.count, "memory_bytes": rec.memory_bytes,
    }


def _stage_costs(rows: tuple[StageOp, ...]) -> pd.DataFrame:
    """A pipelined plan's costs.csv: the plain columns led by the stage and phase, ending
    with the stage-model op each row copies."""
    return pd.DataFrame(
        [{"stage": row.stage, "phase": row.phase, **_cost_row(row.name, row.record),
          "stage_model_op": row.model_name} for row in rows],
        columns=["stage", "phase", *_COST_COLUMNS, "stage_model_op"])


def _stage_collectives(rows: tuple[StageReshard, ...]) -> pd.DataFrame:
    """A pipelined plan's reshards.csv: the plain columns led by the stage and phase, ending
    with the stage-model tensor and consumer each row copies."""
    return pd.DataFrame(
        [{"stage": row.stage, "phase": row.phase, **values,
          "stage_model_tensor": row.model_tensor, "stage_model_consumer": row.model_consumer}
         for row in rows for values in _collective_rows(row.record)],
        columns=["stage", "phase", *_RESHARD_COLUMNS, "stage_model_tensor",
                 "stage_model_consumer"])


def _tensor_dict(t: TensorRecord) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": t.dtype, "role": t.role,
            "placements": list(t.placements),
            "partition_spec": _jsonable(t.partition_spec), "sdy": t.sdy}


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def _tupled(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tupled(v) for v in value)
    return value


def _collective_rows(r: ReshardRecord) -> list[dict[str, Any]]:
    """One reshards.csv row per collective of ``r``."""
    return [{
        "tensor": r.tensor, "producer": r.producer, "consumer": r.consumer,
        "src": " ".join(r.src), "dst": " ".join(r.dst), "collective": c.kind,
        "mesh_axes": ",".join(c.axes), "group_size": c.group_size, "bytes": c.bytes,
        "seconds": c.seconds, "count": r.count, "overlap": r.overlap,
        "shared_with": " ".join(r.shared_with), "local": c.local,
    } for c in r.collectives]


def _collective_dict(c: CollectiveRecord) -> dict[str, Any]:
    return {"kind": c.kind, "axes": list(c.axes), "group_size": c.group_size,
            "bytes": c.bytes, "seconds": c.seconds}


def _op_dict(o: OpRecord) -> dict[str, Any]:
    return {"kind": o.kind, "strategy": o.strategy, "compute_s": o.compute_s,
            "comm_s": o.comm_s, "flops": o.flops, "memory_bytes": o.memory_bytes,
            "local_inputs": [list(s) for s in o.local_inputs],
            "local_outputs": [list(s) for s in o.local_outputs],
            "intra_op": [_collective_dict(c) for c in o.intra_op], "count": o.count}


def _reshard_dict(r: ReshardRecord) -> dict[str, Any]:
    return {"tensor": r.tensor, "producer": r.producer, "consumer": r.consumer,
            "src": list(r.src), "dst": list(r.dst),
            "collectives": [_collective_dict(c) for c in r.collectives],
            "count": r.count, "overlap": r.overlap,
            **({"shared_with": list(r.shared_with)} if r.shared_with else {}),
            **({"cover": r.cover} if r.cover != 1.0 else {})}


def _collective(d: Mapping[str, Any]) -> CollectiveRecord:
    return CollectiveRecord(kind=d["kind"], axes=tuple(d["axes"]), group_size=int(d["group_size"]),
                            bytes=float(d["bytes"]), seconds=float(d["seconds"]))


class _MalformedField(Exception):
    """A plan.json field that is missing or of the wrong type (the message names it)."""


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "list": (list,), "string": (str,), "number": (int, float),
    "integer": (int,), "boolean": (bool,)}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    for name, types in _JSON_TYPES.items():
        if isinstance(value, types) and name not in ("integer", "boolean"):
            return ("an " if name[0] in "aeiou" else "a ") + name
    return type(value).__name__


def _need(d: Mapping[str, Any], key: str, kind: str, where: str = "",
          optional: bool = False, nullable: bool = False) -> Any:
    """``d[key]`` if it is of JSON type ``kind``, else `_MalformedField` naming the field."""
    name = f"{where}.{key}" if where else key
    if key not in d:
        if optional:
            return None
        raise _MalformedField(f'field "{name}" is missing')
    value = d[key]
    if value is None and (optional or nullable):
        return None
    ok = isinstance(value, _JSON_TYPES[kind]) and (
        kind == "boolean" or not isinstance(value, bool))
    if not ok:
        article = "an" if kind[0] in "aeiou" else "a"
        raise _MalformedField(f'field "{name}" must be {article} {kind}, '
                              f"not {_json_type(value)}")
    return value


_OBJECTIVE_KINDS = {"float": "number", "int": "integer", "bool": "boolean", "str": "string"}


def _check_fields(d: Mapping[str, Any]) -> None:
    """The top-level fields of a plan.json and the small ones read whole (mesh, topology,
    objective, memory) have their JSON types; the big maps are checked entry by entry."""
    _need(d, "model", "string")
    _need(d, "fingerprint", "string")
    axes = _need(_need(d, "mesh", "object"), "axes", "list", "mesh")
    for i, axis in enumerate(axes):
        where = f"mesh.axes[{i}]"
        if not isinstance(axis, dict):
            raise _MalformedField(f'field "{where}" must be an object, not {_json_type(axis)}')
        _need(axis, "name", "string", where)
        _need(axis, "size", "integer", where)
    topology = _need(d, "topology", "object")
    _need(topology, "name", "string", "topology")
    _need(topology, "links", "list", "topology")
    objective = _need(d, "objective", "object")
    fields = {f.name: f for f in Objective.__dataclass_fields__.values()}
    unknown = sorted(set(objective) - set(fields))
    if unknown:
        raise _MalformedField(f'field "objective" has unknown key "{unknown[0]}" '
                              f"(known: {', '.join(fields)})")
    for name, f in fields.items():
        _need(objective, name, _OBJECTIVE_KINDS[str(f.type)], "objective",
              optional=f.default is not MISSING)
    memory = _need(d, "memory", "object")
    _need(memory, "peak_bytes_per_device", "number", "memory")
    _need(memory, "limit_bytes", "number", "memory", nullable=True)
    _need(memory, "breakdown", "object", "memory", optional=True)
    for key in ("tensors", "ops"):
        for name, entry in _need(d, key, "object").items():
            if not isinstance(entry, dict):
                raise _MalformedField(f'field "{key}.{name}" must be an object, '
                                      f"not {_json_type(entry)}")
    for i, entry in enumerate(_need(d, "reshards", "list")):
        if not isinstance(entry, dict):
            raise _MalformedField(f'field "reshards[{i}]" must be an object, '
                                  f"not {_json_type(entry)}")
    _need(d, "notes", "list", optional=True)
    for key in ("stats", "verification", "pins", "throughput", "pipeline"):
        _need(d, key, "object", optional=True)


def _plan_from_dict(d: Mapping[str, Any]) -> Plan:
    mem = d["memory"]
    return Plan(
        model=d["model"],
        mesh=tuple((a["name"], int(a["size"])) for a in d["mesh"]["axes"]),
        topology=d["topology"]["name"],
        links=tuple(d["topology"]["links"]),
        objective=Objective(**d["objective"]),
        peak_bytes_per_device=mem["peak_bytes_per_device"],
        limit_bytes=mem["limit_bytes"],
        memory_breakdown=dict(mem.get("breakdown", {})),
        tensors={n: TensorRecord(shape=tuple(t["shape"]), dtype=t["dtype"], role=t["role"],
                                 placements=tuple(t["placements"]),
                                 partition_spec=_tupled(t["partition_spec"]), sdy=t["sdy"])
                 for n, t in d["tensors"].items()},
        ops={n: OpRecord(kind=o["kind"], strategy=o["strategy"], compute_s=o["compute_s"],
                         comm_s=o["comm_s"], flops=o["flops"], memory_bytes=o["memory_bytes"],
                         local_inputs=tuple(tuple(s) for s in o["local_inputs"]),
                         local_outputs=tuple(tuple(s) for s in o["local_outputs"]),
                         intra_op=tuple(_collective(c) for c in o.get("intra_op", ())),
                         count=int(o.get("count", 1)))
             for n, o in d["ops"].items()},
        reshards=tuple(ReshardRecord(tensor=r["tensor"], producer=r["producer"],
                                     consumer=r["consumer"], src=tuple(r["src"]),
                                     dst=tuple(r["dst"]),
                                     collectives=tuple(_collective(c) for c in r["collectives"]),
                                     count=int(r.get("count", 1)), overlap=r.get("overlap", ""),
                                     shared_with=tuple(r.get("shared_with", ())),
                                     cover=float(r.get("cover", 1.0)))
                       for r in d["reshards"]),
        fingerprint=d["fingerprint"],
        notes=tuple(d.get("notes", ())),
        stats=dict(d.get("stats", {})),
        verification=d.get("verification"),
        pins=d.get("pins"),
        throughput=d.get("throughput"),
        pipeline=d.get("pipeline"),
        model_parameters=d.get("model_parameters"),
    )
