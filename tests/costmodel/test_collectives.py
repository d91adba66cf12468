"""Collective formulas against hand-computed closed forms, their limits, and properties.

Oracles: arithmetic done by hand in the comments (Thakur, Rabenseifner & Gropp 2005 formulas
with concrete numbers), never values read back from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel import (
    ALGORITHMS,
    CollectiveKind,
    CostModelError,
    Link,
    binomial_tree_broadcast,
    binomial_tree_reduce,
    collective_seconds,
    flat_seconds,
    hierarchical_seconds,
    pairwise_all_to_all,
    point_to_point_permute,
    rabenseifner_all_reduce,
    recursive_doubling_all_gather,
    recursive_doubling_all_reduce,
    recursive_halving_reduce_scatter,
    reduce_scatter_gather_reduce,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    scatter_allgather_broadcast,
    single_level_seconds,
)

K = CollectiveKind
UNIT = Link(1.0, 0.01, "unit")          # α = 1, β = 0.01: m = 1000 gives mβ = 10
NV = Link(1e-6, 1 / 450e9, "nvlink")
IB = Link(5e-6, 1 / 50e9, "ib")
TWO_LEVEL = ((8, NV), (4, IB))         # 32 ranks, 8 per node


# (algorithm, n, expected seconds for m = 1000 on UNIT), each worked by hand.
SINGLE_LEVEL_CASES = [
    (ring_all_reduce, 4, 2 * 3 * 1 + 2 * 3 / 4 * 10),                   # 6 + 15 = 21
    (recursive_doubling_all_reduce, 4, 2 * (1 + 10)),                   # 22
    (rabenseifner_all_reduce, 4, 2 * 2 * 1 + 2 * 3 / 4 * 10),           # 4 + 15 = 19
    (ring_all_gather, 4, 3 * 1 + 3 / 4 * 10),                           # 10.5
    (recursive_doubling_all_gather, 4, 2 * 1 + 3 / 4 * 10),             # 9.5
    (ring_reduce_scatter, 4, 3 * 1 + 3 / 4 * 10),                       # 10.5
    (recursive_halving_reduce_scatter, 4, 2 * 1 + 3 / 4 * 10),          # 9.5
    (pairwise_all_to_all, 4, 3 * 1 + 3 / 4 * 10),                       # 10.5
    (binomial_tree_broadcast, 4, 2 * (1 + 10)),                         # 22
    (binomial_tree_broadcast, 5, 3 * (1 + 10)),                         # ⌈log2 5⌉ = 3: 33
    (scatter_allgather_broadcast, 4, (2 + 3) * 1 + 2 * 3 / 4 * 10),     # 5 + 15 = 20
    (scatter_allgather_broadcast, 5, (3 + 4) * 1 + 2 * 4 / 5 * 10),     # 7 + 16 = 23
    (binomial_tree_reduce, 8, 3 * (1 + 10)),                            # 33
    (reduce_scatter_gather_reduce, 8, (3 + 7) * 1 + 2 * 7 / 8 * 10),    # 10 + 17.5
    (point_to_point_permute, 16, 1 + 10),                               # 11
    (ring_all_reduce, 6, 2 * 5 * 1 + 2 * 5 / 6 * 10),                   # 10 + 16.67
]


@pytest.mark.parametrize(("algorithm", "n", "expected"), SINGLE_LEVEL_CASES,
                         ids=[f"{a.__name__}-n{n}" for a, n, _ in SINGLE_LEVEL_CASES])
def test_single_level_closed_forms(algorithm, n, expected) -> None:
    assert algorithm(n, 1000.0, UNIT) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("algorithm", [recursive_doubling_all_reduce, rabenseifner_all_reduce,
                                       recursive_doubling_all_gather,
                                       recursive_halving_reduce_scatter],
                         ids=lambda a: a.__name__)
def test_power_of_two_algorithms_are_unavailable_otherwise(algorithm) -> None:
    assert math.isinf(algorithm(6, 1000.0, UNIT))
    assert math.isfinite(algorithm(8, 1000.0, UNIT))


@pytest.mark.parametrize(("kind", "n", "m", "expected"), [
    (K.ALL_REDUCE, 4, 1000.0, 19.0),                  # Rabenseifner beats ring 21, doubling 22
    (K.ALL_REDUCE, 6, 1000.0, 10 + 2 * 5 / 6 * 10),   # only the ring exists for n = 6
    (K.ALL_REDUCE, 8, 1.0, 3 * (1 + 0.01)),           # tiny m: doubling 3.03 < Rab. 6.0175
    (K.ALL_GATHER, 4, 1000.0, 9.5),
    (K.REDUCE_SCATTER, 4, 1000.0, 9.5),
    (K.ALL_TO_ALL, 4, 1000.0, 10.5),
    (K.BROADCAST, 4, 1000.0, 20.0),                   # van de Geijn 20 < binomial 22
    (K.BROADCAST, 4, 1.0, 2 * (1 + 0.01)),            # tiny m: binomial 2.02 < 5.015
    (K.REDUCE, 4, 1000.0, 20.0),
    (K.COLLECTIVE_PERMUTE, 4, 1000.0, 11.0),
], ids=["ar-n4", "ar-n6-ring-only", "ar-tiny", "ag", "rs", "a2a", "bcast-large", "bcast-tiny",
        "reduce", "permute"])
def test_collective_seconds_takes_the_cheapest_algorithm(kind, n, m, expected) -> None:
    assert collective_seconds(kind, m, ((n, UNIT),)) == pytest.approx(expected, rel=1e-12)


def test_kind_values_are_the_csv_names() -> None:
    assert [k.value for k in CollectiveKind] == [
        "all_gather", "all_reduce", "reduce_scatter", "all_to_all", "broadcast", "reduce",
        "collective_permute"]
    assert collective_seconds("all_gather", 1000.0, ((4, UNIT),)) == pytest.approx(9.5)
    assert repr(CollectiveKind.ALL_GATHER) == "CollectiveKind.ALL_GATHER"


@pytest.mark.parametrize("kind", list(CollectiveKind), ids=lambda k: k.value)
@pytest.mark.parametrize("group", [(), ((1, UNIT),), ((1, NV), (1, IB))],
                         ids=["empty", "one", "ones"])
def test_group_of_one_rank_costs_zero(kind, group) -> None:
    assert collective_seconds(kind, 1e9, group) == 0.0


@pytest.mark.parametrize("kind", list(CollectiveKind), ids=lambda k: k.value)
def test_zero_bytes_costs_zero(kind) -> None:
    assert collective_seconds(kind, 0.0, TWO_LEVEL) == 0.0


# Bandwidth-only term per kind for n ranks (nccl-tests doc/PERFORMANCE.md busbw factors).
BANDWIDTH_FACTOR = {K.ALL_REDUCE: lambda n: 2 * (n - 1) / n, K.ALL_GATHER: lambda n: (n - 1) / n,
                    K.REDUCE_SCATTER: lambda n: (n - 1) / n, K.ALL_TO_ALL: lambda n: (n - 1) / n,
                    K.BROADCAST: lambda n: 2 * (n - 1) / n, K.REDUCE: lambda n: 2 * (n - 1) / n,
                    K.COLLECTIVE_PERMUTE: lambda n: 1.0}


@pytest.mark.parametrize("kind", list(CollectiveKind), ids=lambda k: k.value)
def test_large_messages_are_bandwidth_bound(kind) -> None:
    m = 1e15
    seconds = collective_seconds(kind, m, ((8, UNIT),))
    assert seconds / (BANDWIDTH_FACTOR[kind](8) * m * UNIT.beta_s_per_byte) == \
        pytest.approx(1.0, rel=1e-9)


@pytest.mark.parametrize(("kind", "steps"), [
    (K.ALL_REDUCE, 3), (K.ALL_GATHER, 3), (K.REDUCE_SCATTER, 3), (K.ALL_TO_ALL, 7),
    (K.BROADCAST, 3), (K.REDUCE, 3), (K.COLLECTIVE_PERMUTE, 1),
], ids=lambda v: getattr(v, "value", str(v)))
def test_small_messages_are_latency_bound(kind, steps) -> None:
    # m → 0 (but nonzero): the cheapest algorithm's latency steps for n = 8 (log2 8 = 3).
    assert collective_seconds(kind, 1e-12, ((8, UNIT),)) == pytest.approx(steps, rel=1e-9)


# --- hierarchical groups: NVLink 8 per node × 4 nodes on IB, m = 1 GB ------------------------

RS_IN = 3 * 1e-6 + 7 / 8 * 1e9 / 450e9            # recursive halving inside the node
AR_OUT = 2 * 2 * 5e-6 + 2 * 3 / 4 * 1.25e8 / 50e9  # Rabenseifner across 4 nodes on m/8
AG_OUT = 2 * 5e-6 + 3 / 4 * 1.25e8 / 50e9          # recursive doubling across 4 nodes on m/8
A2A_IN = 7 * 1e-6 + 7 / 8 * 1e9 / 450e9
A2A_OUT = 3 * 5e-6 + 3 / 4 * 1e9 / 50e9
BCAST_OUT = (2 + 3) * 5e-6 + 2 * 3 / 4 * 1e9 / 50e9    # van de Geijn across nodes on m
BCAST_IN = (3 + 7) * 1e-6 + 2 * 7 / 8 * 1e9 / 450e9    # van de Geijn inside on m

HIERARCHICAL_CASES = [
    (K.ALL_REDUCE, RS_IN + AR_OUT + RS_IN, 2 * 5 * 5e-6 + 2 * 31 / 32 * 1e9 / 50e9),
    (K.ALL_GATHER, AG_OUT + RS_IN, 5 * 5e-6 + 31 / 32 * 1e9 / 50e9),
    (K.REDUCE_SCATTER, RS_IN + AG_OUT, 5 * 5e-6 + 31 / 32 * 1e9 / 50e9),
    (K.ALL_TO_ALL, A2A_IN + A2A_OUT, 31 * 5e-6 + 31 / 32 * 1e9 / 50e9),
    (K.BROADCAST, BCAST_OUT + BCAST_IN, (5 + 31) * 5e-6 + 2 * 31 / 32 * 1e9 / 50e9),
    (K.REDUCE, BCAST_IN + BCAST_OUT, (5 + 31) * 5e-6 + 2 * 31 / 32 * 1e9 / 50e9),
]


@pytest.mark.parametrize(("kind", "hierarchical", "flat"), HIERARCHICAL_CASES,
                         ids=[c[0].value for c in HIERARCHICAL_CASES])
def test_two_level_closed_forms(kind, hierarchical, flat) -> None:
    assert hierarchical_seconds(kind, 1e9, TWO_LEVEL) == pytest.approx(hierarchical, rel=1e-12)
    assert flat_seconds(kind, 1e9, TWO_LEVEL) == pytest.approx(flat, rel=1e-12)
    assert hierarchical < flat
    assert collective_seconds(kind, 1e9, TWO_LEVEL) == pytest.approx(hierarchical, rel=1e-12)


def test_permute_over_levels_uses_the_slowest_link() -> None:
    assert collective_seconds(K.COLLECTIVE_PERMUTE, 1e9, TWO_LEVEL) == \
        pytest.approx(5e-6 + 1e9 / 50e9, rel=1e-12)


def test_flat_wins_when_levels_add_latency_only() -> None:
    # Two levels of 2 on α = 1, β = 0: hierarchical RS + AR + AG = 1 + 1 + 1 = 3 steps,
    # flat recursive doubling over 4 ranks = 2 steps.
    free = Link(1.0, 0.0)
    group = ((2, free), (2, free))
    assert hierarchical_seconds(K.ALL_REDUCE, 8.0, group) == 3.0
    assert collective_seconds(K.ALL_REDUCE, 8.0, group) == 2.0


def test_three_levels_recurse() -> None:
    # ((2,a),(2,b),(2,c)), all-gather of m = 8 bytes, α = 0: outer first on the smallest
    # message. c: 1/2·(8/4)·βc, b: 1/2·(8/2)·βb, a: 1/2·8·βa.
    a, b, c = Link(0.0, 1.0), Link(0.0, 10.0), Link(0.0, 100.0)
    expected = 0.5 * 2 * 100.0 + 0.5 * 4 * 10.0 + 0.5 * 8 * 1.0
    assert collective_seconds(K.ALL_GATHER, 8.0, ((2, a), (2, b), (2, c))) == expected


# --- properties ------------------------------------------------------------------------------

links = st.builds(Link, st.floats(0.0, 1e-3), st.floats(0.0, 1e-8))
sizes = st.integers(1, 64)
messages = st.floats(0.0, 1e10)


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(list(CollectiveKind)), n=sizes, m=messages, link=links)
def test_min_over_algorithms_is_no_more_than_each(kind, n, m, link) -> None:
    best = single_level_seconds(kind, n, m, link)
    for algorithm in ALGORITHMS[kind]:
        assert best <= algorithm(n, m, link)


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from([K.ALL_REDUCE, K.ALL_GATHER, K.REDUCE_SCATTER]),
       inner=st.sampled_from([2, 4, 8]), outer=st.integers(2, 16),
       beta_in=st.floats(1e-12, 1e-10), ratio=st.floats(2.0, 100.0))
def test_hierarchical_beats_flat_for_fast_inner_slow_outer(kind, inner, outer, beta_in,
                                                          ratio) -> None:
    # Bandwidth saved = m·(g−1)/g·(β_out − β_in) ≥ 1e9·½·1e-12 = 5e-4 s, far above the
    # ≤ 2·(8 + 16)·1e-6 s of extra latency steps.
    group = ((inner, Link(1e-6, beta_in)), (outer, Link(1e-6, beta_in * ratio)))
    assert hierarchical_seconds(kind, 1e9, group) <= flat_seconds(kind, 1e9, group)


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(list(CollectiveKind)), m=messages,
       group=st.lists(st.tuples(st.integers(1, 8), links), min_size=1, max_size=3))
def test_result_is_the_cheaper_schedule(kind, m, group) -> None:
    group = tuple(group)
    seconds = collective_seconds(kind, m, group)
    levels = tuple((n, link) for n, link in group if n > 1)
    if not levels or m == 0:
        assert seconds == 0.0
        return
    assert seconds <= flat_seconds(kind, m, levels) * (1 + 1e-12)
    assert seconds <= hierarchical_seconds(kind, m, levels) * (1 + 1e-12)


@pytest.mark.parametrize("kind", list(CollectiveKind), ids=lambda k: k.value)
@pytest.mark.parametrize("group", [((8, UNIT),), ((6, UNIT),), TWO_LEVEL,
                                   ((2, NV), (3, IB), (2, UNIT))],
                         ids=["n8", "n6", "two-level", "three-level"])
def test_vectorized_equals_scalar(kind, group) -> None:
    nbytes = np.array([[0.0, 1.0, 1e3], [1e6, 3.3e8, 1e12]])
    seconds = collective_seconds(kind, nbytes, group)
    assert isinstance(seconds, np.ndarray) and seconds.shape == nbytes.shape
    expected = [[collective_seconds(kind, float(v), group) for v in row] for row in nbytes]
    np.testing.assert_allclose(seconds, expected, rtol=1e-12, atol=0)


def test_scalar_in_scalar_out() -> None:
    assert type(collective_seconds(K.ALL_REDUCE, 1e6, TWO_LEVEL)) is float


@pytest.mark.parametrize(("nbytes", "group", "culprit"), [
    (-1.0, ((4, UNIT),), "-1.0"),
    (float("nan"), ((4, UNIT),), "nan"),
    (np.array([1.0, -2.0]), ((4, UNIT),), "array"),
    (1.0, ((0, UNIT),), "(0, Link"),
    (1.0, ((2.5, UNIT),), "2.5"),
    (1.0, ((4, "nvlink"),), "nvlink"),
], ids=["negative", "nan", "negative-array", "zero-size", "fractional-size", "not-a-link"])
def test_bad_inputs_raise(nbytes, group, culprit) -> None:
    with pytest.raises(CostModelError, match=None) as info:
        collective_seconds(K.ALL_GATHER, nbytes, group)
    assert culprit in str(info.value)
