"""Value types for hardware: a link (alpha, beta), a device, and a topology of link levels.

Why: the rest of costmodel prices collectives over *groups* of levels and kernels on a
*device*; these records are what presets, TOML files and ``--link`` overrides produce. All are
frozen, validated in the constructor (an invalid topology cannot exist) and hashable.

Invariants:
- ``Link``: ``alpha_s`` ≥ 0 and ``beta_s_per_byte`` ≥ 0, finite (Hockney model: one message of
  ``m`` bytes over the link costs ``alpha_s + m * beta_s_per_byte``).
- ``Topology.levels`` run inner→outer; ``TopologyLevel.devices`` counts the devices one unit of
  that level holds (8 per node for NVLink), strictly increasing, each dividing the next;
  only the outermost level may be ``None`` (unbounded).
- Axis names in ``axis_links`` are opaque strings: costmodel never interprets them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from types import MappingProxyType

from costmodel.errors import InvalidValueError
from costmodel.kernel_params import KernelParams

logger = logging.getLogger(__name__)


def _check_number(value: float, name: str, *, positive: bool = False,
                  allow_inf: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        message = f"{name} = {value!r} is not a number"
        raise InvalidValueError(message, field=name, value=value) from None
    bad = math.isnan(number) or number < 0 or (positive and number == 0)
    bad = bad or (math.isinf(number) and not allow_inf)
    if bad:
        need = "positive" if positive else "non-negative"
        message = f"{name} = {value!r} must be a {need}{'' if allow_inf else ' finite'} number"
        raise InvalidValueError(message, field=name, value=value)
    return number


@dataclass(frozen=True, slots=True)
class Link:
    """A point-to-point link: the Hockney alpha-beta pair, plus the optional measured-curve terms.

    ``alpha_s`` is the per-message (per algorithm step) latency in seconds and
    ``beta_s_per_byte`` the transfer time per byte at the link's rate (1 / bandwidth). ``name``
    ("nvlink", "ib") is for reports and for ``--link AXIS=NAME`` lookups; it takes part in
    equality.

    The three keyword-only fields make a collective over the link follow measured NCCL curves
    (:mod:`costmodel.measured`); at their defaults the link is a pure alpha-beta link and
    collectives over it are priced by the textbook formulas of :mod:`costmodel.collectives`,
    exactly as before these fields existed:

    - ``launch_s`` (s, ≥ 0): the floor of any collective that spans this level — kernel launch,
      proxy and handshake — paid once per collective, however small (default 0);
    - ``pipeline_s`` (s, ≥ 0): pipeline fill of the chunked transfer; the bandwidth reached
      ramps up with the message as in an optimally segmented pipeline (default 0);
    - ``bus_efficiency`` (0 < e ≤ 1): the bus bandwidth reached on huge messages as a fraction
      of the link rate ``1/beta`` (protocol and flow-control overhead; default 1).

    Example:
        >>> Link.from_bandwidth(5e-6, 25e9, "ib").beta_s_per_byte
        4e-11
        >>> Link(1e-6, 1e-9).is_alpha_beta, Link(1e-6, 1e-9, launch_s=2e-5).is_alpha_beta
        (True, False)
    """

    alpha_s: float
    beta_s_per_byte: float
    name: str = ""
    _: KW_ONLY
    launch_s: float = 0.0
    pipeline_s: float = 0.0
    bus_efficiency: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "alpha_s", _check_number(self.alpha_s, "alpha_s"))
        object.__setattr__(self, "beta_s_per_byte",
                           _check_number(self.beta_s_per_byte, "beta_s_per_byte"))
        object.__setattr__(self, "name", str(self.name))
        object.__setattr__(self, "launch_s", _check_number(self.launch_s, "launch_s"))
        object.__setattr__(self, "pipeline_s", _check_number(self.pipeline_s, "pipeline_s"))
        efficiency = _check_number(self.bus_efficiency, "bus_efficiency", positive=True)
        if efficiency > 1:
            message = f"bus_efficiency = {efficiency!r} must be in (0, 1]"
            raise InvalidValueError(message, field="bus_efficiency", value=efficiency)
        object.__setattr__(self, "bus_efficiency", efficiency)

    def __repr__(self) -> str:
        # the measured-curve fields only when set, so a pure alpha-beta link reads as before
        # (and cheaply: the planner keys caches on the topology's repr)
        text = (f"Link(alpha_s={self.alpha_s!r}, beta_s_per_byte={self.beta_s_per_byte!r}, "
                f"name={self.name!r}")
        if self.launch_s != 0.0:
            text += f", launch_s={self.launch_s!r}"
        if self.pipeline_s != 0.0:
            text += f", pipeline_s={self.pipeline_s!r}"
        if self.bus_efficiency != 1.0:
            text += f", bus_efficiency={self.bus_efficiency!r}"
        return text + ")"

    @classmethod
    def from_bandwidth(cls, alpha_s: float, bw_bytes_per_s: float, name: str = "",
                       **curve: float) -> Link:
        """A link from its latency and bandwidth in bytes per second (``curve``: the
        keyword-only measured-curve fields)."""
        bandwidth = _check_number(bw_bytes_per_s, "bw_bytes_per_s", positive=True,
                                  allow_inf=True)
        return cls(alpha_s, 1.0 / bandwidth, name, **curve)

    @property
    def bw_bytes_per_s(self) -> float:
        """Bandwidth in bytes per second (``inf`` for a zero-beta link)."""
        return math.inf if self.beta_s_per_byte == 0 else 1.0 / self.beta_s_per_byte

    @property
    def is_alpha_beta(self) -> bool:
        """True when every measured-curve field is at its default (a textbook link)."""
        return self.launch_s == 0.0 and self.pipeline_s == 0.0 and self.bus_efficiency == 1.0

    def curve_fields(self) -> dict[str, float]:
        """The measured-curve fields by name: launch_s, pipeline_s, bus_efficiency."""
        return {"launch_s": self.launch_s, "pipeline_s": self.pipeline_s,
                "bus_efficiency": self.bus_efficiency}


def _frozen_mapping(mapping: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(sorted((str(k), v) for k, v in dict(mapping).items())))


def _evaluable_repr(value: object) -> str:
    """``Type(field=...)`` with read-only mappings shown as plain dicts, so repr evaluates."""
    parts = []
    for name in value.__dataclass_fields__:  # type: ignore[attr-defined]
        item = getattr(value, name)
        shown = repr(dict(item)) if isinstance(item, MappingProxyType) else repr(item)
        parts.append(f"{name}={shown}")
    return f"{type(value).__name__}({', '.join(parts)})"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSpec:
    """One accelerator: peak FLOP/s per dtype, HBM capacity and bandwidth, and fudge factors.

    ``efficiency`` (0 < e ≤ 1) scales the peak to what real kernels reach; ``min_kernel_s`` is
    the floor of any kernel that does work (launch overhead). Keys of ``peak_flops_per_s`` are
    dtype names as in ``graphs.DType`` values: "bf16", "f16", "f32", "f64", "f8e4m3", "int8".

    ``kernels`` (optional): the kernel-efficiency model's parameters
    (:class:`costmodel.kernel_params.KernelParams`). Without them every kernel is priced by
    the flat roofline (``efficiency`` × peak), exactly as before the field existed; with them
    GEMMs, flash attention and memory-bound ops get their own models and ``efficiency`` is
    not used (see :func:`costmodel.compute.kernel_seconds`).
    """

    name: str
    peak_flops_per_s: Mapping[str, float]
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    efficiency: float = 1.0
    min_kernel_s: float = 0.0
    kernels: KernelParams | None = None

    def __post_init__(self) -> None:
        if self.kernels is not None and not isinstance(self.kernels, KernelParams):
            message = f"kernels must be a costmodel KernelParams or None, got {self.kernels!r}"
            raise InvalidValueError(message, field="kernels", value=self.kernels)
        peaks = {str(k): _check_number(v, f"peak_flops_per_s[{k!r}]", positive=True,
                                       allow_inf=True)
                 for k, v in dict(self.peak_flops_per_s).items()}
        if not peaks:
            message = f"device {self.name!r} needs at least one peak_flops_per_s entry"
            raise InvalidValueError(message, field="peak_flops_per_s", value={})
        object.__setattr__(self, "peak_flops_per_s", _frozen_mapping(peaks))
        hbm = _check_number(self.hbm_bytes, "hbm_bytes", positive=True, allow_inf=True)
        object.__setattr__(self, "hbm_bytes", int(hbm) if math.isfinite(hbm) else hbm)
        object.__setattr__(self, "hbm_bw_bytes_per_s",
                           _check_number(self.hbm_bw_bytes_per_s, "hbm_bw_bytes_per_s",
                                         positive=True, allow_inf=True))
        efficiency = _check_number(self.efficiency, "efficiency", positive=True)
        if efficiency > 1:
            message = f"efficiency = {efficiency!r} must be in (0, 1]"
            raise InvalidValueError(message, field="efficiency", value=efficiency)
        object.__setattr__(self, "efficiency", efficiency)
        object.__setattr__(self, "min_kernel_s", _check_number(self.min_kernel_s, "min_kernel_s"))

    def __repr__(self) -> str:
        return _evaluable_repr(self)

    def __hash__(self) -> int:
        return hash((self.name, tuple(self.peak_flops_per_s.items()), self.hbm_bytes,
                     self.hbm_bw_bytes_per_s, self.efficiency, self.min_kernel_s,
                     self.kernels))


@dataclass(frozen=True, slots=True, kw_only=True)
class TopologyLevel:
    """One physical level: ``devices`` per unit (8 per NVLink node; ``None`` = unbounded)."""

    name: str
    devices: int | None
    link: Link

    def __post_init__(self) -> None:
        if self.devices is not None:
            integral = isinstance(self.devices, int | float) and not isinstance(
                self.devices, bool) and float(self.devices).is_integer()
            if not integral or self.devices < 1:
                message = (f"level {self.name!r}: devices = {self.devices!r} must be a positive "
                           f"integer or None (unbounded)")
                raise InvalidValueError(message, field="devices", value=self.devices)
            object.__setattr__(self, "devices", int(self.devices))
        if not isinstance(self.link, Link):
            message = f"level {self.name!r}: link must be a costmodel.Link, got {self.link!r}"
            raise InvalidValueError(message, field="link", value=self.link)


@dataclass(frozen=True, slots=True, kw_only=True)
class Topology:
    """A device plus its physical link hierarchy, inner→outer, and named/per-axis links.

    ``axis_links`` maps opaque axis names to the link that axis is forced onto;
    ``named_links`` holds extra links selectable by name (``--link tp=pcie``) besides the
    levels' own links.

    Example:
        >>> from costmodel import get_preset
        >>> [(level.name, level.devices) for level in get_preset("dgx-h100").levels]
        [('node', 8), ('cluster', None)]
    """

    name: str
    device: DeviceSpec
    levels: tuple[TopologyLevel, ...]
    axis_links: Mapping[str, Link] = field(default_factory=dict)
    named_links: Mapping[str, Link] = field(default_factory=dict)

    def __post_init__(self) -> None:
        levels = tuple(self.levels)
        _check_levels(self.name, levels)
        object.__setattr__(self, "levels", levels)
        for attr in ("axis_links", "named_links"):
            mapping = dict(getattr(self, attr))
            for key, link in mapping.items():
                if not isinstance(link, Link):
                    message = f"topology {self.name!r}: {attr}[{key!r}] must be a Link"
                    raise InvalidValueError(message, field=attr, value=link)
            object.__setattr__(self, attr, _frozen_mapping(mapping))

    def __repr__(self) -> str:
        return _evaluable_repr(self)

    def __hash__(self) -> int:
        return hash((self.name, self.device, self.levels, tuple(self.axis_links.items()),
                     tuple(self.named_links.items())))

    def links_by_name(self) -> dict[str, Link]:
        """Every link this topology names: levels' links first, then ``named_links``."""
        found: dict[str, Link] = {}
        for level in self.levels:
            if level.link.name:
                found.setdefault(level.link.name, level.link)
        for name, link in self.named_links.items():
            found.setdefault(name, link)
        return found


def _check_levels(name: str, levels: tuple[TopologyLevel, ...]) -> None:
    if not levels:
        message = f"topology {name!r} needs at least one level"
        raise InvalidValueError(message, field="levels", value=levels)
    previous = 1
    for index, level in enumerate(levels):
        if not isinstance(level, TopologyLevel):
            message = f"topology {name!r}: levels[{index}] must be a TopologyLevel"
            raise InvalidValueError(message, field="levels", value=level)
        if level.devices is None:
            if index != len(levels) - 1:
                message = (f"topology {name!r}: only the outermost level may be unbounded, "
                           f"but level {level.name!r} (index {index}) has devices = None")
                raise InvalidValueError(message, field="levels", value=level)
            continue
        if (level.devices <= previous and index > 0) or level.devices % previous:
            message = (f"topology {name!r}: level {level.name!r} holds {level.devices} devices, "
                       f"which must be a larger multiple of the inner level's {previous}")
            raise InvalidValueError(message, field="levels", value=level)
        previous = level.devices
