"""Mesh, placements, TensorSharding and the NumPy layout against DTensor's worked answers
(from torch's test/distributed/tensor/test_utils.py and the placement classes' docstrings)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoshard import Mesh, Partial, Replicate, Shard, StridedShard, TensorSharding
from autoshard.errors import MeshError, NotDivisibleError, PlacementError
from autoshard.sharding.layout import held_indices, shard_array, unshard_arrays
from autoshard.sharding.placements import chunk_sizes, parse_placement


def test_nested_uneven_shards_follow_torch_chunk() -> None:
    """(S(0), S(0)) over 18 rows on mesh (4, 2): rows 3,2,3,2,3,2,2,1 at offsets
    0,3,5,8,10,13,15,17 (torch test_utils.py)."""
    ts = TensorSharding(Mesh(axes=(("a", 4), ("b", 2))), (Shard(0), Shard(0)), 1)
    rows = [held_indices(ts, (18,), c)[0] for c in ts.mesh.all_coords()]
    assert [len(r) for r in rows] == [3, 2, 3, 2, 3, 2, 2, 1]
    assert [int(r[0]) for r in rows] == [0, 3, 5, 8, 10, 13, 15, 17]


@pytest.mark.parametrize(("split", "rank0", "rank1"), [
    (2, [0, 1, 2, 6, 7, 8], [3, 4, 5, 9, 10, 11]),
    (3, [0, 1, 4, 5, 8, 9], [2, 3, 6, 7, 10, 11]),
])
def test_strided_shard_rows(split: int, rank0: list[int], rank1: list[int]) -> None:
    ts = TensorSharding(Mesh(axes=(("x", 2),)), (StridedShard(0, split),), 1)
    assert held_indices(ts, (12,), (0,))[0].tolist() == rank0
    assert held_indices(ts, (12,), (1,))[0].tolist() == rank1


def test_fsdp_over_tp_docstring_example() -> None:
    """[8, 8] on mesh [[0,1],[2,3]] (dp, tp), (_S(0, 2), S(0)): (0,0)→rows 0-1, (0,1)→4-5,
    (1,0)→2-3, (1,1)→6-7; it is shard_order 0:(tp, dp), PartitionSpec (('tp','dp'),)."""
    ts = TensorSharding(Mesh(axes=(("dp", 2), ("tp", 2))), (StridedShard(0, 2), Shard(0)), 2)
    rows = {c: held_indices(ts, (8, 8), c)[0].tolist() for c in ts.mesh.all_coords()}
    assert rows == {(0, 0): [0, 1], (0, 1): [4, 5], (1, 0): [2, 3], (1, 1): [6, 7]}
    assert ts.dim_axes == (("tp", "dp"), ())
    assert ts.to_partition_spec() == (("tp", "dp"), None)
    same = TensorSharding.from_partition_spec(ts.mesh, (("tp", "dp"),), 2)
    for c in ts.mesh.all_coords():
        assert held_indices(same, (8, 8), c)[0].tolist() == rows[c]


def test_shard_order_docstring_example() -> None:
    """Mesh [4,3,2], order 0:(2,0,1) ↔ (_S(0,2), _S(0,2), S(0))
    (DTensorSpec._convert_shard_order_to_StridedShard docstring)."""
    mesh = Mesh(axes=(("a", 4), ("b", 3), ("c", 2)))
    strided = TensorSharding(mesh, (StridedShard(0, 2), StridedShard(0, 2), Shard(0)), 1)
    assert strided.dim_axes == (("c", "a", "b"),)
    ordered = TensorSharding.from_dim_axes(mesh, [("c", "a", "b")])
    for c in mesh.all_coords():
        assert (held_indices(strided, (48,), c)[0].tolist()
                == held_indices(ordered, (48,), c)[0].tolist())


def test_view_strided_layout_has_no_axis_order() -> None:
    ts = TensorSharding(Mesh(axes=(("x", 2),)), (StridedShard(0, 3),), 1)
    assert ts.is_view_strided
    with pytest.raises(PlacementError, match="split_factor 3"):
        _ = ts.dim_axes


def test_chunk_sizes_match_torch_chunk_padding() -> None:
    assert chunk_sizes(5, 4) == (2, 2, 1, 0)
    assert chunk_sizes(18, 4) == (5, 5, 5, 3)
    assert chunk_sizes(8, 4) == (2, 2, 2, 2)


@pytest.mark.parametrize(("spec", "ndim", "placements", "order"), [
    (("y", None), 2, (Replicate(), Shard(0)), None),
    ((("x", "y"), None), 2, (Shard(0), Shard(0)), None),
    ((None, ("y", "x")), 2, (Shard(1), Shard(1)), ((1, (1, 0)),)),
    (("x",), 3, (Shard(0), Replicate()), None),
])
def test_partition_spec_round_trip(spec, ndim, placements, order) -> None:
    mesh = Mesh(axes=(("x", 2), ("y", 4)))
    ts = TensorSharding.from_partition_spec(mesh, spec, ndim)
    assert ts.placements == placements and ts.shard_order == order
    full = tuple(spec) + (None,) * (ndim - len(spec))
    assert ts.to_partition_spec() == full
    assert eval(repr(ts)) == ts


def test_partial_has_no_partition_spec_and_local_shape_checks_divisibility() -> None:
    mesh = Mesh(axes=(("x", 2), ("y", 4)))
    with pytest.raises(PlacementError, match="Partial"):
        TensorSharding(mesh, (Partial(), Shard(0)), 1).to_partition_spec()
    ts = TensorSharding(mesh, (Shard(0), Shard(1)), 2)
    assert ts.local_shape((6, 8)) == (3, 2)
    with pytest.raises(NotDivisibleError, match="dim 1 of size 6"):
        ts.local_shape((6, 6))
    assert ts.local_shape((6, 6), even=False) == (3, 2)


@pytest.mark.parametrize(("text", "needle"), [
    ("dp=0", "dp"), ("dp=2,dp=2", "twice"), ("dp", "NAME=SIZE"), ("9x=2", "identifier"),
])
def test_bad_meshes_name_the_axis(text: str, needle: str) -> None:
    with pytest.raises(MeshError, match=needle):
        Mesh.parse(text)


def test_mesh_coordinates_and_custom_device_order() -> None:
    mesh = Mesh.parse("dp=2,tp=4")
    assert mesh.coords(6) == (1, 2) and mesh.device_at((1, 2)) == 6
    custom = Mesh(axes=mesh.axes, devices=(7, 6, 5, 4, 3, 2, 1, 0))
    assert custom.device_at((0, 0)) == 7 and custom.coords(0) == (1, 3)
    with pytest.raises(MeshError, match="permutation"):
        Mesh(axes=mesh.axes, devices=(0, 1, 2))


def test_placement_short_forms_round_trip() -> None:
    for p in (Replicate(), Shard(2), Partial("max"), StridedShard(0, 4)):
        assert parse_placement(str(p)) == p
    with pytest.raises(PlacementError, match="not one of"):
        parse_placement("Q(1)")


PLACEMENTS = st.sampled_from([Replicate(), Shard(0), Shard(1), Partial("sum"), Partial("max"),
                              StridedShard(0, 2), StridedShard(1, 3)])


@settings(max_examples=60, deadline=None, derandomize=True)
@given(placements=st.tuples(PLACEMENTS, PLACEMENTS), uneven=st.booleans())
def test_shard_then_unshard_is_identity(placements, uneven: bool) -> None:
    """Every element is held by some device, replicas agree and Partial shares reduce back."""
    mesh = Mesh(axes=(("x", 2), ("y", 2)))
    shape = (13, 12) if uneven else (12, 12)
    ts = TensorSharding(mesh, placements, 2)
    x = np.random.default_rng(3).normal(size=shape)
    np.testing.assert_allclose(unshard_arrays(shard_array(x, ts), ts, shape), x, rtol=1e-12,
                               atol=1e-12)
