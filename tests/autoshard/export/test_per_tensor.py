"""Per-tensor exporters on real `TensorSharding`s: upstream answers, DTensor's strided layouts,
the shard-order ↔ `_StridedShard` conversion, the non-divisible rules, and a property test
whose oracle is DTensor's placement semantics executed in NumPy."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoshard.export import (
    DTENSOR_IMPORTS,
    ExportFormat,
    NotDivisibleExportError,
    NotExpressibleError,
    check_exportable,
    dtensor_mesh_source,
    hlo_shardings_equal,
    jax_mesh_source,
    layout_of,
    layout_to_hlo_sharding,
    parse_hlo_sharding,
    parse_shardy,
    partition_spec_source,
    shardy_dims,
    shardy_mesh,
    to_dtensor_source,
    to_hlo_sharding,
    to_shardy,
)
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import Partial, Replicate, Shard, StridedShard
from autoshard.sharding.tensor_sharding import TensorSharding
from tests.support import KNOWN_ANSWERS


def _cases(kind: str) -> list[dict]:
    return [c for c in json.loads(KNOWN_ANSWERS.read_text()) if c["kind"] == kind]


def _entry(spec_entry: str | list[str] | None) -> str | tuple[str, ...] | None:
    return tuple(spec_entry) if isinstance(spec_entry, list) else spec_entry


PSPEC = [c for c in _cases("pspec_to_hlo_sharding") if not c["input"].get("manual_axes")]


@pytest.mark.parametrize("case", PSPEC, ids=[c["expected"]["v2"] for c in PSPEC])
def test_pspec_known_answers_through_tensor_sharding(case: dict) -> None:
    given_input = case["input"]
    mesh = Mesh(axes=tuple(given_input["mesh"].items()))
    spec = tuple(_entry(e) for e in given_input["partition_spec"])
    ts = TensorSharding.from_partition_spec(mesh, spec, given_input["tensor_rank"])
    if given_input.get("unreduced"):
        placements = tuple(
            Partial("sum") if name in given_input["unreduced"] else p
            for name, p in zip(mesh.axis_names, ts.placements, strict=True)
        )
        ts = TensorSharding(mesh, placements, ts.ndim, ts.shard_order)
    assert to_hlo_sharding(ts) == case["expected"]["v2"]
    assert to_hlo_sharding(ts, version=1) == case["expected"]["v1"]
    assert hlo_shardings_equal(case["expected"]["v1"], case["expected"]["v2"])


def test_shard_order_to_strided_shard_docstring_example() -> None:
    (case,) = _cases("dtensor_shard_order_strided_conversion")
    mesh = Mesh(axes=(("a", 4), ("b", 3), ("c", 2)))
    order = case["input"]["shard_order"][0]["mesh_dims"]  # [2, 0, 1]: c, then a, then b
    ts = TensorSharding.from_partition_spec(mesh, (tuple("abc"[m] for m in order),), 1)
    assert to_dtensor_source(ts) == (
        "(_StridedShard(0, split_factor=2), _StridedShard(0, split_factor=2), Shard(0))"
    )
    # The inverse: the strided placements decode to the same axis order and the same strings.
    strided = TensorSharding(mesh, (StridedShard(0, 2), StridedShard(0, 2), Shard(0)), 1)
    assert shardy_dims(strided) == (("c", "a", "b"),)
    assert partition_spec_source(strided) == "P(('c', 'a', 'b'))"
    assert to_hlo_sharding(strided) == to_hlo_sharding(ts) == "{devices=[24]<=[12,2]T(1,0)}"


def _rows_by_coordinate(ts: TensorSharding, length: int) -> dict[tuple[int, ...], list[int]]:
    """Rows of dim 0 each mesh coordinate holds, read off our V1 HloSharding string."""
    value = parse_hlo_sharding(to_hlo_sharding(ts, version=1))
    sizes = tuple(ts.mesh.axis_sizes)
    if value.tile is None:
        return {c: list(range(length)) for c in itertools.product(*map(range, sizes))}
    array = value.tile.array()
    block = length // array.shape[0]
    out = {}
    for index in itertools.product(*map(range, array.shape)):
        coordinate = tuple(int(c) for c in np.unravel_index(int(array[index]), sizes))
        out[coordinate] = list(range(index[0] * block, (index[0] + 1) * block))
    return out


LAYOUTS = _cases("dtensor_strided_shard_layout")


def _placements(short: list[str]) -> tuple:
    out = []
    for text in short:
        if text.startswith("_S("):
            dim, split = (int(x) for x in text[3:-1].split(","))
            out.append(StridedShard(dim, split))
        else:
            out.append(Shard(int(text[2:-1])))
    return tuple(out)


@pytest.mark.parametrize("case", LAYOUTS, ids=[" ".join(c["input"]["placements"]) for c in LAYOUTS])
def test_strided_shard_layouts(case: dict) -> None:
    spec = case["input"]
    names = ("dp", "tp")[: len(spec["mesh_shape"])]
    mesh = Mesh(axes=tuple(zip(names, spec["mesh_shape"], strict=True)))
    ts = TensorSharding(mesh, _placements(spec["placements"]), 1)
    expected = spec_rows(case)
    contiguous = all(
        rows == list(range(rows[0], rows[0] + len(rows))) for rows in expected.values()
    )
    if contiguous:
        assert _rows_by_coordinate(ts, spec["dim_size"]) == expected
        return
    for export in (to_hlo_sharding, to_shardy, partition_spec_source):
        with pytest.raises(NotExpressibleError, match=r'tensor "t" dim 0 .*mesh axis'):
            export(ts, tensor_name="t")
    assert "_StridedShard(0, split_factor=" in to_dtensor_source(ts)


def spec_rows(case: dict) -> dict[tuple[int, ...], list[int]]:
    expected = case["expected"]
    if "rows_per_mesh_coordinate" in expected:
        return {
            tuple(int(x) for x in key.strip("()").split(",")): rows
            for key, rows in expected["rows_per_mesh_coordinate"].items()
        }
    return {(int(rank),): rows for rank, rows in expected["rows_per_rank"].items()}


def test_sub_axes_from_strided_shard() -> None:
    # Mesh a=4, b=4, (_S(0, 2), S(0)): b's block straddles a's, so b splits (layout.py example).
    mesh = Mesh(axes=(("a", 4), ("b", 4)))
    ts = TensorSharding(mesh, (StridedShard(0, 2), Shard(0)), 2)
    assert to_shardy(ts) == '#sdy.sharding<@mesh, [{"b":(1)2, "a", "b":(2)2}, {}]>'
    assert to_hlo_sharding(ts) == "{devices=[16,1]<=[4,2,2]T(1,0,2)}"
    rows = _rows_by_coordinate(ts, 32)
    assert rows == _dtensor_rows(mesh, ts.placements, 32)
    layout = parse_shardy(to_shardy(ts), shardy_mesh(mesh))
    assert layout_to_hlo_sharding(layout) == to_hlo_sharding(ts)
    with pytest.raises(NotExpressibleError, match="sub-axis"):
        partition_spec_source(ts, tensor_name="w")


def _chunk(rows: list[int], parts: int) -> list[list[int]]:
    """torch.chunk semantics, padded with empty chunks as DTensor does."""
    size = -(-len(rows) // parts)
    return [rows[i * size : (i + 1) * size] for i in range(parts)]


def _dtensor_rows(mesh: Mesh, placements: tuple, length: int) -> dict[tuple[int, ...], list[int]]:
    """DTensor's layout of dim 0 by definition: mesh dims left to right, each chunking the
    current local rows (`_StridedShard`: chunk into sf pieces, chunk each, concatenate)."""
    out = {}
    for coordinate in itertools.product(*map(range, mesh.axis_sizes)):
        rows = list(range(length))
        for size, placement, index in zip(mesh.axis_sizes, placements, coordinate, strict=True):
            if isinstance(placement, StridedShard):
                pieces = _chunk(rows, placement.split_factor)
                rows = [r for piece in pieces for r in _chunk(piece, size)[index]]
            elif isinstance(placement, Shard) and placement.dim == 0:
                rows = _chunk(rows, size)[index]
        out[coordinate] = rows
    return out


@st.composite
def strided_cases(draw: st.DrawFn) -> tuple[Mesh, tuple, int]:
    count = draw(st.integers(1, 3))
    sizes = [draw(st.sampled_from((1, 2, 3, 4))) for _ in range(count)]
    mesh = Mesh(axes=tuple(zip(("a", "b", "c")[:count], sizes, strict=True)))
    placements = []
    for _ in sizes:
        kind = draw(st.sampled_from(("R", "S", "S", "_S")))
        split = draw(st.sampled_from((2, 3, 4)))
        placements.append(
            Replicate() if kind == "R" else Shard(0) if kind == "S" else StridedShard(0, split)
        )
    splits = [p.split_factor for p in placements if isinstance(p, StridedShard)]
    length = math.prod(sizes) * math.prod(splits) * draw(st.sampled_from((1, 2)))
    return mesh, tuple(placements), length


@settings(max_examples=200, deadline=None)
@given(strided_cases())
def test_accepted_exports_hold_exactly_dtensor_rows(case: tuple) -> None:
    """Oracle: DTensor semantics in NumPy. When we export, every device holds exactly its
    DTensor rows; when we refuse, some device's DTensor rows are not one block."""
    mesh, placements, length = case
    ts = TensorSharding(mesh, placements, 1)
    truth = _dtensor_rows(mesh, placements, length)
    try:
        ours = _rows_by_coordinate(ts, length)
    except NotExpressibleError:
        assert not _some_sub_axis_sharding_matches(mesh, truth, length)
        return
    assert ours == truth
    layout = parse_shardy(to_shardy(ts), shardy_mesh(mesh))
    assert layout_to_hlo_sharding(layout) == to_hlo_sharding(ts)


def _splits(size: int) -> list[tuple[int, ...]]:
    """Ordered factorizations of an axis size into factors > 1 (its sub-axis pieces)."""
    if size == 1:
        return [()]
    out = [(size,)]
    for head in range(2, size):
        if size % head == 0:
            out += [(head, *rest) for rest in _splits(size // head)]
    return out


def _some_sub_axis_sharding_matches(
    mesh: Mesh, truth: dict[tuple[int, ...], list[int]], length: int
) -> bool:
    """Brute force: does any ordered list of (sub-)axes on dim 0 give every device its rows?"""
    sizes = tuple(mesh.axis_sizes)
    for choice in itertools.product(*[_splits(n) for n in sizes]):
        pieces = []
        for axis, factors in enumerate(choice):
            pre = 1
            for factor in factors:
                pieces.append((axis, pre, factor))
                pre *= factor
        for count in range(len(pieces) + 1):
            for chosen in itertools.permutations(pieces, count):
                shards = math.prod(size for _, _, size in chosen)
                if length % shards == 0 and _matches(sizes, chosen, truth, length // shards):
                    return True
    return False


def _matches(sizes: tuple, chosen: tuple, truth: dict, block: int) -> bool:
    for coordinate, rows in truth.items():
        tile = 0
        for axis, pre, size in chosen:
            tile = tile * size + (coordinate[axis] // (sizes[axis] // (pre * size))) % size
        if rows != list(range(tile * block, (tile + 1) * block)):
            return False
    return True


def test_shardy_mesh_and_replicated_and_unreduced() -> None:
    mesh = Mesh(axes=(("x", 2), ("y", 4)))
    assert shardy_mesh(mesh) == 'sdy.mesh @mesh = <["x"=2, "y"=4]>'
    custom = Mesh(axes=(("x", 2), ("y", 2)), devices=(3, 2, 1, 0))
    assert shardy_mesh(custom, "m2") == 'sdy.mesh @m2 = <["x"=2, "y"=2], device_ids=[3, 2, 1, 0]>'
    ts = TensorSharding(mesh, (Replicate(), Shard(0)), 2)
    assert to_shardy(ts) == '#sdy.sharding<@mesh, [{"y"}, {}]>'
    assert to_shardy(ts, explicit_replicated=True) == (
        '#sdy.sharding<@mesh, [{"y"}, {}], replicated={"x"}>'
    )
    three = Mesh(axes=(("x", 2), ("y", 2), ("z", 2)))
    partial = TensorSharding(three, (Partial("sum"), Shard(1), Replicate()), 2)
    assert to_shardy(partial, "m", explicit_replicated=True) == (
        '#sdy.sharding<@m, [{}, {"y"}], replicated={"z"}, unreduced={"x"}>'
    )
    maximum = TensorSharding(three, (Partial("max"), Replicate(), Partial("max")), 1)
    assert to_shardy(maximum) == '#sdy.sharding<@mesh, [{}], unreduced=max{"x", "z"}>'
    assert partition_spec_source(partial) == "P(None, 'y', unreduced={'x'})"
    with pytest.raises(NotExpressibleError, match=r"Partial\(max\)"):
        to_hlo_sharding(maximum, tensor_name="m")
    with pytest.raises(NotExpressibleError, match=r"Partial\(max\)"):
        partition_spec_source(maximum, tensor_name="m")
    with pytest.raises(NotExpressibleError, match=r"Partial\(avg\)"):
        to_shardy(TensorSharding(three, (Partial("avg"), Replicate(), Replicate()), 1))


def test_custom_device_order_needs_v1() -> None:
    mesh = Mesh(axes=(("x", 2), ("y", 2)), devices=(3, 2, 1, 0))
    ts = TensorSharding(mesh, (Shard(0), Replicate()), 1)
    with pytest.raises(NotExpressibleError, match=r'tensor "w".*custom device order'):
        to_hlo_sharding(ts, tensor_name="w")
    # Tile 0 holds positions 0,1 -> devices 3,2 (sorted within the replica group).
    assert to_hlo_sharding(ts, version=1) == "{devices=[2,2]2,3,0,1 last_tile_dim_replicate}"
    assert to_hlo_sharding(TensorSharding(mesh, (Replicate(), Replicate()), 1)) == "{replicated}"


def test_dtensor_sources() -> None:
    mesh = Mesh(axes=(("dp", 2), ("tp", 4)))
    ts = TensorSharding(mesh, (Shard(0), Replicate()), 2)
    assert to_dtensor_source(ts) == "(Shard(0), Replicate())"
    assert dtensor_mesh_source(mesh) == (
        'init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))'
    )
    one = Mesh(axes=(("x", 4),))
    assert to_dtensor_source(TensorSharding(one, (Partial("sum"),), 1)) == '(Partial("sum"),)'
    assert dtensor_mesh_source(one, "cpu") == 'init_device_mesh("cpu", (4,), mesh_dim_names=("x",))'
    custom = Mesh(axes=(("x", 2), ("y", 2)), devices=(3, 2, 1, 0))
    assert dtensor_mesh_source(custom) == (
        'DeviceMesh("cuda", torch.tensor([3, 2, 1, 0]).reshape(2, 2), mesh_dim_names=("x", "y"))'
    )
    assert (
        jax_mesh_source(mesh) == "Mesh(np.asarray(jax.devices()[:8]).reshape(2, 4), ('dp', 'tp'))"
    )
    assert jax_mesh_source(custom, explicit_axes=True) == (
        "Mesh(np.asarray(jax.devices())[[3, 2, 1, 0]].reshape(2, 2), ('x', 'y'), "
        "axis_types=(jax.sharding.AxisType.Explicit,) * 2)"
    )


def test_dtensor_source_evaluates() -> None:
    """The source is evaluable: run it against stand-ins with DTensor's constructor shapes."""
    namespace = {
        "Shard": lambda dim: ("S", dim),
        "Replicate": lambda: ("R",),
        "Partial": lambda op="sum": ("P", op),
        "_StridedShard": lambda dim, split_factor: ("_S", dim, split_factor),
    }
    mesh = Mesh(axes=(("dp", 2), ("tp", 2)))
    ts = TensorSharding.from_partition_spec(mesh, (("tp", "dp"),), 1)
    assert eval(to_dtensor_source(ts), namespace) == (("_S", 0, 2), ("S", 0))
    assert "_StridedShard" in DTENSOR_IMPORTS


def test_check_exportable_non_divisible() -> None:
    # Spec §6: 18 rows over axes (4, 2): DTensor nests chunks, XLA tiles once, JAX refuses.
    mesh = Mesh(axes=(("dp", 4), ("tp", 2)))
    ts = TensorSharding(mesh, (Shard(0), Shard(0)), 2)
    shape = (18, 8)
    assert check_exportable(ts, shape, ExportFormat.DTENSOR, "w").exact
    hlo = check_exportable(ts, shape, "hlo", "w")
    assert not hlo.exact and "ceil(18/8)" in hlo.notes[0]
    assert not check_exportable(ts, shape, "shardy", "w").exact
    with pytest.raises(NotDivisibleExportError, match=r'tensor "w" dim 0 .*size 18') as error:
        check_exportable(ts, shape, "jax", "w")
    assert (error.value.tensor, error.value.dim, error.value.axis) == ("w", 0, "tp")
    single = TensorSharding(mesh, (Replicate(), Shard(1)), 2)
    assert check_exportable(single, (8, 7), "hlo", "v").exact  # one axis: ceil tile == chunk
    assert check_exportable(ts, (16, 8), "jax", "w").exact
    with pytest.raises(ValueError, match="describes 2 dims"):
        check_exportable(ts, (16,), "hlo", "w")


def test_check_exportable_refusals_name_the_culprit() -> None:
    mesh = Mesh(axes=(("a", 2), ("b", 2)))
    strided = TensorSharding(mesh, (StridedShard(0, 2), Shard(0)), 1)
    with pytest.raises(NotDivisibleExportError, match="strided"):
        check_exportable(strided, (6,), "hlo", "x")
    view = TensorSharding(Mesh(axes=(("a", 4),)), (StridedShard(0, 2),), 1)
    with pytest.raises(NotExpressibleError, match=r'tensor "x" dim 0 .*"a"'):
        check_exportable(view, (8,), "shardy", "x")
    assert check_exportable(view, (8,), "dtensor", "x").exact
    custom = Mesh(axes=(("a", 2), ("b", 2)), devices=(1, 0, 3, 2))
    ts = TensorSharding(custom, (Shard(0), Replicate()), 1)
    with pytest.raises(NotExpressibleError, match="version=1"):
        check_exportable(ts, (4,), "hlo", "x")
    assert check_exportable(ts, (4,), ExportFormat.HLO_V1, "x").exact


def test_layout_of_uses_dim_axes_order() -> None:
    mesh = Mesh(axes=(("x", 2), ("y", 2), ("z", 2)))
    ts = TensorSharding.from_partition_spec(mesh, ("z", ("y", "x")), 2)
    layout = layout_of(ts)
    assert [[r.name for r in refs] for refs in layout.dims] == [["z"], ["y", "x"]]
    assert to_shardy(ts) == '#sdy.sharding<@mesh, [{"z"}, {"y", "x"}]>'
    assert partition_spec_source(ts) == "P('z', ('y', 'x'))"
