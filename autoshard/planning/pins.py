"""Pins: rules that fix the layout of some tensors; the planner optimises everything else.

A pin file is TOML::

    gradient_sync = "eager"            # optional; "deferred": ZeRO-1 (see below)

    [[pin]]
    tensors = "layers.*.attn.wq"       # a glob over tensor names (fnmatch), or a list of globs
    role = "param"                     # optional: only tensors of this role
    placements = ["R", "S(1)"]         # one per mesh axis, in mesh order
    # placements = { tp = "S(1)" }     # or by axis name; axes left out stay free
    optional = true                    # optional: the rule may match no tensor

Tensor names are the plan's (``autoshard plan`` prints the parameters' as ``layers.*.attn.wq``
patterns; plan.json lists them all). Placements are DTensor short forms: ``R``, ``S(d)``,
``P(sum)``, ``_S(d,split_factor)``; ``*`` leaves an axis free and ``S(*)`` asks for a shard
along any dim. Rules apply in file order: per tensor and mesh axis, the last rule that sets
that axis wins, so a broad rule can be refined by a narrower one after it. A tensor's layout
is the one its producer writes (a parameter's, as stored; an activation's, as its op outputs
it; a graph output's, after any reduction the plan owes it); consumers that read it in another
layout pay a reshard. When several axes shard one dim, a placement list means mesh order is
not required: any order matches (a plan.json pins the order too).

``gradient_sync`` says when a parameter gradient is reduced: ``eager`` (the default, what DDP,
ZeRO-2 and FSDP do: bucket by bucket as backward produces them, held in the optimizer's
layout) or ``deferred`` (ZeRO-1: held whole as produced, accumulated whole over the
micro-batches, reduced once per step into the layout the optimizer reads).

A saved plan.json is a pin set too (:func:`pins_from_plan`): every tensor pinned to its
recorded layout, axis order included, on a mesh with the same axis names (sizes may differ):
re-planning it evaluates that plan on another topology or mesh size.
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoshard.errors import AutoshardError, PinError
from autoshard.planning.decode import partition_spec_or_none
from autoshard.planning.record import Plan, plan_file
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import Shard, StridedShard, parse_placement
from autoshard.sharding.tensor_sharding import TensorSharding
from graphs import OpGraph, TensorRole

FREE, ANY_SHARD = "*", "S(*)"
GRADIENT_SYNC = ("eager", "deferred")
ROLES = tuple(role.value for role in TensorRole)
RULE_KEYS = ("tensors", "role", "placements", "optional")


@dataclass(frozen=True, slots=True, kw_only=True)
class PinRule:
    """One rule: tensors (globs, or exact names when ``literal``) → a placement per axis.

    ``placements`` is positional (one per mesh axis) or keyed by axis name; ``spec`` is a
    recorded partition spec that fixes the order of axes on a dim (plan.json pins)."""

    number: int
    source: str
    tensors: tuple[str, ...]
    placements: tuple[str, ...] | tuple[tuple[str, str], ...]
    keyed: bool = False
    role: str | None = None
    optional: bool = False
    literal: bool = False
    spec: tuple[Any, ...] | None = None

    @property
    def name(self) -> str:
        """``rule 3 of pins.toml (layers.*.attn.wq)``: how errors name the rule."""
        tensors = ", ".join(self.tensors[:3]) + (", …" if len(self.tensors) > 3 else "")
        return f"rule {self.number} of {self.source} ({tensors})"

    def matches(self, name: str, role: str) -> bool:
        if self.role is not None and role != self.role:
            return False
        if self.literal:
            return name in self.tensors
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.tensors)

    def per_axis(self, mesh: Mesh) -> tuple[str, ...]:
        """One pattern per mesh axis (``*`` where the rule says nothing)."""
        if not self.keyed:
            if len(self.placements) != mesh.ndim:
                raise PinError(f"{self.name} gives {len(self.placements)} placements for mesh "
                               f"{mesh} with {mesh.ndim} axes; give one per axis or a table "
                               "keyed by axis name", rule=self.name)
            return tuple(str(p) for p in self.placements)
        patterns = dict.fromkeys(mesh.axis_names, FREE)
        for axis, pattern in self.placements:
            if axis not in patterns:
                raise PinError(f'{self.name} names mesh axis "{axis}", but mesh {mesh} has '
                               f"axes {', '.join(mesh.axis_names)}", rule=self.name)
            patterns[axis] = pattern
        return tuple(patterns.values())

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"source": self.source, "number": self.number,
                                "tensors": list(self.tensors)}
        if self.role is not None:
            data["role"] = self.role
        data["placements"] = dict(self.placements) if self.keyed else list(self.placements)
        if self.optional:
            data["optional"] = True
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Pins:
    """An ordered set of rules, and when gradients are reduced (``gradient_sync``)."""

    rules: tuple[PinRule, ...] = ()
    gradient_sync: str = "eager"
    sources: tuple[str, ...] = ()
    from_plan: str | None = None

    def __add__(self, other: Pins) -> Pins:
        """``self``'s rules, then ``other``'s (which win where both set an axis)."""
        sync = other.gradient_sync if other.gradient_sync != "eager" else self.gradient_sync
        return Pins(rules=self.rules + other.rules, gradient_sync=sync,
                    sources=self.sources + other.sources,
                    from_plan=other.from_plan or self.from_plan)

    def to_dict(self) -> dict[str, Any]:
        """What plan.json records under ``pins``: enough to re-plan with the same pins."""
        data: dict[str, Any] = {"sources": list(self.sources),
                                "gradient_sync": self.gradient_sync}
        if self.from_plan is not None:
            data["from_plan"] = self.from_plan
        data["rules"] = [r.to_dict() for r in self.rules if not r.literal]
        return data


@dataclass(frozen=True, slots=True)
class TensorPin:
    """What the rules ask of one tensor: a pattern per mesh axis, or an exact sharding."""

    tensor: str
    patterns: tuple[str, ...]
    exact: TensorSharding | None = None
    rules: tuple[PinRule, ...] = field(default=(), compare=False)

    def matches(self, sharding: TensorSharding) -> bool:
        if self.exact is not None:
            return sharding == self.exact
        for pattern, placement in zip(self.patterns, sharding.placements, strict=True):
            if pattern == FREE:
                continue
            if pattern == ANY_SHARD:
                if not isinstance(placement, Shard | StridedShard):
                    return False
            elif str(placement) != pattern:
                return False
        return True

    @property
    def key(self) -> tuple[Any, ...]:
        """Hashable identity of the constraint (not of the rules that set it)."""
        return (self.patterns, self.exact)

    def describe(self) -> str:
        return "[" + ", ".join(self.patterns) + "]"

    def rule_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(rule.name for rule in self.rules))


# ---- reading ------------------------------------------------------------------------------
def load_pins(path: str | Path) -> Pins:
    """A TOML pin file, or a plan.json or the directory ``plan --out`` wrote it to (every
    tensor pinned to its recorded layout)."""
    path = plan_file(Path(path))
    if not path.is_file():
        raise PinError(f"pin file {path}: no such file; give a TOML pin file or a plan.json")
    if path.suffix == ".json":
        return pins_from_plan(Plan.load(path), str(path))
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PinError(f"pin file {path}: not TOML ({exc})") from None
    return parse_pins(data, path.name)


def parse_pins(data: Mapping[str, Any], source: str) -> Pins:
    """Pins from a parsed TOML document (see the module docstring for the schema)."""
    unknown = sorted(set(data) - {"pin", "gradient_sync", "strategy"})
    if unknown:
        raise PinError(f'{source}: unknown key "{unknown[0]}"; a pin file holds [[pin]] '
                       "tables and optionally gradient_sync")
    sync = data.get("gradient_sync", "eager")
    if sync not in GRADIENT_SYNC:
        raise PinError(f'{source}: gradient_sync "{sync}" is not one of '
                       f"{', '.join(GRADIENT_SYNC)}")
    entries = data.get("pin", [])
    if not isinstance(entries, list):
        raise PinError(f"{source}: pins are [[pin]] tables (an array of tables)")
    rules = tuple(_rule(entry, number, source)
                  for number, entry in enumerate(entries, start=1))
    return Pins(rules=rules, gradient_sync=sync, sources=(source,))


def _rule(entry: Any, number: int, source: str) -> PinRule:
    where = f"rule {number} of {source}"
    if not isinstance(entry, Mapping):
        raise PinError(f"{where} is not a table", rule=where)
    unknown = sorted(set(entry) - set(RULE_KEYS))
    if unknown:
        raise PinError(f'{where}: unknown key "{unknown[0]}"; a rule has '
                       f"{', '.join(RULE_KEYS)}", rule=where)
    tensors = entry.get("tensors")
    if isinstance(tensors, str):
        tensors = [tensors]
    if not tensors or not all(isinstance(t, str) and t for t in tensors):
        raise PinError(f'{where}: "tensors" must be a glob or a list of globs', rule=where)
    role = entry.get("role")
    if role is not None and role not in ROLES:
        raise PinError(f'{where}: role "{role}" is not one of {", ".join(ROLES)}', rule=where)
    placements = entry.get("placements")
    if isinstance(placements, Mapping):
        pairs = tuple((str(axis), _pattern(p, where)) for axis, p in placements.items())
        keyed, values = True, pairs
    elif isinstance(placements, list) and placements:
        keyed, values = False, tuple(_pattern(p, where) for p in placements)
    else:
        raise PinError(f'{where}: "placements" must be a list (one per mesh axis) or a table '
                       'keyed by axis name, e.g. ["R", "S(1)"]', rule=where)
    optional = entry.get("optional", False)
    if not isinstance(optional, bool):
        raise PinError(f'{where}: "optional" must be true or false', rule=where)
    return PinRule(number=number, source=source, tensors=tuple(tensors), placements=values,
                   keyed=keyed, role=role, optional=optional)


def _pattern(text: Any, where: str) -> str:
    """A placement in canonical short form, or a wildcard."""
    if not isinstance(text, str):
        raise PinError(f"{where}: placement {text!r} is not a string like \"S(1)\"", rule=where)
    stripped = text.strip()
    if stripped in (FREE, ANY_SHARD):
        return stripped
    try:
        return str(parse_placement(stripped))
    except AutoshardError as exc:
        raise PinError(f"{where}: {exc}, or * (free) or S(*) (sharded on any dim)",
                       rule=where) from None


def pins_from_plan(plan: Any, source: str = "plan.json") -> Pins:
    """Every tensor of a saved plan pinned to its recorded layout (axis order included)."""
    axes = [name for name, _ in plan.mesh]
    rules = tuple(
        PinRule(number=i, source=source, tensors=(name,), literal=True, keyed=True,
                placements=tuple(zip(axes, rec.placements, strict=True)),
                spec=None if rec.partition_spec is None else tuple(rec.partition_spec))
        for i, (name, rec) in enumerate(plan.tensors.items(), start=1))
    sync = (plan.pins or {}).get("gradient_sync", "eager")
    return Pins(rules=rules, gradient_sync=sync, sources=(source,), from_plan=source)


def pins_from_record(record: Mapping[str, Any], plan: Any) -> Pins:
    """The pins a plan.json says it was made with (its ``pins`` entry), rules as numbered
    then; a plan evaluated from another plan is pinned to its own layouts (the same ones)."""
    rules = []
    for entry in record.get("rules", ()):
        rule = _rule({k: v for k, v in entry.items() if k not in ("source", "number")},
                     int(entry.get("number", 0)), str(entry.get("source", "plan.json")))
        rules.append(rule)
    pins = Pins(rules=tuple(rules), gradient_sync=record.get("gradient_sync", "eager"),
                sources=tuple(record.get("sources", ())))
    if record.get("from_plan"):
        own = pins_from_plan(plan, str(record["from_plan"]))
        pins = Pins(rules=pins.rules + own.rules, gradient_sync=pins.gradient_sync,
                    sources=pins.sources, from_plan=own.from_plan)
    return pins


def forced_pin(tensor: str, sharding: TensorSharding, source: str = "explain") -> Pins:
    """One tensor pinned to exactly ``sharding`` (a rule that wins over earlier ones)."""
    spec = partition_spec_or_none(sharding)
    rule = PinRule(number=1, source=source, tensors=(tensor,), literal=True, keyed=True,
                   placements=tuple(zip(sharding.mesh.axis_names,
                                        (str(p) for p in sharding.placements), strict=True)),
                   spec=spec)
    return Pins(rules=(rule,), sources=(source,))


# ---- resolving against a graph and a mesh --------------------------------------------------
def resolve_pins(pins: Pins, graph: OpGraph, mesh: Mesh) -> dict[str, TensorPin]:
    """Per pinned tensor, what the rules ask of it (the last rule setting an axis wins).

    Raises:
        PinError: a rule that matches no tensor (and is not optional), a malformed placement
            for this mesh, or a plan's tensors on a mesh with other axis names.
    """
    _check_plan_axes(pins, mesh)
    _check_plan_tensors(pins, graph)
    tensors = {name: (t.role.value, len(t.shape)) for name, t in graph.tensors.items()}
    patterns: dict[str, list[str]] = {}
    exact: dict[str, TensorSharding | None] = {}
    rules: dict[str, list[PinRule]] = {}
    for rule in pins.rules:
        axes = rule.per_axis(mesh)
        hits = _matches(rule, tensors)
        if not hits and not rule.optional:
            raise PinError(f"{rule.name} matches no tensor of {graph.name}; check the names "
                           "(plan.json lists them) or mark the rule optional = true",
                           rule=rule.name)
        for name, ndim in hits:
            current = patterns.setdefault(name, [FREE] * mesh.ndim)
            for i, pattern in enumerate(axes):
                if pattern != FREE:
                    current[i] = pattern
            exact[name] = _exact(rule, mesh, name, ndim) if rule.literal else None
            rules.setdefault(name, []).append(rule)
    return {name: TensorPin(name, tuple(p), exact.get(name), tuple(rules[name]))
            for name, p in patterns.items() if any(x != FREE for x in p)}


def _matches(rule: PinRule, tensors: Mapping[str, tuple[str, int]]) -> list[tuple[str, int]]:
    if rule.literal:  # a plan's one-tensor rules: no scan over the graph
        return [(name, tensors[name][1]) for name in rule.tensors
                if name in tensors and rule.matches(name, tensors[name][0])]
    return [(name, ndim) for name, (role, ndim) in tensors.items() if rule.matches(name, role)]


def _exact(rule: PinRule, mesh: Mesh, tensor: str, ndim: int) -> TensorSharding | None:
    """The recorded sharding of a plan.json rule, on ``mesh``."""
    try:
        base = TensorSharding(mesh, tuple(parse_placement(p) for p in rule.per_axis(mesh)),
                              ndim)
        if rule.spec is None:
            return base
        ordered = TensorSharding.from_partition_spec(mesh, rule.spec, ndim)
    except AutoshardError as exc:
        raise PinError(f'{rule.name}: tensor "{tensor}": {exc}', rule=rule.name,
                       tensor=tensor) from None
    return TensorSharding(mesh, base.placements, ndim, ordered.shard_order)


def _check_plan_axes(pins: Pins, mesh: Mesh) -> None:
    for rule in pins.rules:
        if rule.source == pins.from_plan:
            axes = tuple(axis for axis, _ in rule.placements)
            if axes != mesh.axis_names:
                raise PinError(f"{rule.source} was planned on mesh axes {', '.join(axes)}, "
                               f"not on {', '.join(mesh.axis_names)}; re-evaluate it on a "
                               "mesh with the same axis names (sizes may differ)",
                               rule=rule.name)
            return


def _check_plan_tensors(pins: Pins, graph: OpGraph) -> None:
    """A plan's pins are an evaluation of that plan: the graph must hold the same tensors."""
    planned = {name for rule in pins.rules if rule.source == pins.from_plan
               for name in rule.tensors}
    if not planned:
        return
    missing = sorted(planned - set(graph.tensors))
    extra = sorted(set(graph.tensors) - planned)
    if not missing and not extra:
        return
    planned_training = any(name.startswith("grad/") for name in planned)
    given_training = any(name.startswith("grad/") for name in graph.tensors)
    hint = ""
    if planned_training != given_training:
        hint = (" (it is a training plan: pass --training)" if planned_training
                else " (it is an inference plan: drop --training)")
    what = (f"it has tensors the graph lacks ({', '.join(missing[:3])})" if missing
            else f"the graph has tensors it lacks ({', '.join(extra[:3])})")
    raise PinError(f"{pins.from_plan or 'the plan'} is not a plan of {graph.name} with these "
                   f"options: {what}{hint}; evaluate it with the model, shape and training "
                   "options it was planned with")


def describe_rules(rules: Sequence[PinRule]) -> str:
    return "; ".join(dict.fromkeys(r.name for r in rules))
