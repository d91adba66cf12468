"""TOML topology files: describe a cluster once, load it with ``--topology my-cluster.toml``.

Why: "what if the links were slower" studies need machines that are not presets, written by
hand and versioned beside results. The schema is small; a file either extends a preset
(``base``) or defines everything. Every bad key is one :class:`TopologyFileError` naming the
file and the dotted key. ``dump_topology`` writes the fully explicit form and
``load_topology(dump_topology(t)) == t`` holds exactly (floats are written with ``repr``).

Schema (every table optional when ``base`` is given)::

    format = "autoshard.topology/v1"      # optional
    name = "my-cluster"                   # default: the base name, else required
    base = "dgx-h100"                     # a preset to extend

    [device]                              # overrides; all required without base
    name = "H100"
    hbm = "80GB"                          # or hbm_bytes = 80000000000
    hbm_bw = "3.35TB/s"                   # or hbm_bw_bytes_per_s = 3.35e12
    efficiency = 0.6
    min_kernel = "4us"                    # or min_kernel_s = 4e-6
    [device.peak_flops_per_s]             # merged into the base's; alias [device.peak_flops]
    bf16 = 989e12

    [device.kernels]                      # optional: the kernel-efficiency model (below)
    sm_count = 132
    gemm_tile = [128, 128]

    [[levels]]                            # replaces the base's levels, inner→outer
    name = "node"
    devices = 8                           # omit on the outermost (unbounded) level
    link = "nvlink"                       # a link spec, or {alpha = "2us", bw = "450GB/s"}

    [links]                               # named links, usable by name below and in --link
    slow-ib = {alpha = "8us", bw = "12.5GB/s"}

    [axes]                                # per-axis overrides (axis names are opaque)
    tp = "nvlink"
    dp = {alpha = "5us", bw = "25GB/s"}

A link table takes ``alpha`` (or ``alpha_s``), one of ``bw`` / ``bw_bytes_per_s`` / ``beta`` /
``beta_s_per_byte``, and an optional ``name``. Optional measured-curve terms (see
:mod:`costmodel.measured`; absent means pure alpha-beta, so files written before them load as
before): ``launch`` (or ``launch_s``: per-collective floor, a duration), ``pipeline`` (or
``pipeline_s``: pipeline fill, a duration) and ``bus_efficiency`` (bus bandwidth reached as a
fraction of the link rate, in (0, 1])::

    node = {alpha = "0.89us", bw = "300GB/s", launch = "6.8us", pipeline = "17.4us",
            bus_efficiency = 0.775}

Kernel model (``[device.kernels]``, see :mod:`costmodel.kernel_params`; absent means the flat
roofline of ``efficiency`` and ``min_kernel``, so files written before it load as before):
``sm_count`` (integer), ``gemm_tile`` ([rows, cols]), ``gemm_tile_k`` (integer),
``gemm_efficiency`` and ``hbm_efficiency`` (fractions in (0, 1]), ``gemm_k_overhead`` (K
elements, ≥ 0), ``launch`` (or ``launch_s``: per-kernel cost, a duration) and ``attention``, an
array of measured FlashAttention points ``{pass = "fwd" | "bwd" | "fwd_bwd", causal = BOOL,
head_dim = INT, seq = INT, tflops = NUMBER}``. With a ``base`` the given keys override the
base's kernel parameters (``attention`` replaces its rows; ``sm_count`` is needed when the base
has none); ``kernels = "none"`` in ``[device]`` drops the model (flat roofline)::

    [device.kernels]
    sm_count = 132
    gemm_tile = [128, 128]
    gemm_efficiency = 0.869
    gemm_k_overhead = 136
    launch = "5.71us"
    hbm_efficiency = 0.898
    attention = [{pass = "fwd", causal = true, head_dim = 128, seq = 4096, tflops = 579}]
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from costmodel.errors import CostModelError, TopologyFileError
from costmodel.kernel_params import AttentionRate, KernelParams
from costmodel.link import DeviceSpec, Link, Topology, TopologyLevel
from costmodel.linkspec import link_from_fields, parse_link_spec
from costmodel.presets import get_preset
from costmodel.units import parse_bandwidth, parse_bytes, parse_duration

logger = logging.getLogger(__name__)

FORMAT = "autoshard.topology/v1"
_TOP_KEYS = ("format", "name", "base", "device", "levels", "links", "axes")
_DEVICE_KEYS = ("name", "hbm", "hbm_bytes", "hbm_bw", "hbm_bw_bytes_per_s", "efficiency",
                "min_kernel", "min_kernel_s", "peak_flops_per_s", "peak_flops", "kernels")
_KERNEL_KEYS = ("sm_count", "gemm_tile", "gemm_tile_k", "gemm_efficiency", "gemm_k_overhead",
                "hbm_efficiency", "launch", "launch_s", "attention")
_ATTENTION_KEYS = ("pass", "causal", "head_dim", "seq", "tflops")
_LEVEL_KEYS = ("name", "devices", "link")
_LINK_KEYS = ("name", "alpha", "alpha_s", "bw", "bw_bytes_per_s", "beta", "beta_s_per_byte",
              "launch", "launch_s", "pipeline", "pipeline_s", "bus_efficiency")
_CURVE_KEYS = (("launch", "launch_s"), ("pipeline", "pipeline_s"))


class _Reader:
    """Carries the file name so every failure names file and key."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, message: str) -> TopologyFileError:
        return TopologyFileError(self.source, key, message)

    def check_keys(self, table: Any, allowed: tuple[str, ...], where: str) -> dict[str, Any]:
        if not isinstance(table, dict):
            raise self.fail(where, f"must be a table, got {table!r}")
        for key in table:
            if key not in allowed:
                full = f"{where}.{key}" if where else key
                raise self.fail(full, f"unknown key; accepted keys: {', '.join(allowed)}")
        return table

    def one(self, table: dict[str, Any], where: str, *keys: str) -> tuple[str, Any] | None:
        present = [key for key in keys if key in table]
        if len(present) > 1:
            raise self.fail(f"{where}.{present[1]}", f"give only one of {', '.join(keys)}")
        return (present[0], table[present[0]]) if present else None


def _link(reader: _Reader, value: Any, where: str, known: Topology | None, name: str) -> Link:
    try:
        if isinstance(value, str):
            return parse_link_spec(value, known)
        table = reader.check_keys(value, _LINK_KEYS, where)
        alpha = reader.one(table, where, "alpha", "alpha_s")
        rate = reader.one(table, where, "bw", "bw_bytes_per_s", "beta", "beta_s_per_byte")
        if alpha is None or rate is None:
            raise reader.fail(where, "a link needs alpha and one of bw or beta")
        fields = {"alpha": alpha[1], "bw" if rate[0].startswith("bw") else "beta": rate[1]}
        for keys in _CURVE_KEYS:
            found = reader.one(table, where, *keys)
            if found is not None:
                fields[keys[0]] = found[1]
        if "bus_efficiency" in table:
            fields["bus_efficiency"] = table["bus_efficiency"]
        return link_from_fields(fields, name=str(table.get("name", name)))
    except TopologyFileError:
        raise
    except CostModelError as exc:
        raise reader.fail(where, str(exc)) from None


def _quantity(reader: _Reader, table: dict[str, Any], where: str, keys: tuple[str, str],
              parse: Any, fallback: Any) -> Any:
    found = reader.one(table, where, *keys)
    if found is None:
        if fallback is None:
            raise reader.fail(f"{where}.{keys[0]}", "is required (no base preset to inherit)")
        return fallback
    key, value = found
    try:
        return parse(value) if key == keys[0] else value
    except CostModelError as exc:
        raise reader.fail(f"{where}.{key}", str(exc)) from None


def _device(reader: _Reader, table: Any, base: DeviceSpec | None) -> DeviceSpec:
    table = reader.check_keys(table, _DEVICE_KEYS, "device")
    peaks_found = reader.one(table, "device", "peak_flops_per_s", "peak_flops")
    peaks = dict(base.peak_flops_per_s) if base else {}
    if peaks_found is not None:
        peaks.update(reader.check_keys(peaks_found[1], tuple(peaks_found[1]) if isinstance(
            peaks_found[1], dict) else (), f"device.{peaks_found[0]}"))
    name = table.get("name", base.name if base else None)
    if name is None:
        raise reader.fail("device.name", "is required (no base preset to inherit)")
    try:
        return DeviceSpec(
            name=str(name), peak_flops_per_s=peaks,
            hbm_bytes=_quantity(reader, table, "device", ("hbm", "hbm_bytes"), parse_bytes,
                                base.hbm_bytes if base else None),
            hbm_bw_bytes_per_s=_quantity(reader, table, "device", ("hbm_bw",
                                         "hbm_bw_bytes_per_s"), parse_bandwidth,
                                         base.hbm_bw_bytes_per_s if base else None),
            efficiency=table.get("efficiency", base.efficiency if base else 1.0),
            min_kernel_s=_quantity(reader, table, "device", ("min_kernel", "min_kernel_s"),
                                   parse_duration, base.min_kernel_s if base else 0.0),
            kernels=_kernels(reader, table.get("kernels"), base.kernels if base else None))
    except TopologyFileError:
        raise
    except CostModelError as exc:
        raise reader.fail("device", str(exc)) from None


def _kernels(reader: _Reader, value: Any, base: KernelParams | None) -> KernelParams | None:
    """``[device.kernels]`` merged over the base's kernel parameters (module docstring)."""
    if value is None:
        return base
    if value == "none":
        return None
    table = reader.check_keys(value, _KERNEL_KEYS, "device.kernels")
    fields: dict[str, Any] = {}
    if base is not None:
        fields = {name: getattr(base, name) for name in base.__dataclass_fields__}
    for key in _KERNEL_KEYS[:6]:
        if key in table:
            fields[key] = table[key]
    launch = reader.one(table, "device.kernels", "launch", "launch_s")
    if launch is not None:
        try:
            fields["launch_s"] = parse_duration(launch[1]) if launch[0] == "launch" else \
                launch[1]
        except CostModelError as exc:
            raise reader.fail(f"device.kernels.{launch[0]}", str(exc)) from None
    if "attention" in table:
        fields["attention"] = _attention(reader, table["attention"])
    if "sm_count" not in fields:
        raise reader.fail("device.kernels.sm_count", "is required (the base has no kernel "
                                                     "parameters to inherit)")
    try:
        return KernelParams(**fields)
    except CostModelError as exc:
        field = getattr(exc, "field", "") or ""
        raise reader.fail(f"device.kernels.{field.split()[0]}" if field else "device.kernels",
                          str(exc)) from None


def _attention(reader: _Reader, items: Any) -> tuple[AttentionRate, ...]:
    if not isinstance(items, list):
        raise reader.fail("device.kernels.attention", "must be an array of tables "
                                                      "{pass, causal, head_dim, seq, tflops}")
    rows = []
    for index, item in enumerate(items):
        where = f"device.kernels.attention[{index}]"
        table = reader.check_keys(item, _ATTENTION_KEYS, where)
        missing = [key for key in _ATTENTION_KEYS if key not in table]
        if missing:
            raise reader.fail(where, f"missing {', '.join(missing)}")
        try:
            rows.append(AttentionRate(pass_=table["pass"], causal=table["causal"],
                                      head_dim=table["head_dim"], seq=table["seq"],
                                      tflops=table["tflops"]))
        except CostModelError as exc:
            raise reader.fail(where, str(exc)) from None
    return tuple(rows)


def _levels(reader: _Reader, items: Any, known: Topology | None) -> tuple[TopologyLevel, ...]:
    if not isinstance(items, list) or not items:
        raise reader.fail("levels", "must be a non-empty array of tables ([[levels]])")
    levels = []
    for index, item in enumerate(items):
        where = f"levels[{index}]"
        table = reader.check_keys(item, _LEVEL_KEYS, where)
        if "name" not in table or "link" not in table:
            raise reader.fail(where, "a level needs name and link (and devices unless it is "
                                     "the outermost)")
        link = _link(reader, table["link"], f"{where}.link", known, "")
        try:
            levels.append(TopologyLevel(name=str(table["name"]), devices=table.get("devices"),
                                        link=link))
        except CostModelError as exc:
            raise reader.fail(f"{where}.devices", str(exc)) from None
    return tuple(levels)


def _links(reader: _Reader, table: Any, where: str, known: Topology | None,
           named: bool) -> dict[str, Link]:
    table = reader.check_keys(table, tuple(table) if isinstance(table, dict) else (), where)
    return {str(key): _link(reader, value, f"{where}.{key}", known, str(key) if named else "")
            for key, value in table.items()}


def loads_topology(text: str, source: str = "<string>") -> Topology:
    """Parse topology TOML ``text``; ``source`` names it in errors.

    Raises:
        TopologyFileError: TOML syntax, unknown or bad key, unknown base preset.
    """
    reader = _Reader(source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise reader.fail("", f"not valid TOML: {exc}") from None
    reader.check_keys(data, _TOP_KEYS, "")
    if data.get("format", FORMAT) != FORMAT:
        raise reader.fail("format", f"must be {FORMAT!r}, got {data['format']!r}")
    base = None
    if "base" in data:
        try:
            base = get_preset(str(data["base"]))
        except CostModelError as exc:
            raise reader.fail("base", str(exc)) from None
    name = data.get("name", base.name if base else None)
    if name is None:
        raise reader.fail("name", "is required when there is no base preset")
    device = _device(reader, data.get("device", {}), base.device if base else None)
    named = dict(base.named_links) if base else {}
    scratch = _scratch(base, named)
    named.update(_links(reader, data.get("links", {}), "links", scratch, True))
    scratch = _scratch(base, named)
    levels = (_levels(reader, data["levels"], scratch) if "levels" in data
              else base.levels if base else None)
    if levels is None:
        raise reader.fail("levels", "is required when there is no base preset")
    axes = dict(base.axis_links) if base else {}
    try:
        topology = Topology(name=str(name), device=device, levels=levels, axis_links=axes,
                            named_links=named)
    except CostModelError as exc:
        raise reader.fail("levels", str(exc)) from None
    axes.update(_links(reader, data.get("axes", {}), "axes", topology, False))
    return dataclasses.replace(topology, axis_links=axes)


def _scratch(base: Topology | None, named: dict[str, Link]) -> Topology:
    """A throwaway topology holding the links known so far, for name lookups."""
    if base is None:
        placeholder = TopologyLevel(name="_", devices=None, link=Link(0.0, 0.0))
        return Topology(name="_", device=_PLACEHOLDER_DEVICE, levels=(placeholder,),
                        named_links=named)
    return Topology(name="_", device=base.device, levels=base.levels, named_links=named)


_PLACEHOLDER_DEVICE = DeviceSpec(name="_", peak_flops_per_s={"f32": 1.0}, hbm_bytes=1,
                                 hbm_bw_bytes_per_s=1.0)


def load_topology(path: str | os.PathLike[str]) -> Topology:
    """Load a TOML topology file (schema in the module docstring).

    Raises:
        TopologyFileError: unreadable file, bad TOML, unknown or bad key (file and key named).
    """
    source = os.fspath(path)
    try:
        with open(source, "rb") as handle:
            raw = handle.read()
    except OSError as exc:
        raise TopologyFileError(source, "", f"cannot read the file: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise TopologyFileError(source, "", "the file is not UTF-8 text") from None
    return loads_topology(text, source)


# --- dumping -------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    number = float(value)
    return "inf" if math.isinf(number) else repr(number)


def _link_inline(link: Link) -> str:
    curve = "".join(f", {key} = {_value(value)}" for key, value in link.curve_fields().items()
                    if not link.is_alpha_beta)
    return (f"{{ name = {_value(link.name)}, alpha_s = {_value(link.alpha_s)}, "
            f"beta_s_per_byte = {_value(link.beta_s_per_byte)}{curve} }}")


def _link_table(title: str, links: Mapping[str, Link]) -> list[str]:
    if not links:
        return []
    return ["", f"[{title}]", *(f"{_key(k)} = {_link_inline(v)}" for k, v in links.items())]


def _kernel_lines(kernels: KernelParams | None) -> list[str]:
    if kernels is None:
        return []
    lines = ["", "[device.kernels]", f"sm_count = {kernels.sm_count}",
             f"gemm_tile = [{kernels.gemm_tile[0]}, {kernels.gemm_tile[1]}]",
             f"gemm_tile_k = {kernels.gemm_tile_k}"]
    lines += [f"{name} = {_value(getattr(kernels, name))}" for name in
              ("gemm_efficiency", "gemm_k_overhead", "hbm_efficiency", "launch_s")]
    rows = [f"  {{ pass = {_value(row.pass_.value)}, causal = {_value(row.causal)}, "
            f"head_dim = {row.head_dim}, seq = {row.seq}, tflops = {_value(row.tflops)} }},"
            for row in kernels.attention]
    return [*lines, "attention = [", *rows, "]"]


def dump_topology(topology: Topology) -> str:
    """The fully explicit TOML text of ``topology`` (no ``base``), loadable back exactly.

    Example:
        >>> from costmodel import get_preset
        >>> t = get_preset("tpu-v5e")
        >>> loads_topology(dump_topology(t)) == t
        True
    """
    device = topology.device
    lines = [f"format = {_value(FORMAT)}", f"name = {_value(topology.name)}", "", "[device]",
             f"name = {_value(device.name)}", f"hbm_bytes = {_value(device.hbm_bytes)}",
             f"hbm_bw_bytes_per_s = {_value(device.hbm_bw_bytes_per_s)}",
             f"efficiency = {_value(device.efficiency)}",
             f"min_kernel_s = {_value(device.min_kernel_s)}", "", "[device.peak_flops_per_s]"]
    lines += [f"{_key(k)} = {_value(v)}" for k, v in device.peak_flops_per_s.items()]
    lines += _kernel_lines(device.kernels)
    for level in topology.levels:
        lines += ["", "[[levels]]", f"name = {_value(level.name)}"]
        if level.devices is not None:
            lines.append(f"devices = {level.devices}")
        lines.append(f"link = {_link_inline(level.link)}")
    lines += _link_table("links", topology.named_links)
    lines += _link_table("axes", topology.axis_links)
    return "\n".join(lines) + "\n"
