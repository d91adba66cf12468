"""``--link AXIS=SPEC`` specs → :class:`Link`: a link name, or explicit alpha and bandwidth.

Why: users override an axis's link on the command line and in topology files with one
grammar, parsed strictly here so that a typo is an error naming the spec, never a silent
default. Accepted forms (a contract):

- a name: the topology's own link of that name (its levels' links, then ``named_links``),
  else the standard table ``nvlink ib pcie ici ethernet`` (see :mod:`costmodel.presets`);
- ``alpha:A,bw:B`` or ``alpha:A,beta:C``: A a duration (``5us``, ``5e-6``), B a bandwidth
  (``25GB/s``, ``400Gb/s``, ``25e9``), C seconds per byte; ``=`` may replace ``:``;
  optionally ``launch:D``, ``pipeline:D`` (durations) and ``bus_efficiency:F`` (a fraction),
  the measured-curve terms of :mod:`costmodel.measured` (absent: a pure alpha-beta link).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from costmodel.errors import LinkSpecError, UnitError
from costmodel.link import Link, Topology
from costmodel.presets import STANDARD_LINKS
from costmodel.units import parse_bandwidth, parse_duration

logger = logging.getLogger(__name__)

_KEYS = ("alpha", "bw", "beta", "launch", "pipeline", "bus_efficiency")

ACCEPTED = ("a link name ({names}), or 'alpha:DURATION,bw:BANDWIDTH' "
            "(e.g. alpha:5us,bw:25GB/s) or 'alpha:SECONDS,beta:SECONDS_PER_BYTE', optionally "
            "with launch:DURATION, pipeline:DURATION, bus_efficiency:FRACTION")


def known_link_names(topology: Topology | None = None) -> tuple[str, ...]:
    """Names :func:`parse_link_spec` resolves for ``topology``, in lookup order."""
    names = dict.fromkeys(topology.links_by_name() if topology is not None else ())
    names.update(dict.fromkeys(STANDARD_LINKS))
    return tuple(names)


def _fail(spec: str, why: str, topology: Topology | None) -> LinkSpecError:
    accepted = ACCEPTED.format(names=", ".join(known_link_names(topology)))
    return LinkSpecError(f"bad link spec {spec!r}: {why}; accepted: {accepted}", spec=spec)


def _fields(spec: str, topology: Topology | None) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = part.replace("=", ":", 1).partition(":")
        key, value = key.strip().lower(), value.strip()
        if not sep or not value:
            raise _fail(spec, f"{part.strip()!r} is not KEY:VALUE", topology)
        if key not in _KEYS:
            raise _fail(spec, f"unknown key {key!r} (keys: {', '.join(_KEYS)})", topology)
        if key in fields:
            raise _fail(spec, f"key {key!r} given twice", topology)
        fields[key] = value
    return fields


def link_from_fields(fields: Mapping[str, str | float], *, name: str = "") -> Link:
    """A link from ``alpha`` plus ``bw`` or ``beta`` (numbers or unit strings); callers check
    that exactly one of ``bw``/``beta`` is present. ``beta`` is seconds per byte. Optional
    ``launch``, ``pipeline`` (durations) and ``bus_efficiency`` set the measured-curve terms.

    Raises:
        UnitError: a value does not parse.
    """
    alpha_s = parse_duration(fields["alpha"])
    curve: dict[str, float] = {}
    if "launch" in fields:
        curve["launch_s"] = parse_duration(fields["launch"])
    if "pipeline" in fields:
        curve["pipeline_s"] = parse_duration(fields["pipeline"])
    if "bus_efficiency" in fields:
        curve["bus_efficiency"] = _fraction(fields["bus_efficiency"])
    if "bw" in fields:
        return Link.from_bandwidth(alpha_s, parse_bandwidth(fields["bw"]), name, **curve)
    return Link(alpha_s, parse_duration(fields["beta"]), name, **curve)


def _fraction(value: str | float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        message = f"bus_efficiency {value!r} is not a number in (0, 1]"
        raise UnitError(message, text=str(value), quantity="fraction") from None


def parse_link_spec(spec: str, topology: Topology | None = None) -> Link:
    """Turn ``spec`` into a :class:`Link` (see the module docstring for the grammar).

    Raises:
        LinkSpecError: unknown name, malformed or incomplete spec, bad unit.

    Example:
        >>> parse_link_spec("alpha:5us,bw:25GB/s")
        Link(alpha_s=5e-06, beta_s_per_byte=4e-11, name='')
        >>> parse_link_spec("alpha:1,beta:1")
        Link(alpha_s=1.0, beta_s_per_byte=1.0, name='')
    """
    text = str(spec).strip()
    if not text:
        raise _fail(text, "it is empty", topology)
    if ":" not in text and "=" not in text:
        found = (topology.links_by_name() if topology is not None else {}).get(text)
        found = found or STANDARD_LINKS.get(text.lower())
        if found is None:
            raise _fail(text, f"no link is named {text!r}", topology)
        return found
    fields = _fields(text, topology)
    if "alpha" not in fields or ("bw" in fields) == ("beta" in fields):
        raise _fail(text, "give alpha and exactly one of bw or beta", topology)
    try:
        return link_from_fields(dict(fields))
    except UnitError as exc:
        raise _fail(text, str(exc), topology) from None
