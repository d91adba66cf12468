"""``autoshard sweep``: command-line options → a :class:`~autoshard.sweep.study.SweepSpec` → files.

The command only parses and reports; :func:`autoshard.sweep.study.sweep` does the work, so Python
users get the same study without the CLI.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from autoshard.cli.common import FFN_HELP, HEADS_HELP, HIDDEN_HELP, LAYERS_HELP, friendly_errors
from autoshard.errors import UsageError
from autoshard.sweep.points import DEFAULT_LINKS, SweepSpec, parse_axes, parse_int_list
from autoshard.sweep.runner import SWEEP_GAP, RunSettings
from autoshard.sweep.study import ExecutorKind, PlanFiles, canonical_command, sweep
from costmodel import parse_bytes
from graphs.training import RECOMPUTE_CHOICES

MODEL_OVERRIDES = ("layers", "hidden", "ffn", "heads", "dtype")


@click.command("sweep")
@click.option("--model", required=True,
              help="A zoo model name (see `autoshard models`), a Hugging Face config.json "
                   "(llama, mistral, qwen2, gpt2, mixtral, qwen2_moe) or a graph JSON file.")
@click.option("--devices", "devices_text", required=True,
              help="Device counts, comma-separated, e.g. 8,16,64.")
@click.option("--axes", "axes_text", default="1-3", show_default=True,
              help="Mesh axes per mesh: a count or a range within 1-3.")
@click.option("--axis-names", default="dp,fsdp,tp", show_default=True,
              help="Axis names; a k-axis mesh takes the first name and the last k-1 names.")
@click.option("--topology", "topologies", multiple=True,
              help="Hardware preset or TOML file (repeatable; default dgx-h100).")
@click.option("--link", "links", multiple=True, metavar="AXIS=SPEC[;AXIS=SPEC]",
              help='One link variant per option (repeatable), e.g. "dp=alpha:4us,bw:25GB/s"; '
                   '"default" is the topology\'s own links. Overrides apply to meshes that '
                   "have the axis.")
@click.option("--batch", "batch_text", default=None, help="Batch sizes, e.g. 8,16.")
@click.option("--seq", "seq_text", default=None, help="Sequence lengths, e.g. 1024,2048.")
@click.option("--training/--inference", default=False, show_default=True)
@click.option("--optimizer", type=click.Choice(["adamw", "sgd"]), default="adamw",
              show_default=True)
@click.option("--recompute", type=click.Choice(list(RECOMPUTE_CHOICES)), default="none",
              show_default=True)
@click.option("--pp", "pp_text", default="auto", show_default=True,
              help="Pipeline sizes of a --training sweep, e.g. 2,4: meshes with a pp axis "
                   "of each size are added (auto: 2,4,8; none: no pipeline).")
@click.option("--micro-batch", "micro_batch_text", default=None,
              help="Samples per micro-batch and data-parallel replica, e.g. 1,2: every point "
                   "of a --training sweep runs its batch (the global batch) in micro-batches "
                   "of this size per replica (gradient accumulation, as plan's "
                   "--global-batch/--micro-batch); meshes whose replicas do not divide the "
                   "batch so are left out. Default: 1 for the pipelined points, the whole "
                   "batch at once for the others.")
@click.option("--layers", type=int, default=None, help=LAYERS_HELP)
@click.option("--hidden", type=int, default=None, help=HIDDEN_HELP)
@click.option("--ffn", type=int, default=None, help=FFN_HELP)
@click.option("--heads", type=int, default=None, help=HEADS_HELP)
@click.option("--dtype", default=None)
@click.option("--memory", default=None, help="Memory per device, e.g. 80GiB (default: HBM).")
@click.option("--reserve", default="0", show_default=True, help="Memory kept free per device.")
@click.option("--time-limit", type=float, default=None,
              help="Seconds per point (pricing and search, as plan's --time-limit).")
@click.option("--gap", type=float, default=SWEEP_GAP, show_default=True,
              help="Relative gap to a proven lower bound at which each point may stop "
                   "(1e-6 proves every point optimal, at several times the cost on 3-axis "
                   "meshes).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True)
@click.option("-j", "--jobs", type=int, default=1, show_default=True,
              help="Worker processes (local executor).")
@click.option("--resume", is_flag=True, help="Keep the rows in DIR/sweep.csv; run the rest.")
@click.option("--force", is_flag=True,
              help="Start over although DIR/sweep.csv exists (not with --resume).")
@click.option("--executor", type=click.Choice([e.value for e in ExecutorKind]),
              default="local", show_default=True)
@click.option("--scheduler", default=None, help="Dask scheduler address, e.g. tcp://host:8786.")
@click.option("--plans", type=click.Choice([p.value for p in PlanFiles]), default="all",
              show_default=True, help="Which points keep DIR/points/<id>/plan.json.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: when stderr is a terminal).")
@friendly_errors
def sweep_command(**options: Any) -> None:
    """Plan a model on every mesh shape of some device counts; write sweep.csv and plots."""
    spec, settings = spec_from_options(options)
    plans = PlanFiles(options["plans"])
    out_dir: Path = options["out_dir"]
    progress = options["progress"]
    result = sweep(spec, out_dir, settings=settings, jobs=options["jobs"],
                   resume=options["resume"], force=options["force"],
                   executor=ExecutorKind(options["executor"]), scheduler=options["scheduler"],
                   progress=sys.stderr.isatty() if progress is None else progress,
                   plans=plans, command=canonical_command(spec, settings, out_dir, plans))
    feasible = sum(row["feasible"] == "True" for row in result.rows)
    click.echo(f"{len(result.rows)} points ({result.computed} computed, {result.skipped} "
               f"already done), {feasible} feasible")
    for path in result.files:
        click.echo(f"wrote {path}")


def spec_from_options(options: dict[str, Any]) -> tuple[SweepSpec, RunSettings]:
    """Parse the raw option values; every mistake is one UsageError naming the option."""
    min_axes, max_axes = parse_axes(options["axes_text"])
    names = tuple(n.strip() for n in options["axis_names"].split(",") if n.strip())
    if len(set(names)) != len(names):
        raise UsageError(f'--axis-names "{options["axis_names"]}" repeats a name')
    if not options["training"] and (options["optimizer"] != "adamw"
                                    or options["recompute"] != "none"):
        raise UsageError("--optimizer and --recompute apply to --training sweeps only")
    overrides = tuple((k, options[k]) for k in MODEL_OVERRIDES if options[k] is not None)
    spec = SweepSpec(
        model=options["model"], devices=parse_int_list(options["devices_text"], "--devices"),
        min_axes=min_axes, max_axes=max_axes, axis_names=names,
        topologies=tuple(options["topologies"]) or ("dgx-h100",),
        links=tuple(dict.fromkeys(options["links"])) or (DEFAULT_LINKS,),
        batches=_optional_list(options["batch_text"], "--batch"),
        seqs=_optional_list(options["seq_text"], "--seq"),
        training=options["training"], optimizer=options["optimizer"],
        recompute=options["recompute"], overrides=overrides,
        pipeline=_pipeline_sizes(options["pp_text"], options["training"]),
        micro_batch_sizes=parse_int_list(options["micro_batch_text"] or "1", "--micro-batch"),
        accumulate=_accumulates(options["micro_batch_text"], options["training"]))
    memory = options["memory"]
    settings = RunSettings(memory_limit=float(parse_bytes(memory)) if memory else None,
                           reserve=float(parse_bytes(options["reserve"])),
                           time_limit=options["time_limit"], gap=options["gap"])
    return spec, settings


AUTO_PP = (2, 4, 8)


def _accumulates(micro_batch_text: str | None, training: bool) -> bool:
    """Whether --micro-batch was given, which makes every training point accumulate."""
    if micro_batch_text is None:
        return False
    if not training:
        raise UsageError("--micro-batch applies to --training sweeps only (inference runs "
                         "the batch at once)")
    return True


def _pipeline_sizes(text: str, training: bool) -> tuple[int, ...]:
    if text == "none":
        return ()
    if text == "auto":
        return AUTO_PP if training else ()
    if not training:
        raise UsageError("--pp applies to --training sweeps only (a pipeline is a training "
                         "schedule)")
    sizes = parse_int_list(text, "--pp")
    if any(size < 2 for size in sizes):
        raise UsageError(f'--pp "{text}": a pipeline has at least 2 stages')
    return sizes


def _optional_list(text: str | None, option: str) -> tuple[int | None, ...]:
    return (None,) if text is None else parse_int_list(text, option)
