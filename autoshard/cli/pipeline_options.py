"""``--schedule --stages --virtual-stages``: how a mesh's ``pp`` axis runs (shared by plan)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from autoshard.errors import PipelineError, UsageError
from autoshard.planning.model_source import load_model
from autoshard.planning.pipeline.pipelined import PipelineOptions
from graphs import OpGraph, zoo

SCHEDULES = ("auto", "gpipe", "1f1b", "interleaved", "zb-h1")


def pipeline_options() -> Callable[[Any], Any]:
    def decorate(function: Any) -> Any:
        for option in reversed((
            click.option("--schedule", type=click.Choice(SCHEDULES), default="auto",
                         show_default=True,
                         help="Pipeline schedule of a mesh with a pp axis (e.g. "
                              "dp=4,pp=4,tp=4); auto picks the fastest that fits."),
            click.option("--stages", "stages_text", default=None, metavar="N,N,...",
                         help="Fix the pipeline boundaries: layers per pp stage, or per "
                              "chunk (pp x --virtual-stages entries) for the interleaved "
                              "schedule, summing to the model's layers; with auto, the "
                              "schedules the list's length fits."),
            click.option("--virtual-stages", type=int, default=2, show_default=True,
                         help="Model chunks per stage of the interleaved schedule."),
        )):
            function = option(function)
        return function
    return decorate


def pipeline_choice(schedule: str, stages_text: str | None, virtual: int) -> PipelineOptions:
    """The options as :class:`PipelineOptions`; malformed ``--stages`` is one clear error."""
    stages = None
    if stages_text is not None:
        try:
            stages = tuple(int(x) for x in stages_text.split(","))
        except ValueError:
            raise PipelineError(f'--stages "{stages_text}" must be layer counts like 20,20,20,'
                                f'20') from None
    if virtual < 1:
        raise PipelineError(f"--virtual-stages must be at least 1, got {virtual}")
    return PipelineOptions(schedule=schedule, stages=stages, virtual=virtual)


def check_unused(schedule: str, stages_text: str | None) -> None:
    """Pipeline options on a mesh without a pp axis say the user expected a pipeline."""
    if schedule != "auto" or stages_text is not None:
        raise UsageError("--schedule and --stages apply to a mesh with a pp axis, e.g. "
                         "--mesh dp=4,pp=4,tp=4")


def stage_builder(model: str, overrides: dict[str, Any]) -> Callable[[int], OpGraph] | None:
    """Builds the model with k layers (zoo models and configs); None for a graph file, which
    is then planned whole for the intra-stage costs."""
    if model not in zoo.names() and not zoo.is_hf_config(model):
        return None

    def build(layers: int) -> OpGraph:
        return load_model(model, {**overrides, "layers": layers})
    return build
