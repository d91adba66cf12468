"""The exception tree of the sharding domain and the product.

Every error a user can cause derives from :class:`AutoshardError` and carries the culprit as
structured fields (the axis, the tensor, the bytes needed) as well as a message that says what
to do. The CLI turns each one into a single stderr line and a non-zero exit; Python callers can
catch the root or a precise subclass.
"""

from __future__ import annotations

from costmodel import format_bytes


class AutoshardError(Exception):
    """Root of every error autoshard raises on bad input."""


class UsageError(AutoshardError):
    """Options that contradict each other or name something that does not exist."""


class MeshError(AutoshardError):
    """A mesh that cannot exist: bad axis names or sizes, wrong device list."""

    def __init__(self, message: str, *, axis: str | None = None) -> None:
        super().__init__(message)
        self.axis = axis


class PlacementError(AutoshardError):
    """A placement or sharding that does not fit its tensor or mesh."""


class NotDivisibleError(PlacementError):
    """A dim's size does not divide by the mesh axes that shard it."""

    def __init__(self, message: str, *, dim: int, size: int, shards: int) -> None:
        super().__init__(message)
        self.dim, self.size, self.shards = dim, size, shards


class TopologyError(AutoshardError):
    """The topology or a link override does not fit the mesh."""


class InfeasibleError(AutoshardError):
    """No plan satisfies the constraints (memory, time limit)."""


class MemoryTooSmallError(InfeasibleError):
    """Even the plan with the smallest peak memory does not fit in the device memory.

    ``needed_bytes`` is that smallest peak when ``exact``, else a proven lower bound of it
    (the time limit ended the search for it first); ``found_bytes`` is then the peak of the
    leanest plan found, an upper bound (a plan needing that much exists), or None.
    """

    def __init__(self, *, needed_bytes: float, limit_bytes: float, mesh: str,
                 exact: bool = True, found_bytes: float | None = None) -> None:
        bound = "needs" if exact else "needs at least"
        found = ""
        if not exact and found_bytes is not None:
            found = (f" (a proven lower bound; the leanest plan found needs "
                     f"{format_bytes(found_bytes)}, an upper bound)")
        super().__init__(
            f"no plan fits in {format_bytes(limit_bytes)} per device on mesh {mesh}: the "
            f"smallest plan {bound} {format_bytes(needed_bytes)} per device{found}; raise "
            "--memory, use a larger mesh, or a smaller model/batch")
        self.needed_bytes, self.limit_bytes, self.mesh = needed_bytes, limit_bytes, mesh
        self.exact = exact
        self.found_bytes = needed_bytes if exact else found_bytes


class SolverTimeoutError(InfeasibleError):
    """The solver found no feasible plan within the time limit."""


class OutputExistsError(AutoshardError):
    """Writing the plan would overwrite files the user already has."""

    def __init__(self, directory: str, files: tuple[str, ...]) -> None:
        super().__init__(
            f"{directory} already holds {', '.join(files)}; choose another --out directory "
            "or pass --force to overwrite them")
        self.directory, self.files = directory, files


class OutputFileExistsError(AutoshardError):
    """Writing one file (``option`` names the option that chose it, e.g. ``--trace``) would
    overwrite a file the user already has."""

    def __init__(self, path: str, option: str) -> None:
        super().__init__(f"{path} already exists; choose another {option} path or pass --force "
                         "to overwrite it")
        self.path, self.option = path, option


class PlanFileError(AutoshardError):
    """A plan file that cannot be read back."""

    def __init__(self, source: str, message: str) -> None:
        super().__init__(f"plan file {source}: {message}")
        self.source = source


class PlanRecordError(AutoshardError):
    """A plan whose records contradict each other or its model (a hand-edited or mixed
    plan.json): a tensor's recorded layout, shape or dtype is not what the strategy of the op
    writing it gives, or an op's strategy is none the op has. ``item`` names the tensor or
    op, ``recorded`` is what plan.json says and ``implied`` what the plan's ops and model
    give."""

    def __init__(self, message: str, *, item: str, recorded: str, implied: str) -> None:
        super().__init__(message)
        self.item, self.recorded, self.implied = item, recorded, implied


class TimelineError(AutoshardError):
    """A plan whose records do not add up to one step (a hand-edited or inconsistent
    plan.json): ``item`` names the op or reshard at fault."""

    def __init__(self, message: str, *, item: str) -> None:
        super().__init__(f"cannot lay out the step: {message}; re-plan to get consistent "
                         "records")
        self.item = item


class VerificationFailedError(AutoshardError):
    """The emulated plan diverged from the unsharded model (``plan --verify``): the plan file
    is still written, with the verdict in it, and the CLI exits 1 naming the first culprit."""

    def __init__(self, record: dict) -> None:
        self.record = record
        where = record.get("first_divergence") or "an unknown step"
        super().__init__(f"verification failed at {where}: {record.get('message', '')}".strip())


class PinError(UsageError):
    """A pin rule that cannot apply: malformed, matching no tensor, or asking for a layout no
    strategy of the tensor's producer has. ``rule`` names the rule (its number and source),
    ``tensor`` the tensor at fault when there is one."""

    def __init__(self, message: str, *, rule: str | None = None,
                 tensor: str | None = None) -> None:
        super().__init__(message)
        self.rule, self.tensor = rule, tensor


class PinConflictError(PinError):
    """Pins that each fit their tensor but admit no plan together (two pins on one op that no
    strategy satisfies at once, or layouts no reshard connects). ``rules`` names them all."""

    def __init__(self, message: str, *, rules: tuple[str, ...], tensor: str | None = None
                 ) -> None:
        super().__init__(message, rule=rules[0] if rules else None, tensor=tensor)
        self.rules = rules


class PinnedMemoryError(InfeasibleError):
    """The pinned plan does not fit in memory: ``needed_bytes`` is the smallest peak under the
    pins (a proven lower bound of it when not ``exact``), ``rules`` the rules whose pins hold
    more than the leanest layouts of their tensors (``excess_bytes`` each, summed over the
    tensors they pin)."""

    def __init__(self, *, needed_bytes: float, limit_bytes: float,
                 rules: tuple[tuple[str, float], ...], exact: bool = True) -> None:
        if rules:
            named = "; ".join(f"{rule} holds {format_bytes(extra)} more than the leanest "
                              f"layouts of its tensors" for rule, extra in rules[:3])
            blame = f"{named}; relax {'it' if len(rules) == 1 else 'them'} or raise --memory"
        else:
            blame = ("no pin holds more than its tensors' leanest layouts: the model does not fit "
                     "this mesh; raise --memory or use a larger mesh")
        needs = "needs" if exact else "needs at least"
        super().__init__(f"no plan with these pins fits in {format_bytes(limit_bytes)} per "
                         f"device: the smallest {needs} {format_bytes(needed_bytes)}; {blame}")
        self.needed_bytes, self.limit_bytes, self.rules = needed_bytes, limit_bytes, rules


class PipelineError(UsageError):
    """A pipeline that cannot be built: more stages than layers, a ``pp`` size that does not
    divide the devices, too few micro-batches for the schedule, bad ``--stages``."""

    def __init__(self, message: str, *, stages: int | None = None,
                 micro_batches: int | None = None, schedule: str | None = None) -> None:
        super().__init__(message)
        self.stages, self.micro_batches, self.schedule = stages, micro_batches, schedule
