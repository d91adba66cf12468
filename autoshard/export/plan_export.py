"""A whole plan in one export format: every tensor's sharding in the plan's (graph) order, the
mesh declaration, and every explicit reshard lowered to named collectives.

Formats (``autoshard export --format``):

* ``hlo`` / ``hlo-v1`` / ``shardy``: text, one ``tensor = sharding`` line per tensor, then one
  comment block per reshard listing its collectives in Shardy syntax (a ``#`` line starts a
  comment). ``shardy`` starts with the ``sdy.mesh`` declaration.
* ``json``: one object (format ``autoshard.export/v1``): ``mesh {axes, shardy, jax,
  dtensor}``, ``tensors {name: {hlo, hlo_v1, shardy, partition_spec, unreduced, dtensor}}``
  (``null`` where the format refuses the tensor, the reason in ``refused {name: {field:
  message}}``; ``notes {name: [...]}`` where an accepted export is not exactly the plan's
  layout, e.g. XLA's single ceil tiling of an uneven dim), and ``reshards [{tensor, producer,
  consumer, src, dst, collectives [{kind, axes, shardy}]}]``.
* ``dtensor`` / ``jax``: a runnable Python script that applies every reshard as exactly its
  priced collectives and checks so when run (`autoshard.export.dtensor_script`,
  `autoshard.export.jax_script`).

Text formats refuse the whole export when one tensor cannot be written (the message names it)
and write ``# note:`` lines above a tensor whose export is inexact; ``json`` records refusals
and notes per tensor instead.
"""

from __future__ import annotations

import enum
import json
import logging
from typing import Any

from autoshard.export.check import check_exportable
from autoshard.export.dtensor import dtensor_mesh_source, to_dtensor_source
from autoshard.export.dtensor_script import dtensor_script
from autoshard.export.errors import ExportError
from autoshard.export.hlo import to_hlo_sharding
from autoshard.export.jax_script import jax_script
from autoshard.export.jax_spec import jax_mesh_source, partition_spec_entries
from autoshard.export.lowering import LoweredReshard, sharding_text
from autoshard.export.plan_view import PlanShardings
from autoshard.export.shardy import shardy_mesh, to_shardy

logger = logging.getLogger(__name__)

EXPORT_FORMAT = "autoshard.export/v1"


@enum.unique
class PlanFormat(enum.Enum):
    """What ``autoshard export --format`` writes.

    HLO: HloSharding V2 lines. HLO_V1: V1 (device list) lines. SHARDY: ``sdy.mesh`` plus
    ``#sdy.sharding`` lines. DTENSOR, JAX: runnable scripts. JSON: every format in one object.
    """

    HLO = "hlo"
    HLO_V1 = "hlo-v1"
    SHARDY = "shardy"
    DTENSOR = "dtensor"
    JAX = "jax"
    JSON = "json"

    def __repr__(self) -> str:
        return f"PlanFormat.{self.name}"


def export_plan(
    plan: Any, view: PlanShardings, reshards: tuple[LoweredReshard, ...], fmt: PlanFormat | str
) -> str:
    """The whole plan in format `fmt` as text (ends with a newline).

    Raises:
        ExportError: a text format that cannot write one of the tensors.
    """
    fmt = PlanFormat(fmt)
    if fmt is PlanFormat.JSON:
        return json.dumps(plan_json(plan, view, reshards), indent=1) + "\n"
    if fmt in (PlanFormat.DTENSOR, PlanFormat.JAX):
        build = dtensor_script if fmt is PlanFormat.DTENSOR else jax_script
        return build(plan, view, reshards)
    return _text_export(plan, view, reshards, fmt)


def _header(plan: Any, view: PlanShardings, fmt: PlanFormat) -> str:
    return (
        f"# autoshard export --format {fmt.value}: model {plan.model}, mesh {view.mesh}, "
        f"topology {plan.topology}, fingerprint {plan.fingerprint}"
    )


def _text_export(
    plan: Any, view: PlanShardings, reshards: tuple[LoweredReshard, ...], fmt: PlanFormat
) -> str:
    lines = [_header(plan, view, fmt)]
    if fmt is PlanFormat.SHARDY:
        lines.append(shardy_mesh(view.mesh))
    for name, ts in view.shardings.items():
        verdict = check_exportable(ts, view.shapes[name], fmt.value, name)
        lines.extend(f"# note: {note}" for note in verdict.notes)
        lines.append(f"{name} = {_tensor_text(ts, fmt, name)}")
    lines.extend(reshard_comment_lines(reshards))
    return "\n".join(lines) + "\n"


def _tensor_text(ts: Any, fmt: PlanFormat, name: str) -> str:
    if fmt is PlanFormat.HLO:
        return to_hlo_sharding(ts, 2, name)
    if fmt is PlanFormat.HLO_V1:
        return to_hlo_sharding(ts, 1, name)
    return to_shardy(ts, tensor_name=name)


def reshard_comment_lines(reshards: tuple[LoweredReshard, ...]) -> list[str]:
    """One ``#`` block per reshard: tensor, producer → consumer, shardings, collectives."""
    if not reshards:
        return ["# no explicit reshards"]
    lines = [f"# {len(reshards)} explicit reshards, collectives in order (Shardy syntax):"]
    for item in reshards:
        lines.append(
            f"# {item.tensor}: {item.producer} -> {item.consumer}: "
            f"{sharding_text(item.src)} -> {sharding_text(item.dst)}"
        )
        lines.extend(f"#   {c.shardy}" for c in item.collectives)
    return lines


def plan_json(
    plan: Any, view: PlanShardings, reshards: tuple[LoweredReshard, ...]
) -> dict[str, Any]:
    """The ``json`` format as a dict; see the module docstring."""
    tensors: dict[str, Any] = {}
    refused: dict[str, dict[str, str]] = {}
    notes: dict[str, list[str]] = {}
    for name, ts in view.shardings.items():
        entry, problems, inexact = _tensor_entry(ts, view.shapes[name], name)
        tensors[name] = entry
        if problems:
            refused[name] = problems
        if inexact:
            notes[name] = inexact
    return {
        "format": EXPORT_FORMAT,
        "model": plan.model,
        "fingerprint": plan.fingerprint,
        "mesh": {
            "axes": [{"name": n, "size": s} for n, s in view.mesh.axes],
            "shardy": shardy_mesh(view.mesh),
            "jax": jax_mesh_source(view.mesh),
            "dtensor": dtensor_mesh_source(view.mesh),
        },
        "tensors": tensors,
        "refused": refused,
        "notes": notes,
        "reshards": [_reshard_entry(r) for r in reshards],
    }


def _tensor_entry(
    ts: Any, shape: tuple[int, ...], name: str
) -> tuple[dict, dict[str, str], list[str]]:
    entry: dict[str, Any] = {}
    problems: dict[str, str] = {}
    notes: list[str] = []
    fields = (
        ("hlo", "hlo", lambda: to_hlo_sharding(ts, 2, name)),
        ("hlo_v1", "hlo-v1", lambda: to_hlo_sharding(ts, 1, name)),
        ("shardy", "shardy", lambda: to_shardy(ts, tensor_name=name)),
        ("partition_spec", "jax", lambda: _spec_json(ts, name)),
        ("dtensor", "dtensor", lambda: to_dtensor_source(ts)),
    )
    for key, fmt, make in fields:
        try:
            verdict = check_exportable(ts, shape, fmt, name)
            entry[key] = make()
        except ExportError as exc:
            entry[key] = None
            problems[key] = str(exc)
            continue
        notes.extend(n for n in verdict.notes if n not in notes)
    entry["unreduced"] = [axis for axis, _ in ts.partial_axes]
    return entry, problems, notes


def _spec_json(ts: Any, name: str) -> list[Any]:
    entries = partition_spec_entries(ts, name)
    return [list(e) if isinstance(e, tuple) else e for e in entries]


def _reshard_entry(item: LoweredReshard) -> dict[str, Any]:
    return {
        "tensor": item.tensor,
        "producer": item.producer,
        "consumer": item.consumer,
        "src": sharding_text(item.src),
        "dst": sharding_text(item.dst),
        "collectives": [
            {"kind": c.kind, "axes": list(c.axes), "shardy": c.shardy} for c in item.collectives
        ],
    }
