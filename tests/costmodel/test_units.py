"""Byte, duration and bandwidth parsing: accepted forms, rejected forms, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel import UnitError, format_bytes, parse_bandwidth, parse_bytes, parse_duration


@pytest.mark.parametrize(("text", "expected"), [
    ("80GiB", 80 * 2**30), ("1.5TB", 1_500_000_000_000), ("512", 512), (4096, 4096),
    ("4 KB", 4000), ("1KiB", 1024), ("2MiB", 2 * 2**20), ("3MB", 3_000_000),
    ("1gb", 10**9), ("2TiB", 2 * 2**40), ("10B", 10), ("1e3", 1000), ("0.5KiB", 512),
], ids=lambda v: str(v))
def test_parse_bytes(text, expected) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["80 GX", "abc", "-5GB", "", "GB", "5 G B", "inf"],
                         ids=["unit", "word", "negative", "empty", "no-number", "space",
                              "inf"])
def test_parse_bytes_rejects(text) -> None:
    with pytest.raises(UnitError) as info:
        parse_bytes(text)
    assert repr(text) in str(info.value)


def test_unknown_unit_message_lists_accepted_units() -> None:
    with pytest.raises(UnitError, match=r"'GX'.*GiB"):
        parse_bytes("80GX")


@pytest.mark.parametrize(("nbytes", "text"), [
    (80 * 2**30, "80 GiB"), (1536, "1.5 KiB"), (12, "12 B"), (0, "0 B"),
    (3 * 2**40, "3 TiB"), (1023, "1023 B"),
], ids=lambda v: str(v))
def test_format_bytes(nbytes, text) -> None:
    assert format_bytes(nbytes) == text


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**55))
def test_format_then_parse_is_close(nbytes) -> None:
    # Two decimals of the binary unit: relative error ≤ 0.005 / 1 (value ≥ 1 in its unit).
    assert parse_bytes(format_bytes(nbytes)) == pytest.approx(nbytes, rel=5e-3, abs=1)


@pytest.mark.parametrize(("text", "expected"), [
    ("5us", 5e-6), ("5µs", 5e-6), ("1.2ms", 1.2e-3), ("3e-6", 3e-6), ("2s", 2.0),
    ("7ns", 7e-9), (0.25, 0.25), ("0", 0.0),
], ids=lambda v: str(v))
def test_parse_duration(text, expected) -> None:
    assert parse_duration(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["5 sec", "5h", "-1us", "fast", "1e400"])
def test_parse_duration_rejects(text) -> None:
    with pytest.raises(UnitError) as info:
        parse_duration(text)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(("text", "expected"), [
    ("25GB/s", 25e9), ("400Gb/s", 50e9), ("25e9", 25e9), ("100Gbps", 12.5e9),
    ("1GiB/s", 2**30), ("10MB/s", 1e7), ("12.5GBps", 12.5e9), (3e9, 3e9), ("8b/s", 1.0),
], ids=lambda v: str(v))
def test_parse_bandwidth(text, expected) -> None:
    assert parse_bandwidth(text) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("text", ["25GB", "5 furlongs/s", "0GB/s", "-1GB/s", "GB/s", "25Xb/s"])
def test_parse_bandwidth_rejects(text) -> None:
    with pytest.raises(UnitError) as info:
        parse_bandwidth(text)
    assert repr(text) in str(info.value)
