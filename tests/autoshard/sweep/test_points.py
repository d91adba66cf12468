"""Sweep points: mesh factorizations against brute force, axis names, ids, option parsing."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoshard.errors import UsageError
from autoshard.sweep.points import (
    Shape,
    SweepSpec,
    axis_names_for,
    enumerate_points,
    factorizations,
    parse_axes,
    parse_int_list,
    parse_link_variant,
)


def brute_force(devices: int, max_axes: int) -> set[tuple[int, ...]]:
    """Every tuple over 2..devices of 1..max_axes entries whose product is ``devices``."""
    return {sizes for count in range(1, max_axes + 1)
            for sizes in itertools.product(range(2, devices + 1), repeat=count)
            if math.prod(sizes) == devices}


@pytest.mark.parametrize(("devices", "count"), [
    (8, 4),    # 8 | 2x4 4x2 | 2x2x2
    (16, 7),   # 16 | 2x8 4x4 8x2 | 2x2x4 2x4x2 4x2x2
    (64, 16),  # 64 | 5 pairs | compositions of 6 into 3 parts: C(5,2) = 10
    (7, 1),    # a prime has only the 1-axis mesh
    (12, 8),   # 12 | 2x6 6x2 3x4 4x3 | 2x2x3 2x3x2 3x2x2
], ids=["8", "16", "64", "prime-7", "12"])
def test_factorization_counts_match_brute_force(devices: int, count: int) -> None:
    found = factorizations(devices)
    assert set(found) == brute_force(devices, 3)
    assert len(found) == len(set(found)) == count


def test_sixteen_devices_have_seven_meshes_in_rank_then_lexicographic_order() -> None:
    assert factorizations(16) == ((16,), (2, 8), (4, 4), (8, 2), (2, 2, 4), (2, 4, 2), (4, 2, 2))


@settings(max_examples=40, deadline=None)
@given(devices=st.integers(min_value=2, max_value=96), low=st.integers(1, 3),
       high=st.integers(1, 3))
def test_factorizations_are_exactly_the_brute_force_set(devices: int, low: int, high: int) -> None:
    low, high = min(low, high), max(low, high)
    expected = {s for s in brute_force(devices, high) if len(s) >= low}
    found = factorizations(devices, low, high)
    assert set(found) == expected and len(found) == len(expected)
    assert [len(s) for s in found] == sorted(len(s) for s in found)


@pytest.mark.parametrize(("count", "names", "expected"), [
    (1, ("dp", "fsdp", "tp"), ("dp",)),
    (2, ("dp", "fsdp", "tp"), ("dp", "tp")),
    (3, ("dp", "fsdp", "tp"), ("dp", "fsdp", "tp")),
    (2, ("x", "y"), ("x", "y")),
], ids=["1", "2", "3", "user"])
def test_axis_names_keep_the_first_name_outermost(count, names, expected) -> None:
    assert axis_names_for(count, names) == expected


def test_too_few_axis_names_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--axis-names"):
        SweepSpec(model="gpt2", devices=(8,), axis_names=("dp", "tp"))


def test_points_cross_shapes_topologies_links_and_meshes_with_unique_ids() -> None:
    spec = SweepSpec(model="gpt2", devices=(8, 16), batches=(4, 8), seqs=(128,),
                     topologies=("dgx-h100", "dgx-a100"), links=("default", "dp=ib"))
    points = enumerate_points(spec)
    assert len(points) == 2 * 2 * 2 * (4 + 7)
    ids = [p.point_id for p in points]
    assert len(set(ids)) == len(ids)
    assert ids[0] == "gpt2_infer_b4_s128_dgx-h100_default_dp8"
    assert enumerate_points(spec) == points  # stable


def test_link_variants_apply_only_to_axes_the_mesh_has() -> None:
    spec = SweepSpec(model="gpt2", devices=(4,), links=("dp=ib;tp=nvlink",), max_axes=2)
    overrides = {p.mesh_text: p.link_overrides() for p in enumerate_points(spec)}
    assert overrides == {"dp=4": {"dp": "ib"}, "dp=2,tp=2": {"dp": "ib", "tp": "nvlink"}}
    assert parse_link_variant("default") == {}


@pytest.mark.parametrize("make", [
    lambda: SweepSpec(model="gpt2", devices=(1,)),
    lambda: SweepSpec(model="gpt2", devices=(7,), min_axes=2, max_axes=3),
    lambda: SweepSpec(model="gpt2", devices=(8,), min_axes=0, max_axes=3),
    lambda: SweepSpec(model="gpt2", devices=(8,), links=("dp",)),
    lambda: parse_int_list("8,x", "--devices"),
    lambda: parse_int_list("8,0", "--devices"),
    lambda: parse_axes("1-4"),
    lambda: parse_axes("two"),
], ids=["one-device", "prime-2-axes", "zero-axes", "bad-link", "not-int", "zero",
        "four-axes", "words"])
def test_bad_options_raise_usage_errors(make) -> None:
    with pytest.raises(UsageError):
        make()


def test_shape_mode_names_training() -> None:
    assert Shape(model="gpt2", batch=1, seq=2, training=True).mode == "train"
    assert parse_axes("2") == (2, 2) and parse_int_list("8, 16,8", "--devices") == (8, 16)


def test_point_ids_name_overrides_and_training_choices() -> None:
    spec = SweepSpec(model="llama3-8b", devices=(2,), batches=(8,), seqs=(64,), training=True,
                     optimizer="sgd", recompute="full", overrides=(("layers", 8),))
    (point,) = enumerate_points(spec)
    assert point.point_id == "llama3-8b.layers8_train-sgd-full_b8_s64_dgx-h100_default_dp2"


def test_points_are_handed_out_by_graph_then_slowest_first() -> None:
    """Each graph's points stay together, in the order its first point came; within a
    graph more axes go first, then more devices, and equal keys keep their order."""
    from autoshard.sweep.points import Point
    from autoshard.sweep.runner import grouped

    small, large = (Shape(model=m, batch=1, seq=8, training=True) for m in ("gpt2", "llama3-8b"))
    meshes = [(("dp", 8),), (("dp", 2), ("tp", 4)), (("dp", 2), ("fsdp", 2), ("tp", 2)),
              (("dp", 4), ("tp", 2)), (("dp", 16),), (("dp", 2), ("fsdp", 2), ("tp", 4))]
    points = [Point(shape=shape, mesh=mesh, topology="dgx-h100")
              for mesh in meshes for shape in (small, large)]
    order = grouped(points)
    shapes = [p.shape for p in order]
    assert shapes == [small] * len(meshes) + [large] * len(meshes)
    for shape in (small, large):
        keys = [(len(p.mesh), p.devices) for p in order if p.shape == shape]
        assert keys == sorted(keys, reverse=True)
        ties = [p.mesh for p in order if p.shape == shape and (len(p.mesh), p.devices) == (2, 8)]
        assert ties == [(("dp", 2), ("tp", 4)), (("dp", 4), ("tp", 2))]
