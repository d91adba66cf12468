"""What every ``autoshard`` subcommand shares: one-line errors with the right exit code, and
the option groups that describe which graph a plan is of (zoo shape overrides, training step).

Kept apart from ``autoshard.cli.app`` so the command modules (plan, export, verify, sweep) can use
it without importing the group that registers them.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any

import click

from autoshard.errors import (
    AutoshardError,
    InfeasibleError,
    OutputFileExistsError,
    UsageError,
    VerificationFailedError,
)
from autoshard.explain.context import WholeModelResolveWarning
from autoshard.output_paths import file_in_the_way, write_refused
from autoshard.planning.record import plan_file
from costmodel import CostModelError, LaunchFloorWarning
from graphs import GraphError
from graphs.importers.unmapped import UnmappedOpsWarning
from graphs.training import RECOMPUTE_CHOICES
from graphs.zoo import UnmodelledFieldsWarning
from solver import SolverError

USAGE_EXIT, INFEASIBLE_EXIT = 2, 1

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def fail(message: str, code: int) -> None:
    click.echo(f"autoshard: error: {message}", err=True)
    sys.exit(code)


def friendly_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn every known error into one stderr line and the right exit code: 1 when no plan
    fits or a plan failed verification, 2 for everything the user can fix in the input."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with one_line_warnings():
                return func(*args, **kwargs)
        except (InfeasibleError, VerificationFailedError) as exc:
            fail(str(exc), INFEASIBLE_EXIT)
        except (AutoshardError, GraphError, CostModelError, SolverError) as exc:
            fail(str(exc), USAGE_EXIT)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except OSError as exc:  # a path the checks before the work could not foresee
            fail(os_error_line(exc), USAGE_EXIT)
        return None

    return wrapper


def os_error_line(exc: OSError) -> str:
    """One line for a file the operating system refused (``/proc/x``: no such directory,
    a full disk, no permission): the path, the reason, what to do. The checks before any
    work (:func:`check_output_file`) catch what a path's shape says; this is the net for
    what only the write finds out."""
    path = exc.filename if exc.filename is not None else "a file"
    reason = (exc.strerror or type(exc).__name__).lower()
    return f'cannot use "{path}": {reason}; pass a path in a directory you can write'


def check_output_file(path: Path | None, force: bool, option: str,
                      taken: tuple[Path, ...] = ()) -> None:
    """Everything that would stop ``option``'s file from being written, found before any
    work: a directory where the file goes, a file where one of its parent directories goes,
    a path another output of the same command writes (``taken``), an existing file
    without ``--force``, or a place the operating system refuses (``/proc``, a read-only
    disk: :func:`~autoshard.output_paths.write_refused`)."""
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f'{option} "{path}" is a directory; pass a file name')
    blocking = file_in_the_way(path.parent)
    if blocking is not None:
        raise UsageError(f'{option} "{path}": "{blocking}" is a file, not a directory')
    resolved = path.resolve()
    clash = next((other for other in taken if other.resolve() == resolved), None)
    if clash is not None:
        raise UsageError(f'{option} "{path}" is "{clash}", which this command also reads or '
                         f"writes; pass another {option} path")
    if path.exists() and not force:
        raise OutputFileExistsError(str(path), option)
    refused = write_refused(path, directory=False)
    if refused is not None:
        raise UsageError(f'{option} "{path}": {refused}; pass a path in a directory you can '
                         "write")


class PlanFileType(click.Path):
    """A plan argument: a plan.json, or the directory ``plan --out`` wrote (its plan.json).
    Anything else passes through for :meth:`Plan.load` to name what is wrong in one line."""

    def __init__(self) -> None:
        super().__init__(path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        return plan_file(Path(super().convert(value, param, ctx)))


PRODUCT_WARNINGS = (UnmodelledFieldsWarning, UnmappedOpsWarning, LaunchFloorWarning,
                    WholeModelResolveWarning)
"""Warnings about the user's input (config fields not modelled, ops not mapped, a written link
below the measured floor, explain's re-solves of a whole model): each one is shown as one
``autoshard: warning:`` line when it happens (a link's once per message: the links of a
pipelined plan are built twice)."""


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """Inside, the product's warnings print as one stderr line each; others as usual."""
    with warnings.catch_warnings():
        for category in PRODUCT_WARNINGS:
            warnings.simplefilter("once" if category is LaunchFloorWarning else "always",
                                  category)
        shown = warnings.showwarning

        def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if issubclass(category, PRODUCT_WARNINGS):
                click.echo(f"autoshard: warning: {message}", err=True)
            else:
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield


def _stack(*decorators: Decorator) -> Decorator:
    def apply(func: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


BATCH_HELP = ("Samples in one micro-batch over the whole mesh, all data-parallel replicas "
              "together (the graph's batch; --micro-batch is per replica). A step runs it "
              "once, --grad-accum times or, for a saved plan, the plan's micro-batch count. "
              "Not with --global-batch or --micro-batch. Zoo models and config.json; "
              "default: the model's own.")


SEQ_HELP = "Tokens per sample (sequence length); default: the model's own."
LAYERS_HELP = ("Transformer layers (zoo models and config.json; e.g. 2 for a quick look); "
               "default: the model's own.")
HIDDEN_HELP = "Hidden (model) width of a zoo model; default: the model's own."
FFN_HELP = "Feed-forward (MLP) width of a zoo model; default: the model's own."
HEADS_HELP = "Attention heads of a zoo model; default: the model's own."


def shape_options(dtype_help: str | None = None) -> Decorator:
    """``--batch --seq --layers --hidden --ffn --heads --dtype``: zoo model overrides; the
    mixture-of-experts ones (``--experts --top-k --capacity-factor --expert-imbalance``)."""
    return _stack(
        click.option("--batch", type=int, default=None, help=BATCH_HELP),
        click.option("--seq", type=int, default=None, help=SEQ_HELP),
        click.option("--layers", type=int, default=None, help=LAYERS_HELP),
        click.option("--hidden", type=int, default=None, help=HIDDEN_HELP),
        click.option("--ffn", type=int, default=None, help=FFN_HELP),
        click.option("--heads", type=int, default=None, help=HEADS_HELP),
        click.option("--dtype", default=None, help=dtype_help),
        click.option("--experts", type=int, default=None,
                     help="Routed experts of a mixture-of-experts zoo model."),
        click.option("--top-k", "top_k", type=int, default=None,
                     help="Experts per token of a mixture-of-experts zoo model."),
        click.option("--capacity-factor", type=float, default=None,
                     help="MoE expert capacity factor (tokens beyond it are dropped); "
                          "default: dropless."),
        click.option("--expert-imbalance", type=float, default=None,
                     help="Dropless MoE: the busiest expert's load over the mean (>= 1, "
                          "default 1.0); sizes the expert buffers. Not with "
                          "--capacity-factor, which sizes them on its own."),
    )


BATCH_OPTIONS = ("global_batch", "micro_batch", "grad_accum")


def batch_options(saved_plan: bool = False) -> Decorator:
    """``--global-batch --micro-batch --grad-accum``: the samples of a step and how they are
    split (:mod:`autoshard.planning.batch`). ``saved_plan``: for a command that reads a plan,
    where the plan's own micro-batch count is the default
    (:func:`~autoshard.planning.batch.saved_plan_batches`)."""
    default = (" Default: the plan's own micro-batch count (plan.json objective."
               "micro_batches); given, it must agree." if saved_plan else "")
    return _stack(
        click.option("--global-batch", type=int, default=None,
                     help="Samples per step (all micro-batches, all replicas); with "
                          "--micro-batch or --grad-accum for gradient accumulation."),
        click.option("--micro-batch", type=int, default=None,
                     help="Samples per micro-batch on each data-parallel replica (Megatron's "
                          "micro-batch size); the replicas are the axes named dp, fsdp, …"),
        click.option("--grad-accum", type=int, default=None,
                     help="Micro-batches per step (gradient accumulation)." + default),
    )


def step_options() -> Decorator:
    """``--global-batch --micro-batch --grad-accum --overlap``: how a training step runs."""
    return _stack(
        batch_options(),
        click.option("--overlap", type=click.Choice(["op", "layer", "none"]), default="op",
                     show_default=True,
                     help="How parameter gathers and gradient reductions overlap compute: "
                          "behind the op they feed or came from (op), pooled per layer and "
                          "phase (layer: slower, often not proven optimal), or not (none)."),
    )


def training_options(what: str) -> Decorator:
    """``--training/--inference --optimizer --recompute``; ``what`` says what they describe."""
    return _stack(
        click.option("--training/--inference", default=False, show_default=True,
                     help=f"{what} a training step (backward + optimizer) or inference."),
        click.option("--optimizer", type=click.Choice(["adamw", "sgd"]), default="adamw",
                     show_default=True,
                     help="Optimizer of the training step (AdamW keeps fp32 master weights "
                          "and moments for 16-bit parameters)."),
        click.option("--recompute", type=click.Choice(list(RECOMPUTE_CHOICES)),
                     default="none", show_default=True,
                     help="Activation recomputation of the training step (Korthikanti et al. "
                          "2022)."),
    )


def plan_step_options() -> Decorator:
    """``--training/--inference --optimizer --recompute`` for commands that read a saved plan
    (export, verify): what the plan is of is read off the plan; given, an option must agree
    with it (a check, one line naming what the plan was made with otherwise)."""
    return _stack(
        click.option("--training/--inference", default=None,
                     help="The plan is of a training step or of inference (default: read off "
                          "the plan; given, it must agree)."),
        click.option("--optimizer", type=click.Choice(["adamw", "sgd"]), default=None,
                     help="The training step's optimizer (default: read off the plan)."),
        click.option("--recompute", type=click.Choice(list(RECOMPUTE_CHOICES)),
                     default=None,
                     help="The training step's recomputation (default: read off the plan)."),
    )


def saved_plan_model(plan: Any, model: str | None, options: Mapping[str, Any]) -> Any:
    """The model a saved plan is checked against (``verify``, ``explain``, ``export
    --model``): ``--model`` (``None``: the model plan.json names, when it is a zoo model or
    a file here) with the plan command's shape options, its batch from ``--batch`` or the
    batch options read with the plan's own micro-batch count as the default, as
    ``autoshard plan`` built the graph it planned."""
    from autoshard.planning.batch import saved_plan_batches
    from autoshard.planning.model_source import SHAPE_OVERRIDES, load_model
    from autoshard.sharding.mesh import Mesh

    batches = saved_plan_batches(Mesh(axes=tuple(plan.mesh)), plan.objective.micro_batches,
                                 batch=options.get("batch"),
                                 **{k: options.get(k) for k in BATCH_OPTIONS})
    shapes = {k: options.get(k) for k in SHAPE_OVERRIDES}
    if model is not None:
        return load_model(model, {**shapes, "batch": batches.graph_batch})
    try:
        return load_model(plan.model, {**shapes, "batch": batches.graph_batch})
    except (AutoshardError, GraphError) as exc:
        raise UsageError(f'the plan was made for "{plan.model}" (plan.json\'s model), which '
                         f"does not load here ({exc}); pass --model with the zoo name, "
                         "config.json or graph JSON it was planned with") from None


def parse_links(specs: tuple[str, ...]) -> dict[str, str]:
    links: dict[str, str] = {}
    for spec in specs:
        axis, sep, value = spec.partition("=")
        if not sep or not axis or not value:
            raise UsageError(f'--link "{spec}" must look like AXIS=SPEC, e.g. tp=nvlink')
        axis = axis.strip()
        if axis in links:  # the last would silently win: say which two disagree
            raise UsageError(f'--link gives axis "{axis}" twice ("{links[axis]}" and '
                             f'"{value.strip()}"); give each axis one link')
        links[axis] = value.strip()
    return links
