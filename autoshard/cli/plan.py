"""``autoshard plan``: turn command-line options into a graph, a mesh and a Plan on disk."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path
from typing import Any

import click

from autoshard.cli.common import (
    check_output_file,
    friendly_errors,
    parse_links,
    shape_options,
    step_options,
    training_options,
)
from autoshard.cli.pin_options import chosen_pins, pin_options, show_pins
from autoshard.cli.pipeline_options import (
    check_unused,
    pipeline_choice,
    pipeline_options,
    stage_builder,
)
from autoshard.errors import OutputExistsError, UsageError, VerificationFailedError
from autoshard.output_paths import file_in_the_way, write_refused
from autoshard.planning.batch import batch_plan
from autoshard.planning.model_source import SHAPE_OVERRIDES, load_model
from autoshard.planning.pipeline.pipelined import has_pipeline, plan_pipeline, split_mesh
from autoshard.planning.planner import plan
from autoshard.planning.record import Plan
from autoshard.planning.summary import summary_text
from autoshard.sharding.links import MeshLinks, resolve_topology
from autoshard.sharding.mesh import Mesh
from autoshard.timeline import write_trace
from autoshard.verify.verification import verify_and_attach
from costmodel import LaunchFloorWarning, parse_bytes
from solver import OPTIMALITY_GAP

OUTPUT_FILES = ("plan.json", "costs.csv", "reshards.csv")


def check_out_dir(out_dir: Path | None, force: bool) -> None:
    """Everything that would stop ``--out`` from being written, found before any solving: a
    file where the directory (or one of its parents) should be, an output name taken by a
    directory, existing outputs without ``--force``, or a place the operating system
    refuses (``/proc``, a read-only disk)."""
    if out_dir is None:
        return
    blocking = file_in_the_way(out_dir)
    if blocking is not None:
        raise UsageError(f'--out "{out_dir}": "{blocking}" is a file, not a directory; '
                         "pass a directory for plan.json, costs.csv and reshards.csv")
    taken = [name for name in OUTPUT_FILES if (out_dir / name).is_dir()]
    if taken:
        raise UsageError(f'--out "{out_dir}": {", ".join(taken)} is a directory there; '
                         "pass another --out")
    existing = [name for name in OUTPUT_FILES if (out_dir / name).exists()]
    if existing and not force:
        raise OutputExistsError(str(out_dir), tuple(existing))
    refusals = [write_refused(out_dir, directory=True),  # then each file --force replaces
                *(write_refused(out_dir / name, directory=False) for name in existing)]
    refused = next((reason for reason in refusals if reason is not None), None)
    if refused is not None:
        raise UsageError(f'--out "{out_dir}": {refused}; pass a directory you can write')


def run_plan(*, model: str, mesh_text: str, topology: str, link_specs: tuple[str, ...],
             memory: str | None, training: bool, out_dir: Path | None, force: bool,
             time_limit: float | None, quiet: bool, as_json: bool, allow_uneven: bool = False,
             optimizer: str = "adamw", recompute: str = "none", reserve: str = "0",
             verify: bool = False, gap: float | None = None, strategy: str = "auto",
             pin_files: tuple[Path, ...] = (), print_pins_only: bool = False,
             global_batch: int | None = None, micro_batch: int | None = None,
             grad_accum: int | None = None, overlap: str = "op", trace: Path | None = None,
             expert_axes: str | None = None,
             schedule: str = "auto", stages_text: str | None = None, virtual_stages: int = 2,
             share_reshards: bool = False, **overrides: Any) -> None:
    if not training and (optimizer != "adamw" or recompute != "none"):
        raise UsageError("--optimizer and --recompute apply to --training plans only")
    mesh = Mesh.parse(mesh_text)
    if print_pins_only:
        show_pins(strategy, pin_files, mesh)
        return
    check_out_dir(out_dir, force)
    check_output_file(trace, force, "--trace",
                      taken=() if out_dir is None else tuple(out_dir / n for n in OUTPUT_FILES))
    requested_gap = OPTIMALITY_GAP if gap is None else gap
    batches = batch_plan(mesh, batch=overrides.get("batch"), global_batch=global_batch,
                         micro_batch=micro_batch, grad_accum=grad_accum)
    shapes = {**{k: overrides.get(k) for k in SHAPE_OVERRIDES}, "batch": batches.graph_batch}
    graph = load_model(model, shapes)
    limit = float(parse_bytes(memory)) if memory is not None else None
    common: dict[str, Any] = {
        "topology": topology, "links": parse_links(link_specs), "memory_limit": limit,
        "time_limit": time_limit, "model_name": model, "allow_uneven": allow_uneven,
        "optimizer": optimizer, "recompute": recompute, "reserve": float(parse_bytes(reserve)),
        "progress": sys.stderr.isatty() and not quiet, "gap": requested_gap,
        "micro_batches": batches.micro_batches, "overlap": overlap}
    if has_pipeline(mesh):
        if expert_axes:
            raise UsageError("--expert-axes is not available with a pp axis yet: plan the "
                             "experts on the mesh without pp")
        if not training:
            raise UsageError("a mesh with a pp axis plans a pipelined training step: add "
                             "--training")
        _, inner = split_mesh(mesh)
        result = plan_pipeline(graph, mesh, stage_graph=stage_builder(model, shapes),
                               pipeline=pipeline_choice(schedule, stages_text, virtual_stages),
                               pins=chosen_pins(strategy, pin_files, inner),
                               share_reshards=share_reshards, **common)
    else:
        check_unused(schedule, stages_text)
        result = plan(graph, mesh, training=training, share_reshards=share_reshards,
                      pins=chosen_pins(strategy, pin_files, mesh), **common,
                      expert_axes=tuple(a.strip() for a in expert_axes.split(","))
                      if expert_axes else None)
    if verify:
        result = verify_and_attach(result, graph)
    written = [str(p) for p in result.save(out_dir)] if out_dir is not None else []
    if trace is not None:
        write_trace(result, trace)
        written.append(str(trace))
    for line in solver_warnings(result, requested_gap):
        click.echo(f"autoshard: {line}", err=True)
    if as_json or not quiet:  # --json's summary is what was asked for, --quiet or not
        click.echo(_json_summary(result, written) if as_json else summary_text(
            result, written, links=priced_links(mesh, topology, link_specs)))
        sys.stdout.flush()
    record = result.verification
    if record is not None and not record["passed"]:
        raise VerificationFailedError(dict(record))


def priced_links(mesh: Mesh, topology: str, link_specs: tuple[str, ...]) -> MeshLinks:
    """The links the plan was priced on, for the summary's link lines (their curve terms are
    not in plan.json's link rows); the planner already warned about them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LaunchFloorWarning)
        return MeshLinks.build(mesh, resolve_topology(topology), parse_links(link_specs))


def solver_warnings(result: Plan, requested_gap: float) -> list[str]:
    """What ``plan`` warns (and notes) about a solve that did not prove its plan optimal. A
    pipelined plan's solve is its stage model's: the warning says the gap is that solve's, not
    the step's (which adds the pipeline's bubble and transfers)."""
    obj = result.objective
    if obj.optimal:
        return []
    gap = obj.gap
    pipelined = bool(result.pipeline)
    solver = "the solver of the stage model" if pipelined else "the solver"
    subject = "the stage model's layouts are" if pipelined else "the plan is"
    after = ("; the gap is the stage model's, not the pipelined step's, which adds the "
             "pipeline's bubble and transfers" if pipelined else "")
    where = (f"at a gap of {gap:.4%}" if math.isfinite(gap)
             else "before proving any lower bound")
    restricted = [n for n in result.notes if n.startswith("search restricted:")]
    if restricted and obj.status != "time_limit":
        return [f"warning: {restricted[0]}; {subject} within {gap:.4%} of the best possible, "
                f"not proven optimal{after}"]
    if obj.status == "feasible" and gap <= requested_gap:
        return [f"warning: {solver} stopped at a gap of {gap:.4%}, within --gap "
                f"{requested_gap:g}; {subject} not proven optimal{after}"]
    lines = [f"warning: {solver} stopped {where} ({obj.status}); {subject} the best found, "
             f"not proven optimal; raise --time-limit to close the gap{after}"]
    # what else the time limit did, said where it is seen
    lines += [f"note: {note}" for note in result.notes
              if note.startswith(("pricing the options took", "the time limit cut",
                                          "without --time-limit"))]
    return lines


def _json_summary(result: Plan, written: list[str]) -> str:
    import json

    data = result.to_dict()
    summary = {key: data[key] for key in ("model", "mesh", "topology", "objective", "memory",
                                          "fingerprint", "throughput") if key in data}
    summary["files"] = written
    summary["collectives"] = len(result.collectives())
    return json.dumps(summary, indent=1, sort_keys=True)


@click.command("plan")
@click.option("--model", default="gpt2", show_default=True,
              help="A zoo model name (see `autoshard models`), a Hugging Face config.json "
                   "(llama, mistral, qwen2, gpt2, mixtral, qwen2_moe) or a graph JSON file.")
@click.option("--mesh", "mesh_text", default="dp=2,tp=4", show_default=True,
              help="Mesh axes major first, e.g. dp=8,tp=8.")
@click.option("--topology", default="dgx-h100", show_default=True,
              help="A hardware preset name or a TOML topology file.")
@click.option("--link", "link_specs", multiple=True, metavar="AXIS=SPEC",
              help="Override one axis's link: a name (tp=nvlink, dp=pcie) or "
                   "dp=alpha:5us,bw:25GB/s, a textbook alpha-beta link: alpha is per "
                   "algorithm step, with no per-collective launch floor unless launch:6.8us "
                   "(NCCL's base latency) and pipeline:DURATION are added; a warning says when "
                   "it prices small collectives below the measured link of the level the "
                   "axis spans (repeatable).")
@click.option("--memory", default=None, help="Memory per device, e.g. 80GiB (default: the HBM).")
@training_options("Plan")
@click.option("--reserve", default="0", show_default=True,
              help="Memory per device kept free (CUDA context, fragmentation), e.g. 2GiB.")
@shape_options(dtype_help="Parameter/activation dtype (default bf16).")
@step_options()
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Write plan.json, costs.csv and reshards.csv into this directory.")
@click.option("--trace", type=click.Path(path_type=Path), default=None,
              help="Also write the predicted step as a Chrome trace (Perfetto, "
                   "chrome://tracing): compute and one track per mesh axis.")
@click.option("--force", is_flag=True, help="Overwrite files already in --out (and --trace).")
@click.option("--time-limit", type=float, default=None,
              help="Seconds for the whole plan: pricing the options, the search, and the hand "
                   "plans that back up a search it cuts short; the best plan found is "
                   "returned with its gap to the proven bound.")
@click.option("--gap", type=float, default=None,
              help="Relative gap to the proven lower bound at which the solver may stop, e.g. "
                   "1e-3 for 0.1 % (default 1e-6: prove the plan optimal).")
@click.option("--allow-uneven", is_flag=True,
              help="Also shard dims that do not divide (torch.chunk sizes; the largest shard "
                   "is costed). Such layouts are never resharded.")
@click.option("--expert-axes", default=None, metavar="AXES",
              help="Shard the mixture-of-experts weights' experts over exactly these mesh "
                   "axes, e.g. ep or dp,ep (default: the search decides).")
@click.option("--share-reshards", is_flag=True,
              help="Price one reshard per (tensor, layout) shared by every consumer that reads "
                   "that layout, as XLA and DTensor run it (default: one per consumer edge; "
                   "sharing is exact but slower to prove on deep models: llama3-8b on "
                   "dp=8,tp=8 ~7 s instead of ~1 s, `autoshard bench share`).")
@click.option("--verify", is_flag=True,
              help="Run the plan on an emulated mesh (NumPy, dims scaled down) and compare with "
                   "the unsharded model; the verdict goes into plan.json; exit 1 on a mismatch.")
@pin_options()
@pipeline_options()
@click.option("--quiet", "-q", is_flag=True,
              help="Print nothing on success but what --json asks for.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary.")
@friendly_errors
def plan_command(print_pins: bool, **options: Any) -> None:
    """Plan a model on a mesh (no arguments: gpt2 on dp=2,tp=4 of dgx-h100).

    A mesh axis named pp is a pipeline: it splits the layers into stages (--schedule,
    --stages) and the other axes shard each stage.

    With --strategy or --pin the plan keeps the given layouts and optimises the rest; with
    every tensor pinned (--pin plan.json) it evaluates that plan on this mesh and topology.
    """
    run_plan(print_pins_only=print_pins, **options)
