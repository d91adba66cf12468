"""What-if studies: plan one model on many meshes, topologies, links and shapes, and compare.

``sweep`` answers "given 64 H100s, which mesh shape and batch size, and what if the
inter-node links were half as fast?". It expands a :class:`SweepSpec` into points
(:mod:`autoshard.sweep.points`), plans each one in full (:mod:`autoshard.sweep.runner`, here,
in a process pool or on Dask), appends one row per finished point to ``DIR/sweep.csv``
(:mod:`autoshard.sweep.table`), then rewrites the CSV sorted and draws the plots and
``summary.md`` (:mod:`autoshard.sweep.plots`, :mod:`autoshard.sweep.summary`).

Promises: an infeasible point is a row with its reason, never a failed sweep; Ctrl-C leaves a
CSV of whole rows and ``--resume`` computes only the missing points; the final CSV is the same
for every ``-j`` and executor, apart from the timing columns.
"""

from __future__ import annotations

import enum
import json
import logging
import shlex
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autoshard.errors import OutputExistsError, UsageError
from autoshard.output_paths import file_in_the_way, write_refused
from autoshard.planning.planner import check_gap, check_memory_limit, check_time_limit
from autoshard.provenance import machine_line
from autoshard.sweep.points import DEFAULT_LINKS, Point, SweepSpec, enumerate_points
from autoshard.sweep.runner import (
    PointResult,
    RunSettings,
    build_graph,
    run_dask,
    run_processes,
    run_serial,
    tokens_per_s,
)
from autoshard.sweep.table import CSV_NAME, RowAppender, cell, read_rows, write_sorted
from graphs import zoo

logger = logging.getLogger(__name__)

__all__ = ["ExecutorKind", "PlanFiles", "RunSettings", "SweepResult", "SweepSpec",
           "canonical_command", "sweep"]


@enum.unique
class ExecutorKind(enum.Enum):
    """Where points run. LOCAL: this process (``jobs == 1``) or a process pool; DASK: tasks
    on a Dask distributed scheduler."""

    LOCAL = "local"
    DASK = "dask"

    def __repr__(self) -> str:
        return f"ExecutorKind.{self.name}"


@enum.unique
class PlanFiles(enum.Enum):
    """Which ``points/<id>/plan.json`` files to keep. ALL: every feasible point; BEST: the
    best mesh per device count of each study (small enough to commit); NONE: no plan files."""

    ALL = "all"
    BEST = "best"
    NONE = "none"

    def __repr__(self) -> str:
        return f"PlanFiles.{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepResult:
    """The finished sweep: every row of ``sweep.csv`` (sorted) and the files written."""

    csv_path: Path
    rows: tuple[dict[str, str], ...]
    computed: int
    skipped: int
    files: tuple[Path, ...]


def sweep(spec: SweepSpec, out_dir: Path, *, settings: RunSettings | None = None,
          jobs: int = 1, resume: bool = False, force: bool = False,
          executor: ExecutorKind = ExecutorKind.LOCAL, scheduler: str | None = None,
          progress: bool = False, plans: PlanFiles = PlanFiles.ALL,
          command: str | None = None) -> SweepResult:
    """Plan every point of ``spec`` and write ``sweep.csv``, plots and ``summary.md``.

    Args:
        spec: the model, device counts, axes, topologies, link variants and shapes.
        out_dir: the sweep directory; ``points/<point id>/plan.json`` go under it.
        settings: planner knobs shared by all points (memory, reserve, time limit).
        jobs: worker processes of the local executor (1 runs in this process).
        resume: keep the rows already in ``sweep.csv`` and compute only the others.
        force: start over even though ``out_dir`` already holds a ``sweep.csv`` (not with
            ``resume``, which keeps its rows).
        executor: LOCAL or DASK (then ``scheduler`` is the scheduler's address).
        progress: a progress bar on stderr.
        plans: which plan files to keep.
        command: the command line to quote in ``summary.md`` (default: the canonical one).

    Returns:
        A :class:`SweepResult`.

    Raises:
        OutputExistsError: ``out_dir`` holds a ``sweep.csv`` and neither flag was given.
        UsageError: bad options (``resume`` and ``force`` together), an ``out_dir`` that is a
            file or cannot be created, unknown model, unreachable scheduler.

    Example:
        >>> import tempfile
        >>> spec = SweepSpec(model="mlp", devices=(2,), overrides=(("layers", 1),))
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     result = sweep(spec, Path(tmp), plans=PlanFiles.NONE)
        >>> [row["mesh"] for row in result.rows]
        ['dp=2']
    """
    settings = settings or RunSettings()
    check_gap(settings.gap)  # once here, not as an error row per point
    check_time_limit(settings.time_limit)
    check_memory_limit(settings.memory_limit)
    _check_run_options(jobs, executor, scheduler)
    _check_resume_force(resume=resume, force=force)
    _check_out_dir(out_dir)
    spec = with_default_shape(spec)
    csv_path = out_dir / CSV_NAME
    done = _prepare(out_dir, csv_path, resume=resume, force=force)
    _check_settings(out_dir, settings, resume=resume)
    points = enumerate_points(spec)
    build_graph(points[0].shape)  # an unknown model or bad override fails here, once
    _state_shapes(done, points)
    todo = [p for p in points if p.point_id not in done]
    logger.info("sweep: %d points, %d already in %s", len(points), len(points) - len(todo),
                csv_path)
    results = _execute(todo, settings, jobs, executor, scheduler)
    with RowAppender(csv_path) as appender:
        for result in _progress(results, len(todo), progress):
            done[result.point_id] = appender.append(_store(out_dir, result, plans))
    rows = write_sorted(csv_path, done.values())
    if plans is PlanFiles.BEST:
        rows = _keep_best_plans(out_dir, csv_path, rows)
    files = _report(out_dir, rows, command or canonical_command(spec, settings, out_dir, plans))
    return SweepResult(csv_path=csv_path, rows=tuple(rows), computed=len(todo),
                       skipped=len(points) - len(todo), files=(csv_path, *files))


def _check_run_options(jobs: int, executor: ExecutorKind, scheduler: str | None) -> None:
    if jobs < 1:
        raise UsageError(f"-j must be at least 1, got {jobs}")
    if executor is ExecutorKind.DASK and not scheduler:
        raise UsageError("--executor dask needs --scheduler ADDRESS (e.g. tcp://host:8786)")
    if executor is ExecutorKind.LOCAL and scheduler:
        raise UsageError("--scheduler applies to --executor dask only")


def _check_resume_force(*, resume: bool, force: bool) -> None:
    """The two flags contradict each other (keep the earlier rows, or delete them); taking
    either one silently would throw away rows or keep ones the user meant to redo."""
    if resume and force:
        raise UsageError("--resume and --force contradict each other: --resume keeps the rows "
                         "already in sweep.csv, --force deletes them; pass only one")


def _check_out_dir(out_dir: Path) -> None:
    """Refuse, before any planning, an ``out_dir`` that is a file or lies under one, whose
    ``sweep.csv`` is a directory, or where the operating system refuses new files (an
    existing directory on a read-only disk): otherwise the sweep would fail only when
    writing."""
    blocking = file_in_the_way(out_dir)
    if blocking is not None:
        raise UsageError(f'--out "{out_dir}": "{blocking}" is a file, not a directory; '
                         "pass a directory for sweep.csv, the plots and summary.md")
    if (out_dir / CSV_NAME).is_dir():
        raise UsageError(f'--out "{out_dir}": {CSV_NAME} is a directory there; pass another '
                         "--out")
    refused = write_refused(out_dir, directory=True)
    if refused is not None:
        raise UsageError(f'--out "{out_dir}": {refused}; pass a writable location')


def _make_out_dir(out_dir: Path) -> None:
    """Create ``out_dir``; a place that cannot hold it (``/proc``, no permission, a read-only
    disk) is one error naming the directory, not an ``OSError`` traceback."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f'--out "{out_dir}": cannot create the directory '
                         f"({exc.strerror or exc}); pass a writable location") from None


def with_default_shape(spec: SweepSpec) -> SweepSpec:
    """Fill unset batch/seq with the zoo model's defaults, so rows and ids state them; keep
    the pipeline sizes the model's layers allow (a stage holds at least one layer). A
    Hugging Face config's defaults go to the rows only (``default_batch``, ``default_seq``):
    its point ids have always said ``b-_s-``, and sweeps written so must still resume."""
    if spec.model not in zoo.names() and zoo.is_hf_config(spec.model):
        # only what a config takes; another override is refused when the graph is built
        given = {k: v for k, v in spec.overrides if k in zoo.HF_OVERRIDES}
        config = zoo.read_hf_config(spec.model, **given).config
        return replace(spec, default_batch=config.batch, default_seq=config.seq)
    if spec.model.endswith(".json") or Path(spec.model).exists():
        return spec

    config = zoo.config(spec.model, **dict(spec.overrides))
    return replace(spec, batches=tuple(config.batch if b is None else b for b in spec.batches),
                   seqs=tuple(config.seq if s is None else s for s in spec.seqs),
                   pipeline=tuple(p for p in spec.pipeline if p <= config.layers))


def _state_shapes(done: dict[str, dict[str, str]], points: Sequence[Point]) -> None:
    """Rows a resumed sweep keeps from before its batch and seq were known (a Hugging Face
    config's, written empty) get them, and their tokens per second, as new rows do: one
    study, not the old rows under "batch unknown" beside the new ones."""
    for point in points:
        row = done.get(point.point_id)
        if row is None or (row["batch"] and row["seq"]):
            continue
        row["batch"] = row["batch"] or cell(point.batch_used)
        row["seq"] = row["seq"] or cell(point.seq_used)
        if row["feasible"] == "True" and not row["tokens_per_s"] and row["total_s"]:
            row["tokens_per_s"] = cell(tokens_per_s(point.batch_used, point.seq_used,
                                                    float(row["total_s"])))


def _prepare(out_dir: Path, csv_path: Path, *, resume: bool, force: bool
             ) -> dict[str, dict[str, str]]:
    """Rows to keep (resume), after refusing to clobber an earlier sweep by accident."""
    if csv_path.exists() and not (resume or force):
        raise OutputExistsError(str(out_dir), (CSV_NAME,))
    _make_out_dir(out_dir)
    if force:
        csv_path.unlink(missing_ok=True)
        shutil.rmtree(out_dir / "points", ignore_errors=True)  # plans of the earlier sweep
        return {}
    done = read_rows(csv_path)
    if csv_path.exists():
        write_sorted(csv_path, done.values())  # drops a half-written last line before appending
    return done


SETTINGS_NAME = "sweep-settings.json"
LEGACY_GAP = 1e-6  # what every point was solved to before sweeps had --gap


def _check_settings(out_dir: Path, settings: RunSettings, *, resume: bool) -> None:
    """Point ids do not name the planner knobs (memory, reserve, time limit), so a resumed
    sweep must use the knobs its rows were made with; they are kept beside the CSV."""
    path = out_dir / SETTINGS_NAME
    current = {name: getattr(settings, name) for name in RunSettings.__dataclass_fields__}
    if resume and path.exists():
        stored = json.loads(path.read_text())
        stored.setdefault("gap", LEGACY_GAP)
        changed = sorted(k for k in current if stored.get(k) != current[k])
        if changed:
            detail = ", ".join(f"{k} {stored.get(k)!r} → {current[k]!r}" for k in changed)
            raise UsageError(f"{out_dir} was swept with other planner settings ({detail}); "
                             "resume with the same --memory/--reserve/--time-limit/--gap, or pass "
                             "--force instead of --resume to start over")
    path.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")


def _execute(points: Sequence[Point], settings: RunSettings, jobs: int,
             executor: ExecutorKind, scheduler: str | None) -> Iterator[PointResult]:
    if not points:
        return iter(())
    if executor is ExecutorKind.DASK:
        return run_dask(points, settings, str(scheduler))
    if jobs == 1:
        return run_serial(points, settings)
    return run_processes(points, settings, jobs)


def _progress(results: Iterator[PointResult], total: int, enabled: bool
              ) -> Iterator[PointResult]:
    if not enabled or total == 0:
        return results
    from tqdm import tqdm

    return iter(tqdm(results, total=total, desc="sweep", unit="point", file=sys.stderr,
                     dynamic_ncols=True))


def _store(out_dir: Path, result: PointResult, plans: PlanFiles) -> Mapping[str, Any]:
    """Write the point's plan (before its row, so a row never names a missing file)."""
    row = dict(result.row)
    if result.plan_json is None or plans is PlanFiles.NONE:
        row["plan"] = None
        return row
    path = out_dir / row["plan"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.plan_json)
    return row


def _keep_best_plans(out_dir: Path, csv_path: Path, rows: list[dict[str, str]]
                     ) -> list[dict[str, str]]:
    """Delete the plan files of every point that is not the best of its device count."""
    from autoshard.sweep.plots import best_per_devices, frame, studies

    keep = {str(p) for _, study in studies(frame(rows))
            for p in best_per_devices(study)["point"]}
    for row in rows:
        if row["plan"] and row["point"] not in keep:
            (out_dir / row["plan"]).unlink(missing_ok=True)
            _remove_empty(out_dir / row["plan"])
            row["plan"] = ""
    return write_sorted(csv_path, rows)


def _remove_empty(plan_path: Path) -> None:
    folder = plan_path.parent
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def _report(out_dir: Path, rows: list[dict[str, str]], command: str) -> list[Path]:
    from autoshard.sweep.plots import frame, write_plots
    from autoshard.sweep.summary import summary_markdown

    table = frame(rows)
    plots = write_plots(table, out_dir, caption=command)
    summary = out_dir / "summary.md"
    summary.write_text(summary_markdown(table, command=command, machine=machine_line(),
                                        plots=[p.name for p in plots]))
    return [*plots, summary]


def canonical_command(spec: SweepSpec, settings: RunSettings, out_dir: Path,
                      plans: PlanFiles = PlanFiles.ALL) -> str:
    """The ``autoshard sweep`` command line that reproduces ``spec`` (every option spelled
    out, so the summary stays true even if defaults change)."""
    args = ["autoshard", "sweep", "--model", spec.model,
            "--devices", ",".join(map(str, spec.devices)),
            "--axes", f"{spec.min_axes}-{spec.max_axes}",
            "--axis-names", ",".join(spec.axis_names)]
    for topology in spec.topologies:
        args += ["--topology", topology]
    for links in spec.links:
        if links != DEFAULT_LINKS or len(spec.links) > 1:
            args += ["--link", links]
    for option, values in (("--batch", spec.batches), ("--seq", spec.seqs)):
        if any(v is not None for v in values):
            args += [option, ",".join(str(v) for v in values)]
    args.append("--training" if spec.training else "--inference")
    if spec.training:
        args += ["--optimizer", spec.optimizer, "--recompute", spec.recompute,
                 "--pp", ",".join(map(str, spec.pipeline)) or "none"]
        if spec.accumulate:
            args += ["--micro-batch", ",".join(map(str, spec.micro_batch_sizes))]
    for name, value in spec.overrides:
        args += [f"--{name}", str(value)]
    if settings.memory_limit is not None:
        args += ["--memory", str(int(settings.memory_limit))]
    if settings.reserve:
        args += ["--reserve", str(int(settings.reserve))]
    if settings.time_limit is not None:
        args += ["--time-limit", repr(settings.time_limit)]
    args += ["--gap", repr(settings.gap)]
    if plans is not PlanFiles.ALL:
        args += ["--plans", plans.value]
    return shlex.join([*args, "--out", str(out_dir)])
