"""What separates two plans of one model on one mesh: placements, time, memory, collectives.

Placements are compared tensor by tensor and grouped by layer pattern as the plan summary
groups them (``layers.*.attn.wq``: the same change in every layer is one row). Step time is
split into compute, communication per collective kind and mesh axes (reshards and the
collectives inside ops alike, every run counted), the communication hidden behind compute
and that beside another mesh axis's (negative rows), and a pipeline's idle time: step =
compute + communication + hidden + beside + idle; memory into the categories at each
plan's peak. Collectives are
matched by (tensor pattern, consumer pattern, kind, axes, bytes): what one plan runs and the
other does not is added or removed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from autoshard.errors import UsageError
from autoshard.planning.record import Plan
from autoshard.planning.summary import BREAKDOWN_ORDER, layer_pattern


@dataclass(frozen=True, slots=True, kw_only=True)
class PlacementChange:
    """Tensors of one layer pattern whose placement is ``a`` in A and ``b`` in B."""

    pattern: str
    tensors: int
    a: str
    b: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One line of the time or memory split: seconds or bytes in A and B."""

    section: str
    item: str
    a: float
    b: float

    @property
    def delta(self) -> float:
        return self.b - self.a


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveChange:
    """Collectives one plan runs and the other does not (``count`` of them, ``seconds``
    in all)."""

    tensor: str
    consumer: str
    kind: str
    axes: str
    bytes: float
    count: int
    seconds: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanDiff:
    a: str
    b: str
    differs: tuple[str, ...]
    placements: tuple[PlacementChange, ...]
    time: tuple[Row, ...]
    memory: tuple[Row, ...]
    added: tuple[CollectiveChange, ...]
    removed: tuple[CollectiveChange, ...]

    def rows(self) -> list[dict[str, Any]]:
        """Every row as ``section, item, a, b, delta`` (what ``--csv`` writes)."""
        rows = [{"section": r.section, "item": r.item.strip(), "a": r.a, "b": r.b, "delta": r.delta}
                for r in (*self.time, *self.memory)]
        rows += [{"section": "placement", "item": f"{p.pattern} ({p.tensors})", "a": p.a,
                  "b": p.b, "delta": ""} for p in self.placements]
        for what, changes, sign in (("collective added", self.added, 1),
                                    ("collective removed", self.removed, -1)):
            rows += [{"section": what, "item": _describe(c), "a": 0.0 if sign > 0 else c.seconds,
                      "b": c.seconds if sign > 0 else 0.0, "delta": sign * c.seconds}
                     for c in changes]
        return rows


def differences(a: Plan, b: Plan) -> tuple[str, ...]:
    """What makes two plans incomparable: model, mesh, or the tensors they lay out."""
    found = []
    if a.model != b.model:
        found.append(f"model {a.model} vs {b.model}")
    if tuple(a.mesh) != tuple(b.mesh):
        found.append(f"mesh {_mesh(a)} vs {_mesh(b)}")
    shapes_a = {n: r.shape for n, r in a.tensors.items()}
    shapes_b = {n: r.shape for n, r in b.tensors.items()}
    if shapes_a != shapes_b:
        only = sorted(set(shapes_a) ^ set(shapes_b))
        other = sorted(n for n in set(shapes_a) & set(shapes_b) if shapes_a[n] != shapes_b[n])
        example = ", ".join((only or other)[:2])
        found.append(f"tensors ({len(only)} in one plan only, {len(other)} of other shapes, "
                     f"e.g. {example})")
    return tuple(found)


def diff_plans(a: Plan, b: Plan, *, force: bool = False, names: tuple[str, str] = ("A", "B")
               ) -> PlanDiff:
    """Compare plan ``a`` with plan ``b``.

    Raises:
        UsageError: the plans are of different models, meshes or graphs, and not ``force``.
    """
    differs = differences(a, b)
    if differs and not force:
        raise UsageError(f"{names[0]} and {names[1]} are plans of different problems: "
                         f"{'; '.join(differs)}; pass --force to compare them anyway")
    return PlanDiff(a=names[0], b=names[1], differs=differs, placements=_placements(a, b),
                    time=_time(a, b), memory=_memory(a, b),
                    added=_collective_changes(b, a), removed=_collective_changes(a, b))


def _mesh(plan: Plan) -> str:
    return ",".join(f"{n}={s}" for n, s in plan.mesh)


def _placements(a: Plan, b: Plan) -> tuple[PlacementChange, ...]:
    groups: Counter[tuple[str, str, str]] = Counter()
    for name, rec in a.tensors.items():
        other = b.tensors.get(name)
        if other is None or other.placements == rec.placements:
            continue
        groups[(layer_pattern(name), " ".join(rec.placements), " ".join(other.placements))] += 1
    return tuple(PlacementChange(pattern=p, tensors=n, a=x, b=y)
                 for (p, x, y), n in groups.items())


def comm_split(plan: Plan) -> dict[str, float]:
    """Seconds per ``kind over axes`` of every collective the plan runs, every run counted
    (hidden or not); a reshard's local steps are compute (``objective.compute_s``), not
    communication, and are left out."""
    split: dict[str, float] = {}
    collectives = [(r.count, c) for r in plan.reshards for c in r.collectives if not c.local]
    collectives += [(op.count, c) for op in plan.ops.values() for c in op.intra_op]
    for count, c in collectives:
        key = f"{c.kind} over {','.join(c.axes)}"
        split[key] = split.get(key, 0.0) + count * c.seconds
    return split


def _time(a: Plan, b: Plan) -> tuple[Row, ...]:
    rows = [Row(section="time", item="step", a=a.objective.total_s, b=b.objective.total_s),
            Row(section="time", item="compute", a=a.objective.compute_s,
                b=b.objective.compute_s),
            Row(section="time", item="communication", a=a.objective.comm_s,
                b=b.objective.comm_s),
            Row(section="time", item="hidden behind compute", a=-a.objective.hidden_s,
                b=-b.objective.hidden_s),
            Row(section="time", item="beside other axes' communication",
                a=-a.objective.concurrent_s, b=-b.objective.concurrent_s),
            Row(section="time", item="pipeline idle", a=a.objective.bubble_s,
                b=b.objective.bubble_s)]
    split_a, split_b = comm_split(a), comm_split(b)
    for key in sorted(set(split_a) | set(split_b)):
        rows.append(Row(section="time", item=f"  {key}", a=split_a.get(key, 0.0),
                        b=split_b.get(key, 0.0)))
    return tuple(rows)


def _memory(a: Plan, b: Plan) -> tuple[Row, ...]:
    rows = [Row(section="memory", item="peak per device", a=a.peak_bytes_per_device,
                b=b.peak_bytes_per_device)]
    keys = [k for k in BREAKDOWN_ORDER if k in a.memory_breakdown or k in b.memory_breakdown]
    keys += sorted((set(a.memory_breakdown) | set(b.memory_breakdown)) - set(keys))
    for key in keys:
        rows.append(Row(section="memory", item=f"  {key}", a=a.memory_breakdown.get(key, 0.0),
                        b=b.memory_breakdown.get(key, 0.0)))
    return tuple(rows)


def _collective_keys(plan: Plan) -> tuple[Counter[tuple[Any, ...]], dict[tuple[Any, ...], float]]:
    counts: Counter[tuple[Any, ...]] = Counter()
    seconds: dict[tuple[Any, ...], float] = {}
    for r in plan.reshards:
        for c in r.collectives:
            key = (layer_pattern(r.tensor), layer_pattern(r.consumer), c.kind,
                   ",".join(c.axes), c.bytes)
            counts[key] += 1
            seconds[key] = c.seconds
    return counts, seconds


def _collective_changes(plan: Plan, other: Plan) -> tuple[CollectiveChange, ...]:
    """Collectives of ``plan`` that ``other`` does not run."""
    mine, seconds = _collective_keys(plan)
    theirs, _ = _collective_keys(other)
    changes = []
    for key, count in (mine - theirs).items():
        tensor, consumer, kind, axes, nbytes = key
        changes.append(CollectiveChange(tensor=tensor, consumer=consumer, kind=kind, axes=axes,
                                        bytes=nbytes, count=count,
                                        seconds=count * seconds[key]))
    changes.sort(key=lambda c: (-c.seconds, c.tensor, c.consumer, c.kind))
    return tuple(changes)


def _describe(c: CollectiveChange) -> str:
    return f"{c.count}x {c.kind} over {c.axes} of {c.tensor} -> {c.consumer}"
