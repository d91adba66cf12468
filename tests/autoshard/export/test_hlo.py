"""HloSharding values, printing and parsing, and XLA's Shardy → HloSharding export, against the
upstream answers in known-answers.json and the torch-xla thread (reference 003)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from autoshard.export import (
    AxisRef,
    HloKind,
    HloShardingValue,
    NotExpressibleError,
    ShardingLayout,
    SubgroupType,
    TileAssignment,
    canonical_iota,
    hlo_shardings_equal,
    layout_to_hlo_sharding,
    layout_to_shardy,
    parse_hlo_sharding,
    parse_shardy,
    shardy_to_hlo_sharding,
)
from tests.support import KNOWN_ANSWERS


def _cases(kind: str) -> list[dict]:
    cases = json.loads(KNOWN_ANSWERS.read_text())
    return [c for c in cases if c["kind"] == kind]


def _ids(cases: list[dict]) -> list[str]:
    return [f"{i}" for i in range(len(cases))]


def _pspec_layout(case_input: dict) -> ShardingLayout:
    mesh = case_input["mesh"]
    spec = list(case_input["partition_spec"])
    spec += [None] * (case_input["tensor_rank"] - len(spec))

    def refs(entry: str | list[str] | None) -> tuple[AxisRef, ...]:
        names = [] if entry is None else [entry] if isinstance(entry, str) else entry
        return tuple(AxisRef(n, 1, mesh[n]) for n in names)

    unreduced = refs(case_input.get("unreduced") or None)
    return ShardingLayout(
        axis_names=tuple(mesh),
        axis_sizes=tuple(mesh.values()),
        device_ids=None,
        dims=tuple(refs(e) for e in spec),
        unreduced=unreduced,
        reduce_op="sum" if unreduced else None,
    )


IOTA = _cases("hlo_v2_iota_canonicalization_and_v1")


@pytest.mark.parametrize("case", IOTA, ids=[c["expected"]["v2"] for c in IOTA])
def test_iota_canonicalization_and_v1(case: dict) -> None:
    spec = case["input"]
    value = HloShardingValue(
        kind=HloKind.TILED,
        tile=TileAssignment(
            dims=tuple(spec["dims"]),
            reshape_dims=tuple(spec["reshape_dims"]),
            perm=tuple(spec["transpose_perm"]),
        ),
        subgroup_types=tuple(SubgroupType(t) for t in spec["subgroup_types"]),
    ).normalized()
    assert value.to_string() == case["expected"]["v2"]
    assert value.explicit().to_string() == case["expected"]["v1"]
    assert list(value.tile.array().flat) == case["expected"]["v1_devices"]


def test_canonical_iota_source_comment_examples() -> None:
    # xla/hlo/ir/tile_assignment.cc, comment on CanonicalizeIotaDims.
    assert canonical_iota((3, 4, 5), (0, 1, 2)) == ((60,), (0,))
    assert canonical_iota((3, 4, 5), (2, 0, 1)) == ((12, 5), (1, 0))
    assert canonical_iota((3, 4, 5), (1, 0, 2)) == ((3, 4, 5), (1, 0, 2))
    assert canonical_iota((1, 1), (1, 0)) == ((1,), (0,))


EQUIV = _cases("hlo_v1_v2_equivalence")


@pytest.mark.parametrize("case", EQUIV, ids=[c["input"]["b"] for c in EQUIV])
def test_v1_v2_equivalence(case: dict) -> None:
    assert hlo_shardings_equal(case["input"]["a"], case["input"]["b"]) is case["expected"]["equal"]
    assert parse_hlo_sharding(case["input"]["b"]).explicit().to_string() == case["input"]["a"]


def test_torch_xla_thread_example() -> None:
    # Reference 003: arange(16).reshape(2,2,4).transpose(2,1,0).reshape(16).
    v2 = "{devices=[2,2,4]<=[2,2,4]T(2,1,0)}"
    v1 = "{devices=[2,2,4]0,8,4,12,1,9,5,13,2,10,6,14,3,11,7,15}"
    assert hlo_shardings_equal(v1, v2)
    expected = np.arange(16).reshape(2, 2, 4).transpose(2, 1, 0).reshape(16)
    assert list(parse_hlo_sharding(v2).tile.array().flat) == list(expected)
    assert not hlo_shardings_equal(v1, "{devices=[2,2,4]<=[16]}")


def test_inequality_of_types_and_dims() -> None:
    assert not hlo_shardings_equal("{devices=[2,2]<=[4]}", "{devices=[4,1]<=[4]}")
    assert not hlo_shardings_equal(
        "{devices=[2,1,2]<=[4] last_tile_dim_replicate}",
        "{devices=[2,1,2]<=[4] last_tile_dims={unreduced}}",
    )
    assert hlo_shardings_equal("{replicated}", "{devices=[1,1,4]<=[4] last_tile_dim_replicate}")


NORMALIZE = _cases("hlo_subgroup_normalization")


@pytest.mark.parametrize("case", NORMALIZE, ids=[c["input"]["hlo_sharding"] for c in NORMALIZE])
def test_subgroup_normalization(case: dict) -> None:
    value = parse_hlo_sharding(case["input"]["hlo_sharding"]).normalized()
    assert value.to_string() == case["expected"]["canonical"]


def test_partial_tile_sorts_replica_groups() -> None:
    (case,) = _cases("hlo_partial_tile_normalization")
    value = parse_hlo_sharding(case["input"]["v1"]).normalized()
    assert value.to_string() == case["expected"]["printed"]
    assert hlo_shardings_equal(case["input"]["v1"], case["expected"]["equal_to"])


def test_unreduced_groups_are_not_sorted() -> None:
    # jaxlib 0.10.2 keeps {devices=[2,1,2]1,0,3,2 last_tile_dims={unreduced}} as written and
    # prints an unreduced-only sharding with no data tiling as {unreduced}.
    text = "{devices=[2,1,2]1,0,3,2 last_tile_dims={unreduced}}"
    assert parse_hlo_sharding(text).normalized().to_string() == text
    only = "{devices=[1,1,4]<=[4] last_tile_dims={unreduced}}"
    assert parse_hlo_sharding(only).normalized().to_string() == "{unreduced}"


def test_parse_ignores_metadata_and_rejects_garbage() -> None:
    text = '{devices=[2,2]<=[4] metadata={op_name="x"}}'
    assert parse_hlo_sharding(text).to_string() == "{devices=[2,2]<=[4]}"
    assert parse_hlo_sharding("{maximal device=3}").to_string() == "{maximal device=3}"
    with pytest.raises(ValueError, match="cannot parse"):
        parse_hlo_sharding("{devices=[2,2]zz}")
    with pytest.raises(ValueError, match="lists 3 devices"):
        parse_hlo_sharding("{devices=[2,2]0,1,2}")


PSPEC = [c for c in _cases("pspec_to_hlo_sharding") if not c["input"].get("manual_axes")]


@pytest.mark.parametrize("case", PSPEC, ids=[c["expected"]["v2"] for c in PSPEC])
def test_pspec_layout_to_hlo(case: dict) -> None:
    layout = _pspec_layout(case["input"])
    assert layout_to_hlo_sharding(layout, 2) == case["expected"]["v2"]
    assert layout_to_hlo_sharding(layout, 1) == case["expected"]["v1"]


SDY = [
    (case["input"]["mesh"], sharding, expected)
    for case in _cases("sdy_to_hlo_sharding_v2")
    if "sdy_sharding" in case["input"]
    for sharding, expected in zip(
        case["input"]["sdy_sharding"]
        if isinstance(case["input"]["sdy_sharding"], list)
        else [case["input"]["sdy_sharding"]],
        case["expected"]["mhlo.sharding"]
        if isinstance(case["expected"]["mhlo.sharding"], list)
        else [case["expected"]["mhlo.sharding"]],
        strict=True,
    )
]


@pytest.mark.parametrize(("mesh", "sharding", "expected"), SDY, ids=[s for _, s, _ in SDY])
def test_shardy_to_hlo_v2(mesh: str, sharding: str, expected: str) -> None:
    assert shardy_to_hlo_sharding(sharding, mesh) == expected


@pytest.mark.parametrize(("mesh", "sharding", "expected"), SDY, ids=[s for _, s, _ in SDY])
def test_shardy_print_parse_round_trip(mesh: str, sharding: str, expected: str) -> None:
    layout = parse_shardy(sharding, mesh)
    printed = layout_to_shardy(layout, "mesh")
    assert parse_shardy(printed, mesh).dims == layout.dims
    assert shardy_to_hlo_sharding(printed, mesh) == expected


def test_shardy_non_iota_device_ids_give_v1() -> None:
    # stablehlo_export_pipeline.mlir: device array = device_ids reshaped to the axis sizes,
    # transposed by the perm, reshaped to the tile dims. Worked by hand below.
    mesh = '<["axis_0"=2, "axis_1"=2, "axis_2"=2], device_ids=[0,2,4,6,1,3,5,7]>'
    # dim 0 by axis_0: tile t holds positions t*4..t*4+3 -> ids 0,2,4,6 and 1,3,5,7.
    assert shardy_to_hlo_sharding('<@m, [{"axis_0"}, {}]>', mesh) == (
        "{devices=[2,1,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}"
    )
    # dims (axis_2, axis_0), replicated axis_1: device(t0,t1,r) = ids[4*t1 + 2*r + t0].
    assert shardy_to_hlo_sharding('<@m, [{"axis_2"}, {"axis_0"}]>', mesh) == (
        "{devices=[2,2,2]0,4,1,5,2,6,3,7 last_tile_dim_replicate}"
    )


def test_sub_axis_equivalence() -> None:
    (case,) = _cases("sdy_sub_axis_equivalence")
    expected = case["expected"]["hlo_v2_both"]
    assert shardy_to_hlo_sharding('<@m, [{"x"},{"y"}]>', '<["x"=4, "y"=2]>') == expected
    full = '<@m, [{"devices":(1)4}, {"devices":(4)2}]>'
    assert shardy_to_hlo_sharding(full, '<["devices"=8]>') == expected


def test_unreduced_with_replicated_subgroup() -> None:
    # Checked with jaxlib 0.10.2: P('x', unreduced={'y'}) on x2 y2 z2 (Explicit axes).
    layout = _pspec_layout(
        {
            "mesh": {"x": 2, "y": 2, "z": 2},
            "partition_spec": ["x"],
            "tensor_rank": 2,
            "unreduced": ["y"],
        }
    )
    assert layout_to_hlo_sharding(layout) == (
        "{devices=[2,1,2,2]<=[8] last_tile_dims={unreduced, replicated}}"
    )
    only = _pspec_layout(
        {"mesh": {"x": 2, "y": 2}, "partition_spec": [], "tensor_rank": 2, "unreduced": ["y"]}
    )
    # unreduced y comes before replicated x in the perm (jaxlib 0.10.2 prints the same).
    assert layout_to_hlo_sharding(only) == (
        "{devices=[1,1,2,2]<=[2,2]T(1,0) last_tile_dims={unreduced, replicated}}"
    )


def test_refusals() -> None:
    layout = _pspec_layout({"mesh": {"x": 2, "y": 2}, "partition_spec": ["x"], "tensor_rank": 1})
    custom = ShardingLayout(
        axis_names=layout.axis_names,
        axis_sizes=layout.axis_sizes,
        device_ids=(3, 2, 1, 0),
        dims=layout.dims,
        tensor_name="w",
    )
    with pytest.raises(NotExpressibleError, match=r'tensor "w".*custom device order.*version=1'):
        layout_to_hlo_sharding(custom, 2)
    assert layout_to_hlo_sharding(custom, 1) == "{devices=[2,2]2,3,0,1 last_tile_dim_replicate}"
    avg = ShardingLayout(
        axis_names=("x",),
        axis_sizes=(4,),
        device_ids=None,
        dims=((),),
        unreduced=(AxisRef("x", 1, 4),),
        reduce_op="avg",
        tensor_name="g",
    )
    with pytest.raises(NotExpressibleError, match=r'"g" is Partial\(avg\) on mesh axis "x"'):
        layout_to_hlo_sharding(avg)
    with pytest.raises(NotExpressibleError, match=r"Partial\(avg\)"):
        layout_to_shardy(avg)
