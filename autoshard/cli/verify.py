"""``autoshard verify PLAN.json --model M``: prove a saved plan by running it on an emulated mesh.

Rebuilds the graph from ``--model`` and the plan command's shape options and refuses a plan
whose fingerprint is not that graph's on the plan's mesh and links (a plan is verified
against the model it was made for); a training plan's step is read off the plan, and
``--training``/``--inference``/``--optimizer``/``--recompute`` (as ``export`` takes them) are
checks when given. Checks that every reshard's priced collectives are the
path the reshard search finds with those links (as ``export`` does), that every tensor's
recorded layout is the one the op writing it lays it out in (what ``export`` emits is what is
emulated: :mod:`autoshard.planning.record_check`), emulates the plan
scaled down (:mod:`autoshard.verify.verification`) and prints the verdict, the max abs/rel error
and the scaled dims. ``--write`` stores them in the plan file under ``verification`` (the only
change it makes to the file). A failed verification exits with status 1 and one stderr line naming
the first divergent op or reshard; bad input exits 2 with one line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from autoshard.cli.common import (
    PlanFileType,
    batch_options,
    friendly_errors,
    parse_links,
    plan_step_options,
    saved_plan_model,
    shape_options,
)
from autoshard.errors import PlanRecordError, UsageError
from autoshard.export.lowering import ReshardMismatchError, lower_plan_reshards
from autoshard.export.pipeline_view import stage_overrides, stage_plan
from autoshard.export.plan_view import (
    check_fingerprint,
    check_layouts,
    plan_links,
    plan_shardings,
)
from autoshard.planning.record import Plan
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.sharding.mesh import Mesh
from autoshard.verify.verification import planned_graph, verify

FAILED_EXIT = 1


@click.command("verify")
@click.argument("plan_path", metavar="PLAN.json", type=PlanFileType())
@click.option("--model", default=None,
              help="The zoo model, Hugging Face config.json or graph JSON file the plan "
                   "was made for (default: the model plan.json names).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--full-size", is_flag=True,
              help="Emulate at the model's own sizes instead of a scaled-down copy (slow).")
@click.option("--write", is_flag=True,
              help="Store the verdict in PLAN.json under \"verification\" (in place).")
@click.option("--topology", default=None,
              help="The topology the plan was made with (default: the one it names).")
@click.option("--link", "link_specs", multiple=True, metavar="AXIS=SPEC",
              help="A link override the plan was made with (repeatable).")
@plan_step_options()
@shape_options()
@batch_options(saved_plan=True)
@click.option("--json", "as_json", is_flag=True, help="Print the verification record as JSON.")
@friendly_errors
def verify_command(**options: Any) -> None:
    """Run a plan on an emulated mesh and compare with the unsharded model."""
    run_verify(**options)


def run_verify(*, plan_path: Path, model: str | None, seed: int, full_size: bool, write: bool,
               topology: str | None, link_specs: tuple[str, ...], as_json: bool,
               training: bool | None = None, optimizer: str | None = None,
               recompute: str | None = None, **shape: Any) -> None:
    """Everything ``autoshard verify`` does; exits 1 when the plan fails."""
    plan = Plan.load(plan_path)
    check_layouts(plan, str(plan_path))
    graph = saved_plan_model(plan, model, shape)
    if plan.pipeline:
        _check_pipelined(plan, graph, topology, parse_links(link_specs), training)
    else:
        full = planned_graph(plan, graph, training=training, optimizer=optimizer,
                             recompute=recompute)  # a training plan's step: read off the plan
        mesh = plan_shardings(plan, str(plan_path)).mesh
        topo, links = plan_links(plan, mesh, topology, parse_links(link_specs))
        check_fingerprint(plan, full, mesh, topo, links)
        _check_paths(plan, links, float(topo.device.hbm_bw_bytes_per_s))
    try:
        result = verify(plan, graph, seed=seed, scale=not full_size,
                        progress=sys.stderr.isatty())
    except PlanRecordError as exc:  # plan.json's tensors are not what its ops write
        _failed(f"verification failed: {exc}")
    record = result.to_record()
    if write:
        _write(plan_path, record)
    _report(result, record, as_json, write, plan_path)
    if not result.passed:
        sys.exit(FAILED_EXIT)


def _check_pipelined(plan: Plan, graph: Any, topology: str | None,
                     overrides: dict[str, Any], training: bool | None) -> None:
    """A pipelined plan records the whole model's fingerprint on the whole mesh; its
    reshards are the stage plan's, priced on the stage mesh's links."""
    if training is False:
        raise UsageError("the plan is a pipelined training step: drop --inference")
    mesh = Mesh(axes=tuple(plan.mesh))
    topo = resolve_topology(topology or plan.topology)
    check_fingerprint(plan, graph, mesh, topo, MeshLinks.build(mesh, topo, overrides))
    stage = stage_plan(plan)
    stage_mesh = plan_shardings(stage).mesh
    _, stage_links = plan_links(stage, stage_mesh, topology,
                                stage_overrides(plan, topology, overrides))
    _check_paths(stage, stage_links, float(topo.device.hbm_bw_bytes_per_s))


def _check_paths(plan: Any, links: Any, hbm_bw: float) -> None:
    """Every reshard's priced list must be the path the reshard search finds with the plan's
    own links (what `autoshard export` emits); the emulation then runs that list."""
    try:
        lower_plan_reshards(plan, plan_shardings(plan), links, hbm_bw)
    except ReshardMismatchError as exc:
        _failed(f"verification failed at {exc}")
    except PlanRecordError as exc:  # a reshard that does not start from its tensor's layout
        _failed(f"verification failed: {exc}")


def _failed(line: str) -> NoReturn:
    """A plan whose own records disagree fails before any emulation: the verdict, one line
    naming the culprit, exit 1 (as a divergence does)."""
    click.echo("verdict     FAILED")
    click.echo(f"autoshard: {line}", err=True)
    sys.exit(FAILED_EXIT)


def _write(plan_path: Path, record: dict[str, Any]) -> None:
    """Set ``verification`` in the plan file, leaving every other byte of it as it was read
    back (the file is the user's; only this key changes)."""
    import json

    data = json.loads(plan_path.read_text())
    data["verification"] = record
    plan_path.write_text(json.dumps(data, indent=1) + "\n")


def _report(result: Any, record: dict[str, Any], as_json: bool, write: bool,
            plan_path: Path) -> None:
    import json

    if as_json:
        click.echo(json.dumps(record, indent=1, sort_keys=True))
    else:
        dims = ", ".join(f"{k} {a}->{b}" for k, (a, b) in result.scaled_dims.items())
        click.echo(f"verdict     {'PASSED' if result.passed else 'FAILED'}")
        click.echo(f"max error   abs {result.max_abs_err:.3g}, rel {result.max_rel_err:.3g}")
        click.echo(f"scaled dims {dims or 'none (run at the planned sizes)'}")
        click.echo(f"emulation   {result.message} ({result.seconds:.2f} s)")
        if write:
            click.echo(f"wrote       verification into {plan_path}")
    if not result.passed:
        click.echo(f"autoshard: verification failed at {result.result.divergence}", err=True)
