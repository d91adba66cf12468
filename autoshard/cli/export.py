"""``autoshard export PLAN.json --format FMT``: a saved plan in the format a framework consumes.

Reads the plan, rebuilds the links it was priced with (its topology, or ``--topology`` and
``--link``), re-lowers every explicit reshard and refuses when the plan's priced collectives
differ from the lowered ones. With ``--model`` (and the plan command's shape options) it also
rebuilds the graph and refuses a plan whose fingerprint is not that graph's on that mesh, or
whose tensor records are not the layouts its ops' strategies write on it (a hand-edited
plan.json); without ``--model`` only what the file says about itself is checked (every reshard
starts from its tensor's recorded layout). A training plan's step (optimizer, recomputation)
is read off the plan, as ``verify`` does, and ``--training``/``--inference``/``--optimizer``/
``--recompute`` are checks when given.
Prints to stdout, or writes ``--out FILE`` (never over an existing file without ``--force``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autoshard.cli.common import (
    BATCH_OPTIONS,
    PlanFileType,
    batch_options,
    check_output_file,
    friendly_errors,
    parse_links,
    plan_step_options,
    saved_plan_model,
    shape_options,
)
from autoshard.errors import UsageError
from autoshard.export.lowering import lower_plan_reshards
from autoshard.export.pipeline_view import stage_overrides, stage_plan, with_pipeline
from autoshard.export.plan_export import PlanFormat, export_plan
from autoshard.export.plan_view import check_fingerprint, plan_links, plan_shardings
from autoshard.planning.model_source import SHAPE_OVERRIDES, flag
from autoshard.planning.record import Plan
from autoshard.planning.record_check import check_tensor_records
from autoshard.verify.verification import planned_graph

SHAPE_OPTIONS = SHAPE_OVERRIDES


@click.command("export")
@click.argument("plan_path", metavar="PLAN.json", type=PlanFileType())
@click.option("--format", "fmt", type=click.Choice([f.value for f in PlanFormat]),
              default="json", show_default=True,
              help="hlo (V2 iota), hlo-v1 (device list), shardy, json (all of them), or "
                   "dtensor / jax (a runnable script).")
@click.option("--out", "out_file", type=click.Path(path_type=Path), default=None,
              help="Write to this file instead of stdout (\"-\": stdout).")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option("--model", default=None,
              help="Check the plan against this zoo model, Hugging Face config.json or graph "
                   "JSON (fingerprint).")
@click.option("--topology", default=None,
              help="The topology the plan was made with (default: the one it names).")
@click.option("--link", "link_specs", multiple=True, metavar="AXIS=SPEC",
              help="A link override the plan was made with (repeatable).")
@plan_step_options()
@shape_options()
@batch_options(saved_plan=True)
@friendly_errors
def export_command(**options: Any) -> None:
    """Export a plan's per-tensor shardings and lowered reshards in one format."""
    _export(**options)


def _export(**options: Any) -> None:
    text = export_text(**options)
    out_file = options["out_file"]
    if out_file is None or _is_stdout(out_file):
        click.echo(text, nl=False)
        return
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(text)
    click.echo(f"wrote {out_file}", err=True)


def export_text(*, plan_path: Path, fmt: str, out_file: Path | None, force: bool,
                model: str | None, topology: str | None, link_specs: tuple[str, ...],
                training: bool | None, optimizer: str | None, recompute: str | None,
                **shape: Any) -> str:
    """Everything `export_command` does except writing; returns the exported text."""
    if out_file is not None and not _is_stdout(out_file):
        check_output_file(out_file, force, "--out", taken=(plan_path,))
    whole = Plan.load(plan_path)
    overrides: dict[str, Any] = dict(parse_links(link_specs))
    plan = stage_plan(whole) or whole
    if plan is not whole:
        if model is not None:
            raise UsageError("--model checks a plan's fingerprint, which a pipelined plan "
                             "records for the whole model; export it without --model")
        overrides = stage_overrides(whole, topology, overrides)
    view = plan_shardings(plan, str(plan_path))
    topo, links = plan_links(plan, view.mesh, topology, overrides)
    _check_model(plan, view.mesh, topo, links, model, training, optimizer, recompute, shape)
    reshards = lower_plan_reshards(plan, view, links, float(topo.device.hbm_bw_bytes_per_s))
    text = export_plan(plan, view, reshards, fmt)
    return text if plan is whole else with_pipeline(text, whole, fmt)


def _is_stdout(out_file: Path) -> bool:
    """``--out -``: the usual spelling of standard output, not a file named "-"."""
    return str(out_file) == "-"


def _check_model(plan: Any, mesh: Any, topo: Any, links: Any, model: str | None,
                 training: bool | None, optimizer: str | None, recompute: str | None,
                 shape: dict[str, Any]) -> None:
    """With ``--model``: the plan's graph (its training step read off the plan, as ``verify``
    does) must have the plan's fingerprint."""
    given = sorted(k for k in (*SHAPE_OPTIONS, *BATCH_OPTIONS) if shape.get(k) is not None)
    steps = {"training": training is not None, "optimizer": optimizer is not None,
             "recompute": recompute is not None}
    if model is None:
        named = [*given, *(k for k, v in steps.items() if v)]
        if named:
            names = ", ".join(flag(k) for k in named)
            raise UsageError(f"{names} describe the model to check the plan against; "
                             "pass --model too")
        return
    graph = saved_plan_model(plan, model, shape)
    full = planned_graph(plan, graph, training=training, optimizer=optimizer,
                         recompute=recompute)
    check_fingerprint(plan, full, mesh, topo, links)
    check_tensor_records(plan, full)  # the layouts exported are the ones the ops were priced in
