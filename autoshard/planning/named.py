"""Named hand plans (``--strategy``): the plans engineers run, written as pin files.

Each strategy is a TOML pin file shipped in :mod:`autoshard.planning.hand_plans` whose
placements are keyed by axis *role* instead of axis name; :func:`strategy_pins` maps the roles
onto the mesh's axes and returns ordinary :class:`~autoshard.planning.pins.Pins`
(:func:`render_pins` prints them as a pin file a user can copy and edit).

An axis's role comes from its name:

* ``dp`` (data parallel, replicated): dp, data, ddp, batch, replica, dp_replicate;
* ``fsdp`` (data parallel, sharded state): fsdp, zero, shard, dp_shard;
* ``tp`` (tensor parallel): tp, tensor, model, mp;

and a role name followed by digits or ``_suffix`` (``dp0``, ``dp_inter``) has that role. The
templates' keys are ``dp``, ``fsdp``, ``tp`` and the derived ``data`` (every dp and fsdp axis),
``zero`` (the axes ZeRO/FSDP shard over: the fsdp axes, or every data axis when there are none)
and ``replicas`` (the data axes outside ``zero``).

How the data-parallel plans map onto the planner's memory model (:mod:`~autoshard.planning.
memory`), against Rajbhandari et al. 2020 (bf16 parameters and gradients, fp32 master weights
and AdamW moments: the paper's K = 12):

* ``ddp``: parameters, optimizer state and the optimizer step replicated; each gradient is a
  partial sum over the batch share, reduced to the step's (replicated) layout as backward
  produces it: 16Ψ per device.
* ``zero1``: the state and the step sharded over the ZeRO axes; ``gradient_sync = "deferred"``
  keeps each gradient whole as produced until the step reads its shard (a reduce-scatter): the
  paper's 4Ψ + 12Ψ/N. Without it the memory model would reduce gradients as produced and
  ZeRO-1 would cost exactly ZeRO-2's memory.
* ``zero2``: as ``zero1`` with gradients reduced as produced: 2Ψ + 14Ψ/N.
* ``fsdp``: parameters sharded too, gathered where forward and backward read them: 16Ψ/N.
* ``megatron-sp-distopt``: ``megatron-sp`` with Megatron-LM's distributed optimizer, ZeRO-1
  over the data axes on top of the tensor-parallel split: (4 + 12/N)Ψ/t.

Approximations: gradients are reduced tensor by tensor (no buckets: many small tensors each pay a
collective's latency, where DDP and ZeRO fuse them into ~25 MB buckets); FSDP and ZeRO shard each
tensor along one dim that divides (``S(*)``) instead of a flattened, padded buffer, so a tensor
no dim of which divides cannot be sharded (``--allow-uneven`` admits torch.chunk shards); a
gathered FSDP parameter is gathered once per consumer and not prefetched or overlapped.
"""

from __future__ import annotations

import json
import re
import tomllib
from importlib import resources
from typing import Any

from autoshard.errors import PinError
from autoshard.planning.pins import FREE, Pins, load_pins, parse_pins
from autoshard.sharding.mesh import Mesh

AUTO = "auto"
STRATEGIES = ("ddp", "zero1", "zero2", "fsdp", "megatron", "megatron-sp",
              "megatron-sp-distopt")
ROLE_NAMES = {
    "fsdp": ("fsdp", "zero", "shard", "dp_shard"),
    "dp": ("dp", "data", "ddp", "batch", "replica", "dp_replicate"),
    "tp": ("tp", "tensor", "model", "mp"),
}
_SUFFIX = re.compile(r"^(?P<base>[A-Za-z]+?)(\d+|_\w+)$")


def axis_role(name: str) -> str | None:
    """The role a mesh axis name implies, or None.

    Example:
        >>> axis_role("dp"), axis_role("dp_shard"), axis_role("tp2"), axis_role("pp")
        ('dp', 'fsdp', 'tp', None)
    """
    lowered = name.lower()
    for base in (lowered, *_bases(lowered)):
        for role, names in ROLE_NAMES.items():
            if base in names:
                return role
    return None


def _bases(name: str) -> tuple[str, ...]:
    match = _SUFFIX.match(name)
    return (match["base"],) if match else ()


def role_axes(mesh: Mesh) -> dict[str, tuple[str, ...]]:
    """The axes behind each template key (``dp fsdp tp data zero replicas``).

    Raises:
        PinError: an axis whose name implies no role.
    """
    roles: dict[str, list[str]] = {"dp": [], "fsdp": [], "tp": []}
    for axis in mesh.axis_names:
        role = axis_role(axis)
        if role is None:
            known = "; ".join(f"{r}: {', '.join(n)}" for r, n in ROLE_NAMES.items())
            raise PinError(f'mesh axis "{axis}" has no role for a named strategy; name each '
                           f"axis after its role ({known})")
        roles[role].append(axis)
    data = [a for a in mesh.axis_names if a in roles["dp"] or a in roles["fsdp"]]
    zero = roles["fsdp"] or data
    return {"dp": tuple(roles["dp"]), "fsdp": tuple(roles["fsdp"]), "tp": tuple(roles["tp"]),
            "data": tuple(data), "zero": tuple(zero),
            "replicas": tuple(a for a in data if a not in zero)}


def template(name: str) -> dict[str, Any]:
    """The shipped TOML of strategy ``name``, parsed."""
    if name not in STRATEGIES:
        raise PinError(f'unknown strategy "{name}"; choose one of {AUTO}, '
                       f"{', '.join(STRATEGIES)}")
    text = resources.files("autoshard.planning.hand_plans").joinpath(f"{name}.toml").read_text()
    return tomllib.loads(text)


def template_text(name: str) -> str:
    template(name)  # the name check
    return resources.files("autoshard.planning.hand_plans").joinpath(f"{name}.toml").read_text()


def strategy_pins(name: str, mesh: Mesh) -> Pins:
    """The pins of strategy ``name`` on ``mesh`` (roles mapped onto axis names).

    Raises:
        PinError: an unknown strategy, an axis without a role, a role the strategy needs and
            the mesh lacks, or one it cannot use.
    """
    data = template(name)
    axes = role_axes(mesh)
    meta = data["strategy"]
    for role in meta.get("requires", ()):
        if not axes[role]:
            names = " or ".join(ROLE_NAMES.get(role, ("dp", "fsdp")))
            raise PinError(f"strategy {name} needs a {_ROLE_TEXT[role]} axis, and mesh {mesh} "
                           f"has none; name one {names}")
    for role in meta.get("forbids", ()):
        if axes[role]:
            raise PinError(f"strategy {name} has no use for the {_ROLE_TEXT[role]} axis "
                           f"{', '.join(axes[role])} of mesh {mesh}; plan it with megatron or "
                           "megatron-sp, or drop the axis")
    if len(axes["tp"]) > 1:
        raise PinError(f"strategy {name} splits tensors over one tensor-parallel axis; mesh "
                       f"{mesh} has {', '.join(axes['tp'])}")
    rules = [_expand(rule, axes, name, n) for n, rule in enumerate(data.get("pin", []), 1)]
    document = {"pin": [r for r in rules if r["placements"]]}
    if "gradient_sync" in data:
        document["gradient_sync"] = data["gradient_sync"]
    return parse_pins(document, f"strategy {name}")


_ROLE_TEXT = {"tp": "tensor-parallel", "data": "data-parallel", "dp": "data-parallel",
              "fsdp": "sharded data-parallel"}


def _expand(rule: dict[str, Any], axes: dict[str, tuple[str, ...]], name: str,
            number: int) -> dict[str, Any]:
    """A role-keyed rule as an axis-keyed one (roles the mesh lacks drop out)."""
    placements: dict[str, str] = {}
    for key, value in rule["placements"].items():
        if key not in axes:
            raise PinError(f'strategy {name}, rule {number}: unknown role "{key}"')
        for axis in axes[key]:
            if placements.get(axis, value) != value:
                raise PinError(f"strategy {name}, rule {number}: axis {axis} gets both "
                               f"{placements[axis]} and {value}")
            placements[axis] = value
    return {**rule, "placements": {a: p for a, p in placements.items() if p != FREE}}


def pin_set(strategy: str | None, pins: Pins | str | None, mesh: Mesh) -> Pins | None:
    """The named strategy's pins followed by ``pins`` (a path is read), or None for the plain
    search."""
    given = load_pins(pins) if isinstance(pins, str) else pins
    if strategy is None or strategy == AUTO:
        return given
    named = strategy_pins(strategy, mesh)
    return named if given is None else named + given


def render_pins(pins: Pins, mesh: Mesh, title: str) -> str:
    """``pins`` as a pin file for ``mesh`` (axis-keyed), ready to copy and edit."""
    lines = [f"# {title}", f"# mesh {mesh}; pass this file to autoshard plan --pin FILE", ""]
    if pins.gradient_sync != "eager":
        lines += [f'gradient_sync = "{pins.gradient_sync}"', ""]
    for rule in pins.rules:
        lines.append(f"[[pin]]  # {rule.name}")
        lines.append(f"tensors = {json.dumps(list(rule.tensors))}")
        if rule.role is not None:
            lines.append(f'role = "{rule.role}"')
        table = dict(rule.placements) if rule.keyed else dict(zip(mesh.axis_names,
                                                                  rule.placements, strict=True))
        body = ", ".join(f'{axis} = "{p}"' for axis, p in table.items() if p != FREE)
        lines.append(f"placements = {{ {body} }}")
        if rule.optional:
            lines.append("optional = true")
        lines.append("")
    return "\n".join(lines)
