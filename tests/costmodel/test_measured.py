"""The size-aware collective model against hand-written closed forms.

Expected values are written from the formulas (nccl-tests' bus factors, NCCL's hop counts,
the optimally segmented pipeline), not read back from the code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from costmodel import CollectiveKind, Link, collective_seconds
from costmodel.measured import bus_factor, curve_terms

K = CollectiveKind
LAUNCH, ALPHA, PIPE, EFF, BETA = 20e-6, 1e-6, 8e-6, 0.8, 1 / 300e9
NV = Link(ALPHA, BETA, "nvlink", launch_s=LAUNCH, pipeline_s=PIPE, bus_efficiency=EFF)
NET = Link(3e-6, 1 / 25e9, "ib", launch_s=30e-6, pipeline_s=2e-6, bus_efficiency=0.9)
SIZES = [8.0, 1e3, 1e6, 3e8, 8e9]


def _pipe(tau: float, seconds_at_peak: float) -> float:
    return (math.sqrt(tau) + math.sqrt(seconds_at_peak)) ** 2


@pytest.mark.parametrize("m", SIZES)
@pytest.mark.parametrize(("kind", "hops", "bus"), [
    (K.ALL_REDUCE, 2 * 7, 2 * 7 / 8), (K.ALL_GATHER, 7, 7 / 8), (K.REDUCE_SCATTER, 7, 7 / 8),
    (K.ALL_TO_ALL, 7, 7 / 8), (K.BROADCAST, 7, 1.0), (K.REDUCE, 7, 1.0),
    (K.COLLECTIVE_PERMUTE, 1, 1.0)])
def test_single_level_closed_forms(kind, hops, bus, m) -> None:
    expected = LAUNCH + hops * ALPHA + _pipe(PIPE, bus * m * BETA / EFF)
    assert collective_seconds(kind, m, ((8, NV),)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("nodes", "tree_hops"), [(2, 1), (4, 2), (16, 4)])
def test_two_level_all_reduce_takes_the_tree_latency_and_the_slowest_level(nodes,
                                                                           tree_hops) -> None:
    m = 1e8
    ring = (8 * nodes - nodes) * ALPHA + (nodes - 1) * NET.alpha_s
    tree = 7 * ALPHA + tree_hops * NET.alpha_s
    intra = 2 * 7 / 8 * m * BETA / EFF
    inter = 2 * (nodes - 1) / nodes * (m / 8) * NET.beta_s_per_byte / NET.bus_efficiency
    expected = max(LAUNCH, NET.launch_s) + 2 * min(ring, tree) + _pipe(
        PIPE + NET.pipeline_s, max(intra, inter))
    group = ((8, NV), (nodes, NET))
    assert collective_seconds(K.ALL_REDUCE, m, group) == pytest.approx(expected, rel=1e-12)


def test_two_level_all_to_all_sends_the_off_node_share_over_the_network() -> None:
    m = 1e9  # 16 ranks on 2 nodes: 8/16 of the buffer leaves the node, 7/16 stays on NVLink
    hops = (16 - 2) * ALPHA + 1 * NET.alpha_s
    at_peak = max(7 / 16 * m * BETA / EFF, 8 / 16 * m * NET.beta_s_per_byte / 0.9)
    expected = 30e-6 + hops + _pipe(PIPE + NET.pipeline_s, at_peak)
    assert collective_seconds(K.ALL_TO_ALL, m, ((8, NV), (2, NET))) == pytest.approx(expected)


def test_pipeline_term_is_the_optimally_segmented_pipeline() -> None:
    depth, per_segment = 16, 0.5e-6          # τ = depth × per-segment overhead
    c = 2e-11
    for m in (1e3, 1e6, 1e9):
        best = minimize_scalar(lambda log_s, m=m: math.log(
            (depth + m / math.exp(log_s)) * (per_segment + c * math.exp(log_s))),
            bounds=(math.log(1e-3), math.log(1e12)), method="bounded",
            options={"xatol": 1e-10})
        brute = math.exp(best.fun)
        assert _pipe(depth * per_segment, c * m) == pytest.approx(brute, rel=1e-6)


@pytest.mark.parametrize("kind", list(K))
def test_bus_bandwidth_of_huge_messages_is_the_level_ceiling_for_every_kind(kind) -> None:
    """One all-reduce table calibrates all: at large sizes every collective's nccl-tests busbw
    (factor × size / time) tends to the same bus_efficiency / beta."""
    m = 1e15
    seconds = collective_seconds(kind, m, ((8, NV),))
    assert bus_factor(kind, 8) * m / seconds == pytest.approx(EFF / BETA, rel=1e-3)


def test_vectorised_over_byte_arrays_and_zero_is_free() -> None:
    group = ((8, NV), (4, NET))
    nbytes = np.array([[0.0, 8.0], [1e6, 1e9]])
    seconds = collective_seconds(K.ALL_REDUCE, nbytes, group)
    expected = [[collective_seconds(K.ALL_REDUCE, float(v), group) for v in row]
                for row in nbytes]
    assert seconds.shape == (2, 2) and np.array_equal(seconds, np.array(expected))
    assert seconds[0, 0] == 0.0 and collective_seconds(K.ALL_REDUCE, 8.0, ((1, NV),)) == 0.0
    assert type(collective_seconds(K.ALL_REDUCE, 8.0, group)) is float


def test_plain_links_keep_the_textbook_price() -> None:
    """A Link built without the new fields prices exactly as pure alpha-beta (ring/Rabenseifner
    all-reduce over 8: min(14α, 6α) + 2·7/8·m·β)."""
    plain = Link(ALPHA, BETA, "nvlink")
    assert plain.is_alpha_beta
    m = 1e6
    expected = 6 * ALPHA + 2 * 7 / 8 * m * BETA
    assert collective_seconds(K.ALL_REDUCE, m, ((8, plain),)) == pytest.approx(expected, 1e-12)


def test_any_curve_field_switches_the_group_to_the_measured_model() -> None:
    only_efficiency = Link(ALPHA, BETA, bus_efficiency=0.5)
    expected = 14 * ALPHA + 2 * 7 / 8 * 1e6 * BETA / 0.5
    assert collective_seconds(K.ALL_REDUCE, 1e6, ((8, only_efficiency),)) == \
        pytest.approx(expected, rel=1e-12)


def test_curve_terms_are_cached_per_group() -> None:
    assert curve_terms(K.ALL_GATHER, ((8, NV),)) is curve_terms(K.ALL_GATHER, ((8, NV),))


@pytest.mark.parametrize(("field", "value"), [("launch_s", -1.0), ("pipeline_s", math.nan),
                                              ("bus_efficiency", 0.0),
                                              ("bus_efficiency", 1.5)])
def test_curve_fields_are_validated(field, value) -> None:
    with pytest.raises(ValueError, match=field):
        Link(1e-6, 1e-9, **{field: value})
