"""``autoshard plan``: turn command-line options into a graph, a mesh and a Plan on disk."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import click

from autoshard.errors import OutputExistsError, UsageError, VerificationFailedError
from autoshard.mesh import Mesh
from autoshard.plan_record import Plan
from autoshard.planner import plan
from autoshard.summary import summary_text
from costmodel import parse_bytes
from graphs import OpGraph, load, zoo
from solver import OPTIMALITY_GAP

OUTPUT_FILES = ("plan.json", "costs.csv", "reshards.csv")
SHAPE_OVERRIDES = ("batch", "seq", "layers", "hidden", "ffn", "heads", "dtype")


def load_model(model: str, overrides: dict[str, Any]) -> OpGraph:
    """A zoo model by name, or a graph JSON file when the argument looks like a path."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if model not in zoo.names() and (model.endswith(".json") or Path(model).exists()):
        if given:
            names = ", ".join(f"--{k}" for k in sorted(given))
            raise UsageError(f"{names} apply to zoo models only, not to the graph file {model}")
        return load(model)
    return zoo.build(model, **given)


def parse_links(specs: tuple[str, ...]) -> dict[str, str]:
    links: dict[str, str] = {}
    for spec in specs:
        axis, sep, value = spec.partition("=")
        if not sep or not axis or not value:
            raise UsageError(f'--link "{spec}" must look like AXIS=SPEC, e.g. tp=nvlink')
        links[axis.strip()] = value.strip()
    return links


def check_out_dir(out_dir: Path | None, force: bool) -> None:
    if out_dir is None or force:
        return
    existing = [name for name in OUTPUT_FILES if (out_dir / name).exists()]
    if existing:
        raise OutputExistsError(str(out_dir), tuple(existing))


def run_plan(*, model: str, mesh_text: str, topology: str, link_specs: tuple[str, ...],
             memory: str | None, training: bool, out_dir: Path | None, force: bool,
             time_limit: float | None, quiet: bool, as_json: bool, allow_uneven: bool = False,
             optimizer: str = "adamw", recompute: str = "none", reserve: str = "0",
             verify: bool = False, gap: float | None = None, **overrides: Any) -> None:
    if not training and (optimizer != "adamw" or recompute != "none"):
        raise UsageError("--optimizer and --recompute apply to --training plans only")
    check_out_dir(out_dir, force)
    requested_gap = OPTIMALITY_GAP if gap is None else gap
    mesh = Mesh.parse(mesh_text)
    graph = load_model(model, {k: overrides.get(k) for k in SHAPE_OVERRIDES})
    limit = float(parse_bytes(memory)) if memory is not None else None
    result = plan(graph, mesh, topology=topology, links=parse_links(link_specs),
                  memory_limit=limit, time_limit=time_limit, model_name=model,
                  allow_uneven=allow_uneven, training=training, optimizer=optimizer,
                  recompute=recompute, reserve=float(parse_bytes(reserve)),
                  progress=sys.stderr.isatty() and not quiet, gap=requested_gap)
    if verify:
        from autoshard.verify import verify_and_attach

        result = verify_and_attach(result, graph)
    written = [str(p) for p in result.save(out_dir)] if out_dir is not None else []
    if not result.objective.optimal:
        gap = result.objective.gap
        where = (f"at a gap of {gap:.4%}" if math.isfinite(gap)
                 else "before proving any lower bound")
        restricted = [n for n in result.notes if n.startswith("search restricted:")]
        if restricted and result.objective.status != "time_limit":
            click.echo(f"autoshard: warning: {restricted[0]}; the plan is within "
                       f"{gap:.4%} of the best possible, not proven optimal", err=True)
        elif result.objective.status == "feasible" and gap <= requested_gap:
            click.echo(f"autoshard: warning: the solver stopped at a gap of {gap:.4%}, within "
                       f"--gap {requested_gap:g}; the plan is not proven optimal", err=True)
        else:
            click.echo(f"autoshard: warning: the solver stopped {where} "
                       f"({result.objective.status}); the plan is the best found, not proven "
                       "optimal; raise --time-limit to close the gap", err=True)
    if not quiet:
        click.echo(_json_summary(result, written) if as_json else summary_text(result, written))
        sys.stdout.flush()
    record = result.verification
    if record is not None and not record["passed"]:
        raise VerificationFailedError(dict(record))


def _json_summary(result: Plan, written: list[str]) -> str:
    import json

    data = result.to_dict()
    summary = {key: data[key] for key in ("model", "mesh", "topology", "objective", "memory",
                                          "fingerprint")}
    summary["files"] = written
    summary["collectives"] = len(result.collectives())
    return json.dumps(summary, indent=1, sort_keys=True)
