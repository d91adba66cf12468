"""The points of a sweep: which meshes, topologies, links and shapes one study covers.

A sweep is the cross product of (model shape) × (topology) × (link variant) × (mesh), where the
meshes are every *ordered* factorization of each device count into 1 to 3 axes of size ≥ 2.
Order matters because axes are laid out major to minor and the minor axes fill a node first
(see :mod:`autoshard.sharding.links`): ``dp=2,tp=4`` and ``dp=4,tp=2`` put different traffic on
NVLink. Enumeration is pure and deterministic, so a point's id names the same point in every run
and a resumed sweep can tell which points it already has.

Worked example, 8 devices, 1 to 3 axes::

    axes  meshes
    1     dp=8
    2     dp=2,tp=4   dp=4,tp=2
    3     dp=2,fsdp=2,tp=2

A training sweep with pipeline sizes (``--pp``, e.g. 2,4) adds the meshes with a ``pp`` axis
of each size: the other devices split into the data axis (outermost, the first axis name)
and the tensor axis (innermost, the last name), each 1 (left out) or more, at most
``max_axes`` axes in all, e.g. for 8 devices and pp=2: ``pp=2,tp=4``, ``dp=4,pp=2``,
``dp=2,pp=2,tp=2``. Each such mesh is one point per micro-batch size (``--micro-batch``,
per data-parallel replica; 1 unless given); a size the batch does not divide into is left out.

When a training sweep gives ``--micro-batch``, the meshes without ``pp`` run the batch in
micro-batches too (gradient accumulation, as ``plan --global-batch --micro-batch`` does,
:mod:`autoshard.planning.batch`): the batch is the global batch of every point, so a pipelined
mesh and a data-parallel one are compared at the same samples per step and per micro-batch.
Without it they run the whole batch at once (one micro-batch), as they always have.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoshard.errors import UsageError
from autoshard.planning.batch import batch_plan
from autoshard.sharding.mesh import Mesh

MAX_AXES = 3
PP_AXIS = "pp"
DEFAULT_AXIS_NAMES = ("dp", "fsdp", "tp")
DEFAULT_LINKS = "default"
_SLUG = re.compile(r"[^A-Za-z0-9.]+")


def factorizations(devices: int, min_axes: int = 1, max_axes: int = MAX_AXES
                   ) -> tuple[tuple[int, ...], ...]:
    """Every ordered tuple of sizes ≥ 2 whose product is ``devices``, with ``min_axes`` to
    ``max_axes`` entries; fewer axes first, then lexicographic.

    Example:
        >>> factorizations(8)
        ((8,), (2, 4), (4, 2), (2, 2, 2))
        >>> len(factorizations(64))
        16
    """
    found: list[tuple[int, ...]] = []
    for count in range(min_axes, max_axes + 1):
        found.extend(_ordered(devices, count))
    return tuple(found)


def _ordered(devices: int, count: int) -> list[tuple[int, ...]]:
    if count == 1:
        return [(devices,)] if devices >= 2 else []
    return [(first, *rest) for first in range(2, devices + 1) if devices % first == 0
            for rest in _ordered(devices // first, count - 1)]


def axis_names_for(count: int, names: tuple[str, ...] = DEFAULT_AXIS_NAMES) -> tuple[str, ...]:
    """Names of a ``count``-axis mesh: the outermost axis takes the first name and the inner
    axes the last ``count - 1`` names, so ``dp,fsdp,tp`` gives ``dp``, ``dp,tp``,
    ``dp,fsdp,tp`` (data parallel across nodes, tensor parallel inside one).

    Example:
        >>> axis_names_for(2), axis_names_for(2, ("x", "y", "z"))
        (('dp', 'tp'), ('x', 'z'))
    """
    if count > len(names):
        raise UsageError(f"a {count}-axis mesh needs {count} names but --axis-names gives "
                         f"{len(names)} ({','.join(names)}); add names or lower --axes")
    return names[:1] + (names[len(names) - count + 1:] if count > 1 else ())


@dataclass(frozen=True, slots=True, kw_only=True)
class Shape:
    """Everything that decides the graph: built once per worker and reused across meshes."""

    model: str
    batch: int | None
    seq: int | None
    training: bool
    optimizer: str = "adamw"
    recompute: str = "none"
    overrides: tuple[tuple[str, Any], ...] = ()
    # What a Hugging Face config is built at when ``batch``/``seq`` is None (its defaults):
    # shown in the rows, kept out of the point id and of the graph's overrides, so the ids of
    # sweeps written before these were known stay the same and those sweeps still resume.
    default_batch: int | None = None
    default_seq: int | None = None

    @property
    def mode(self) -> str:
        return "train" if self.training else "infer"

    @property
    def slug(self) -> str:
        """Model, overrides and training choices, e.g. ``llama3-8b.layers8`` + ``train-sgd``."""
        model = Path(self.model).stem if self.model.endswith(".json") else self.model
        name = ".".join([_slug(model), *(_slug(f"{k}{v}") for k, v in self.overrides)])
        mode = self.mode
        if self.training and (self.optimizer, self.recompute) != ("adamw", "none"):
            mode += f"-{self.optimizer}-{self.recompute}"
        return f"{name}_{mode}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Point:
    """One plan of the sweep: a graph shape on a mesh of a topology with link overrides."""

    shape: Shape
    mesh: tuple[tuple[str, int], ...]
    topology: str
    links: str = DEFAULT_LINKS
    # samples per micro-batch and data-parallel replica: every pipelined point; the others
    # when the sweep accumulates (SweepSpec.accumulate), else None (the batch at once)
    micro_batch: int | None = None

    @property
    def devices(self) -> int:
        return Mesh(axes=self.mesh).size

    @property
    def mesh_text(self) -> str:
        return str(Mesh(axes=self.mesh))

    @property
    def point_id(self) -> str:
        """A readable directory name, e.g. ``gpt2_infer_b8_s1024_dgx-h100_default_dp2.tp4``."""
        shape = self.shape
        parts = [shape.slug, f"b{_text(shape.batch)}", f"s{_text(shape.seq)}",
                 _slug(Path(self.topology).stem), _slug(self.links, limit=40),
                 ".".join(f"{name}{size}" for name, size in self.mesh)]
        if self.micro_batch is not None:
            parts.append(f"mb{self.micro_batch}")
        return "_".join(parts)

    @property
    def pipelined(self) -> bool:
        return any(name == PP_AXIS for name, _ in self.mesh)

    @property
    def batch_used(self) -> int | None:
        """The batch the point's step is planned at (None: a graph file's, unknown). A
        pipelined point whose sweep gave no batch runs one micro-batch per replica, so its
        batch is the graph's; otherwise the sweep's batch or the model's default.

        Example:
            >>> shape = Shape(model="config.json", batch=None, seq=None, training=True,
            ...               default_batch=8)
            >>> Point(shape=shape, mesh=(("dp", 2),), topology="dgx-h100").batch_used
            8
            >>> Point(shape=shape, mesh=(("dp", 2), ("pp", 2)), topology="dgx-h100",
            ...       micro_batch=2).batch_used
            4
        """
        shape = self.shape
        if shape.batch is not None or shape.default_batch is None:
            return shape.batch
        if self.pipelined:
            graph_batch, count = self.micro_batches()
            return graph_batch * count
        return shape.default_batch

    @property
    def seq_used(self) -> int | None:
        """The sequence length the point's step is planned at (None: unknown)."""
        return self.shape.seq if self.shape.seq is not None else self.shape.default_seq

    def micro_batches(self) -> tuple[int, int]:
        """``(graph batch, micro-batches per step)`` of a point with a ``micro_batch``: the
        graph holds one micro-batch of every data-parallel replica (pipelined: the axes
        outside ``pp``; otherwise the axes named dp, fsdp, … as for ``plan --micro-batch``).

        Example:
            >>> shape = Shape(model="gpt2", batch=32, seq=None, training=True)
            >>> Point(shape=shape, mesh=(("dp", 4), ("tp", 2)), topology="dgx-h100",
            ...       micro_batch=2).micro_batches()
            (8, 4)
        """
        if not self.pipelined:
            batch = self.shape.batch or self.shape.default_batch
            assert batch is not None and self.micro_batch is not None, self.point_id
            steps = batch_plan(Mesh(axes=self.mesh), global_batch=batch,
                               micro_batch=self.micro_batch)
            assert steps.graph_batch is not None
            return steps.graph_batch, steps.micro_batches
        names = [name for name, _ in self.mesh]
        replicas = 1
        for _, size in self.mesh[: names.index(PP_AXIS)]:
            replicas *= size
        graph_batch = replicas * (self.micro_batch or 1)
        return graph_batch, (self.shape.batch or graph_batch) // graph_batch

    def link_overrides(self) -> dict[str, str]:
        """The variant's overrides that name an axis of this mesh (others do not apply)."""
        names = {name for name, _ in self.mesh}
        return {axis: spec for axis, spec in parse_link_variant(self.links).items()
                if axis in names}


def _text(value: int | None) -> str:
    return "-" if value is None else str(value)


def _slug(text: str, limit: int = 60) -> str:
    slug = _SLUG.sub("-", text).strip("-") or "x"
    if len(slug) > limit:
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        slug = f"{slug[:limit - 9]}-{digest}"
    return slug


def parse_link_variant(text: str) -> dict[str, str]:
    """``"dp=ib;tp=alpha:5us,bw:450GB/s"`` → per-axis specs; ``default`` is no override."""
    if text == DEFAULT_LINKS:
        return {}
    links: dict[str, str] = {}
    for part in (p.strip() for p in text.split(";") if p.strip()):
        axis, sep, spec = part.partition("=")
        if not sep or not axis.strip() or not spec.strip():
            raise UsageError(f'--link "{text}" must look like AXIS=SPEC (several joined with '
                             '";"), e.g. dp=alpha:4us,bw:25GB/s, or "default"')
        links[axis.strip()] = spec.strip()
    return links


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepSpec:
    """What a sweep covers; :func:`enumerate_points` expands it into points."""

    model: str
    devices: tuple[int, ...]
    min_axes: int = 1
    max_axes: int = MAX_AXES
    axis_names: tuple[str, ...] = DEFAULT_AXIS_NAMES
    topologies: tuple[str, ...] = ("dgx-h100",)
    links: tuple[str, ...] = (DEFAULT_LINKS,)
    batches: tuple[int | None, ...] = (None,)
    seqs: tuple[int | None, ...] = (None,)
    training: bool = False
    optimizer: str = "adamw"
    recompute: str = "none"
    overrides: tuple[tuple[str, Any], ...] = ()
    pipeline: tuple[int, ...] = ()  # pp sizes (training sweeps)
    micro_batch_sizes: tuple[int, ...] = (1,)
    # --micro-batch given: the meshes without pp accumulate over micro-batches too
    accumulate: bool = False
    default_batch: int | None = None  # a Hugging Face config's defaults (see Shape)
    default_seq: int | None = None

    def __post_init__(self) -> None:
        if not self.devices or any(d < 2 for d in self.devices):
            raise UsageError(f"--devices must list device counts of at least 2, got "
                             f"{','.join(map(str, self.devices)) or 'nothing'}")
        if not 1 <= self.min_axes <= self.max_axes <= MAX_AXES:
            raise UsageError(f"--axes must be a range within 1-{MAX_AXES}, got "
                             f"{self.min_axes}-{self.max_axes}")
        for name in self.links:
            parse_link_variant(name)
        axis_names_for(self.max_axes, self.axis_names)
        empty = [d for d in self.devices if not factorizations(d, self.min_axes, self.max_axes)]
        if empty:
            raise UsageError(f"{empty[0]} devices have no mesh of {self.min_axes}-"
                             f"{self.max_axes} axes of size at least 2; change --devices or "
                             "--axes")


def enumerate_points(spec: SweepSpec) -> tuple[Point, ...]:
    """Every point of ``spec`` in a stable order: shape, topology, links, devices, mesh."""
    points: list[Point] = []
    for batch in spec.batches:
        for seq in spec.seqs:
            shape = Shape(model=spec.model, batch=batch, seq=seq, training=spec.training,
                          optimizer=spec.optimizer, recompute=spec.recompute,
                          overrides=spec.overrides, default_batch=spec.default_batch,
                          default_seq=spec.default_seq)
            for topology in spec.topologies:
                for links in spec.links:
                    points.extend(_meshes(spec, shape, topology, links))
    return tuple(points)


def _meshes(spec: SweepSpec, shape: Shape, topology: str, links: str) -> list[Point]:
    points = []
    accumulate = spec.accumulate and shape.training and (
        shape.batch is not None or shape.default_batch is not None)
    for devices in spec.devices:
        for sizes in factorizations(devices, spec.min_axes, spec.max_axes):
            mesh = tuple(zip(axis_names_for(len(sizes), spec.axis_names), sizes, strict=True))
            if not accumulate:
                points.append(Point(shape=shape, topology=topology, links=links, mesh=mesh))
                continue
            points += [Point(shape=shape, topology=topology, links=links, mesh=mesh,
                             micro_batch=size) for size in spec.micro_batch_sizes
                       if _divides(shape.batch or shape.default_batch, mesh, size)]
        if shape.training:
            points += [Point(shape=shape, topology=topology, links=links, mesh=mesh,
                             micro_batch=size)
                       for mesh in pipeline_meshes(devices, spec) for size in
                       spec.micro_batch_sizes if _divides(shape.batch, mesh, size)]
    return points


def pipeline_meshes(devices: int, spec: SweepSpec) -> list[tuple[tuple[str, int], ...]]:
    """Meshes of ``devices`` with a ``pp`` axis of each of ``spec.pipeline``'s sizes (see
    the module docstring), fewer axes first.

    Example:
        >>> spec = SweepSpec(model="gpt2", devices=(8,), training=True, pipeline=(2,))
        >>> [",".join(f"{n}={s}" for n, s in m) for m in pipeline_meshes(8, spec)]
        ['dp=4,pp=2', 'pp=2,tp=4', 'dp=2,pp=2,tp=2']
    """
    data, tensor = spec.axis_names[0], spec.axis_names[-1]
    found = []
    for pp in spec.pipeline:
        if devices % pp or pp < 2:
            continue
        rest = devices // pp
        splits = [(rest, 1), (1, rest)] + [(a, rest // a) for a in range(2, rest)
                                           if rest % a == 0]
        for dp, tp in dict.fromkeys(splits if rest > 1 else [(1, 1)]):
            mesh = tuple((n, s) for n, s in ((data, dp), (PP_AXIS, pp), (tensor, tp))
                         if s > 1 or n == PP_AXIS)
            if spec.min_axes <= len(mesh) <= spec.max_axes:
                found.append(mesh)
    return sorted(found, key=len)


def _divides(batch: int | None, mesh: tuple[tuple[str, int], ...], size: int) -> bool:
    """Whether the batch splits into whole micro-batches of ``size`` per replica."""
    if batch is None:
        return True
    point = Point(shape=Shape(model="", batch=batch, seq=None, training=True), mesh=mesh,
                  topology="", micro_batch=size)
    try:
        graph_batch, count = point.micro_batches()
    except UsageError:  # batch_plan: the replicas' micro-batches do not divide the batch
        return False
    return count >= 1 and graph_batch * count == batch


def parse_int_list(text: str, option: str) -> tuple[int, ...]:
    """``"8,16,64"`` → ``(8, 16, 64)``; anything else names the option and the bad part."""
    values = []
    for part in (p.strip() for p in text.split(",")):
        if not part.isdigit() or int(part) < 1:
            raise UsageError(f'{option} "{text}": "{part}" is not a positive integer; give a '
                             f"comma-separated list such as 8,16,64")
        values.append(int(part))
    return tuple(dict.fromkeys(values))


def parse_axes(text: str) -> tuple[int, int]:
    """``"2"`` → ``(2, 2)``; ``"1-3"`` → ``(1, 3)``."""
    low, _, high = text.partition("-")
    if not low.strip().isdigit() or (high and not high.strip().isdigit()):
        raise UsageError(f'--axes "{text}" must be a count or a range such as 1-3')
    first, last = int(low), int(high or low)
    if not 1 <= first <= last <= MAX_AXES:
        raise UsageError(f'--axes "{text}" must lie within 1-{MAX_AXES}')
    return first, last
