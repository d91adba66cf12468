"""Our HloSharding V2 and Shardy strings against JAX's own (the jax extra).

In-process checks use ``jax.sharding.AbstractMesh``, which needs no devices, so they neither
need nor change ``XLA_FLAGS``. The device-placement check runs in a subprocess with 8 fake CPU
devices, so no other test module sees that flag.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoshard.export import (
    DTensorPlacement,
    dtensor_placements,
    partition_spec_entries,
    shardy_dims,
    shardy_mesh,
    to_hlo_sharding,
    to_jax_partition_spec,
    to_shardy,
)
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import Partial, Replicate, Shard, StridedShard
from autoshard.sharding.tensor_sharding import TensorSharding

pytestmark = pytest.mark.jax

NAMES = ("a", "b", "c", "d")
MAX_DEVICES = 16


@st.composite
def spec_cases(draw: st.DrawFn) -> tuple[tuple[tuple[str, int], ...], int, tuple, tuple]:
    """A mesh (1–4 axes of size 1–4, ≤ 16 devices), a rank, a PartitionSpec (axes in any
    order on a dim) and unreduced axes."""
    rank_axes = draw(st.integers(1, 4))
    sizes: list[int] = []
    for _ in range(rank_axes):
        room = MAX_DEVICES // max(1, _prod(sizes))
        sizes.append(draw(st.sampled_from([s for s in (1, 2, 3, 4) if s <= room])))
    axes = tuple(zip(NAMES[:rank_axes], sizes, strict=True))
    ndim = draw(st.integers(1, 3))
    order = draw(st.permutations(NAMES[:rank_axes]))
    slots = [draw(st.integers(-2, ndim - 1)) for _ in order]  # -1 unused, -2 unreduced
    spec = tuple(
        tuple(name for name, slot in zip(order, slots, strict=True) if slot == dim)
        for dim in range(ndim)
    )
    unreduced = tuple(n for n in NAMES[:rank_axes] if slots[order.index(n)] == -2)
    return axes, ndim, spec, unreduced


def _prod(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _entry(axes: tuple[str, ...]) -> str | tuple[str, ...] | None:
    return None if not axes else axes[0] if len(axes) == 1 else axes


def _ours(axes: tuple, ndim: int, spec: tuple, unreduced: tuple) -> TensorSharding:
    mesh = Mesh(axes=axes)
    ts = TensorSharding.from_partition_spec(mesh, tuple(_entry(a) for a in spec), ndim)
    if not unreduced:
        return ts
    placements = tuple(
        Partial("sum") if name in unreduced else p
        for name, p in zip(mesh.axis_names, ts.placements, strict=True)
    )
    return TensorSharding(mesh, placements, ndim, ts.shard_order)


def _jax_sharding(axes: tuple, spec: tuple, unreduced: tuple):
    from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec

    sizes = tuple(size for _, size in axes)
    names = tuple(name for name, _ in axes)
    types = (AxisType.Explicit,) * len(axes) if unreduced else None
    mesh = AbstractMesh(sizes, names, axis_types=types) if types else AbstractMesh(sizes, names)
    entries = [_entry(a) for a in spec]
    pspec = PartitionSpec(*entries, unreduced=frozenset(unreduced))
    return NamedSharding(mesh, pspec)


@settings(max_examples=400, deadline=None)
@given(spec_cases())
def test_v2_string_equals_jax(case: tuple) -> None:
    axes, ndim, spec, unreduced = case
    expected = str(_jax_sharding(axes, spec, unreduced)._to_xla_hlo_sharding(ndim))
    ts = _ours(axes, ndim, spec, unreduced)
    assert to_hlo_sharding(ts) == expected
    # The same sharding spelled as DTensor placements (shard order as _StridedShard).
    strided = TensorSharding(ts.mesh, tuple(map(_placement, dtensor_placements(ts))), ndim)
    assert to_hlo_sharding(strided) == expected


def _placement(exported: DTensorPlacement) -> object:
    if exported.kind == "_StridedShard":
        return StridedShard(exported.dim, exported.split_factor)
    if exported.kind == "Shard":
        return Shard(exported.dim)
    if exported.kind == "Partial":
        return Partial(exported.reduce_op)
    return Replicate()


@settings(max_examples=200, deadline=None)
@given(spec_cases())
def test_shardy_string_equals_jax(case: tuple) -> None:
    from jax._src.interpreters import mlir

    axes, ndim, spec, unreduced = case
    sdy = _jax_sharding(axes, spec, unreduced)._to_sdy_sharding(ndim)
    with mlir.make_ir_context():
        expected = str(sdy.build({}))
    ts = _ours(axes, ndim, spec, unreduced)
    inline = shardy_mesh(ts.mesh).split(" = ", 1)[1]  # <["a"=2, ...]>
    assert to_shardy(ts).replace("@mesh", "mesh" + inline) == expected
    assert shardy_dims(ts) == tuple(tuple(d.axes) for d in sdy.dim_shardings)


def test_partition_spec_object_round_trip() -> None:
    from jax.sharding import PartitionSpec

    ts = _ours((("x", 2), ("y", 4)), 2, (("y", "x"), ()), ())
    assert partition_spec_entries(ts) == (("y", "x"), None)
    assert to_jax_partition_spec(ts) == PartitionSpec(("y", "x"), None)
    partial = _ours((("x", 2), ("y", 2)), 2, (("x",), ()), ("y",))
    assert to_jax_partition_spec(partial) == PartitionSpec("x", None, unreduced={"y"})


_DEVICE_CHECK = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import jax
    from jax.sharding import Mesh as JaxMesh, NamedSharding, PartitionSpec
    cases = json.loads(sys.stdin.read())
    out = []
    for case in cases:
        ids = case["device_ids"]
        devices = np.asarray(jax.devices())[ids].reshape(case["sizes"])
        mesh = JaxMesh(devices, tuple(case["names"]))
        spec = PartitionSpec(*[tuple(e) if isinstance(e, list) else e for e in case["spec"]])
        x = jax.device_put(np.arange(np.prod(case["shape"])).reshape(case["shape"]),
                           NamedSharding(mesh, spec))
        out.append({str(s.device.id): [[sl.start or 0, sl.stop or n]
                                       for sl, n in zip(s.index, case["shape"])]
                    for s in x.addressable_shards})
    print(json.dumps(out))
    """
)


def test_v1_device_blocks_match_jax_device_put() -> None:
    """Each device's block under our V1 string (custom device order) is the block JAX places
    on that device."""
    from autoshard.export import parse_hlo_sharding

    cases = [
        ((("x", 2), ("y", 4)), (7, 6, 5, 4, 3, 2, 1, 0), ("y", None)),
        ((("x", 2), ("y", 4)), (0, 2, 4, 6, 1, 3, 5, 7), (("y", "x"), None)),
        ((("x", 2), ("y", 2), ("z", 2)), (3, 1, 2, 0, 7, 5, 6, 4), ("z", ("x", "y"))),
    ]
    shape = (16, 8)
    payload = [
        {
            "names": [n for n, _ in axes],
            "sizes": [s for _, s in axes],
            "device_ids": list(ids),
            "spec": [list(e) if isinstance(e, tuple) else e for e in spec],
            "shape": list(shape),
        }
        for axes, ids, spec in cases
    ]
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run(
        [sys.executable, "-c", _DEVICE_CHECK],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    placed = json.loads(result.stdout)
    for (axes, ids, spec), jax_blocks in zip(cases, placed, strict=True):
        mesh = Mesh(axes=axes, devices=ids)
        ts = TensorSharding.from_partition_spec(mesh, spec, len(shape))
        value = parse_hlo_sharding(to_hlo_sharding(ts, version=1))
        array = value.tile.array()
        ours = {}
        for tile_index in _indices(array.shape):
            device = int(array[tile_index])
            blocks = [
                [t * (n // d), (t + 1) * (n // d)]
                for t, n, d in zip(tile_index, shape, array.shape, strict=False)
            ]
            ours[str(device)] = blocks
        assert ours == jax_blocks


def _indices(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    return list(itertools.product(*[range(n) for n in shape]))
