"""Human quantities in, SI numbers out: bytes, durations and bandwidths.

Why: topology files, ``--memory 80GiB`` and ``--link dp=alpha:5us,bw:400Gb/s`` all need one
strict parser that rejects anything ambiguous with a message naming the text and the accepted
units. Conventions (a contract):

- bytes: ``B``; decimal ``KB MB GB TB PB`` (powers of 1000); binary ``KiB MiB GiB TiB PiB``
  (powers of 1024). Byte units are case-insensitive (memory is never counted in bits).
- durations: seconds, with ``s ms us µs ns``; a bare number is seconds.
- bandwidths: bytes per second. ``B/s KB/s MB/s GB/s TB/s`` (and ``KiB/s``...) are bytes;
  lower-case ``b`` (``Gb/s``, ``Gbps``) is **bits** and is divided by 8. A bare number is B/s.
"""

from __future__ import annotations

import logging
import math
import re

from costmodel.errors import UnitError

logger = logging.getLogger(__name__)

_NUMBER = r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)"
_QUANTITY = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-zµ/]*)\s*$")

_DECIMAL = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_BINARY = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
_BYTE_UNITS = {**{f"{p}b": f for p, f in _DECIMAL.items()},
               **{f"{p}b": f for p, f in _BINARY.items()}, "": 1}
# Divisors, not factors: 5 / 1e6 == 5e-06 exactly while 5 * 1e-6 is not.
_DURATION_DIVISORS = {"": 1.0, "s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "ns": 1e9}

BYTE_UNITS_HELP = "B, KB, MB, GB, TB, PB (decimal) or KiB, MiB, GiB, TiB, PiB (binary)"
DURATION_UNITS_HELP = "s, ms, us (µs), ns, or a bare number of seconds"
BANDWIDTH_UNITS_HELP = ("B/s, KB/s, MB/s, GB/s, TB/s, KiB/s.. (bytes) or b/s, Kb/s, Mb/s, "
                        "Gb/s, Tb/s, Gbps (bits), or a bare number of bytes/s")


def _split(text: str | float | int, quantity: str, accepted: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise UnitError(f"{quantity} {text!r} is a boolean; give a number or a string with "
                        f"units ({accepted})", text=str(text), quantity=quantity)
    if isinstance(text, int | float):
        return float(text), ""
    match = _QUANTITY.match(str(text))
    if match is None:
        message = f"cannot parse {quantity} {text!r}; expected a number with units {accepted}"
        raise UnitError(message, text=str(text), quantity=quantity)
    return float(match.group(1)), match.group(2)


def _check_finite(value: float, text: object, quantity: str) -> float:
    if not math.isfinite(value) or value < 0:
        message = f"{quantity} {text!r} must be a finite non-negative number"
        raise UnitError(message, text=str(text), quantity=quantity)
    return value


def parse_bytes(text: str | int | float) -> int:
    """Parse a byte count such as ``"80GiB"``, ``"1.5TB"`` or ``4096``.

    Raises:
        UnitError: unknown unit, negative or non-finite value.

    Example:
        >>> parse_bytes("80GiB"), parse_bytes("1.5TB"), parse_bytes("512")
        (85899345920, 1500000000000, 512)
    """
    value, unit = _split(text, "byte count", BYTE_UNITS_HELP)
    factor = _BYTE_UNITS.get(unit.lower())
    if factor is None:
        message = f"unknown byte unit {unit!r} in {text!r}; use {BYTE_UNITS_HELP}"
        raise UnitError(message, text=str(text), quantity="bytes")
    return round(_check_finite(value * factor, text, "byte count"))


def format_bytes(nbytes: float) -> str:
    """Binary-unit human form, the inverse of :func:`parse_bytes` up to rounding.

    Example:
        >>> format_bytes(80 * 2**30), format_bytes(1536), format_bytes(12)
        ('80 GiB', '1.5 KiB', '12 B')
    """
    if not math.isfinite(nbytes):
        return f"{nbytes} B"
    value, unit = float(nbytes), "B"
    for name in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(value) < 1024:
            break
        value, unit = value / 1024, name
    digits = f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{digits} {unit}"


def parse_duration(text: str | int | float) -> float:
    """Parse a duration in seconds: ``"5us"``, ``"1.2ms"``, ``"3e-6"``, ``2``.

    Raises:
        UnitError: unknown unit, negative or non-finite value.

    Example:
        >>> parse_duration("5us"), parse_duration("1.2ms"), parse_duration("3e-6")
        (5e-06, 0.0012, 3e-06)
    """
    value, unit = _split(text, "duration", DURATION_UNITS_HELP)
    divisor = _DURATION_DIVISORS.get(unit)
    if divisor is None:
        message = f"unknown duration unit {unit!r} in {text!r}; use {DURATION_UNITS_HELP}"
        raise UnitError(message, text=str(text), quantity="duration")
    return _check_finite(value / divisor, text, "duration")


def _bandwidth_factor(unit: str) -> float | None:
    if unit == "":
        return 1.0
    per_second = unit.removesuffix("/s")
    if per_second == unit:
        if not unit.endswith("ps"):
            return None
        per_second = unit[:-2]  # "Gbps" -> "Gb", "GBps" -> "GB"
    if per_second[-1:] not in ("B", "b"):
        return None
    bits = per_second[-1] == "b"
    prefix = per_second[:-1].lower()
    scale = _DECIMAL.get(prefix) or _BINARY.get(prefix)
    if scale is None:
        return None
    return scale / 8 if bits else float(scale)


def parse_bandwidth(text: str | int | float) -> float:
    """Parse a bandwidth in bytes per second; lower-case ``b`` means bits.

    Raises:
        UnitError: unknown unit, zero, negative or non-finite value.

    Example:
        >>> parse_bandwidth("25GB/s"), parse_bandwidth("400Gb/s"), parse_bandwidth("25e9")
        (25000000000.0, 50000000000.0, 25000000000.0)
    """
    value, unit = _split(text, "bandwidth", BANDWIDTH_UNITS_HELP)
    factor = _bandwidth_factor(unit)
    if factor is None:
        message = f"unknown bandwidth unit {unit!r} in {text!r}; use {BANDWIDTH_UNITS_HELP}"
        raise UnitError(message, text=str(text), quantity="bandwidth")
    result = _check_finite(value * factor, text, "bandwidth")
    if result == 0:
        message = f"bandwidth {text!r} must be positive"
        raise UnitError(message, text=str(text), quantity="bandwidth")
    return result
