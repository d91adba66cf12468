"""Executing a found reshard on NumPy shards gives exactly the target's shards.

Oracle: ``autoshard.sharding.layout.shard_array`` (DTensor semantics, written independently of the
search and the executor). For every random pair of shardings on small meshes, the source
shards of a random array are pushed through ``apply_reshard`` step by step, each step using
only its collective; the result must equal ``shard_array(x, dst)`` exactly (or, for a Partial
target, reduce to ``x`` through ``unshard_arrays``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoshard.reshard.convert import state_of, to_sharding
from autoshard.reshard.find import find_reshard
from autoshard.reshard.state import enumerate_states
from autoshard.sharding.layout import shard_array, unshard_arrays
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import Partial
from autoshard.verify.collectives import apply_reshard
from costmodel import get_preset

MESHES = {
    "2": ((("x", 2),), (4, 6)),
    "2x2": ((("x", 2), ("y", 2)), (8, 4)),
    "2x2x2": ((("x", 2), ("y", 2), ("z", 2)), (8, 4, 8)),
    "2x3": ((("x", 2), ("y", 3)), (6, 12)),
}


def _layouts(name: str):
    axes, shape = MESHES[name]
    mesh = Mesh(axes=axes)
    states = enumerate_states(tuple(s for _, s in axes), shape)
    return mesh, shape, [to_sharding(mesh, len(shape), s) for s in states]


CACHE = {name: _layouts(name) for name in MESHES}


def _check_pair(name: str, i: int, j: int) -> None:
    mesh, shape, shardings = CACHE[name]
    src, dst = shardings[i % len(shardings)], shardings[j % len(shardings)]
    links = MeshLinks.build(mesh, get_preset("dgx-h100"))
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) * 3 + 1
    reshard = find_reshard(src, dst, shape, 8, links)
    got = apply_reshard(shard_array(x, src), reshard, shape)
    if any(isinstance(p, Partial) for p in dst.placements):
        np.testing.assert_allclose(unshard_arrays(got, dst, shape), x)
        assert [g.shape for g in got] == [w.shape for w in shard_array(x, dst)]
    else:
        want = shard_array(x, dst)
        assert len(got) == len(want)
        for device, (g, w) in enumerate(zip(got, want, strict=True)):
            # Partial sources hold random shares, so a reduction is exact only up to rounding.
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-9,
                                       err_msg=f"{src} -> {dst} device {device}")


@settings(max_examples=120, deadline=None)
@given(name=st.sampled_from(sorted(MESHES)), i=st.integers(0, 10_000), j=st.integers(0, 10_000))
def test_apply_reshard_reproduces_target_shards(name: str, i: int, j: int) -> None:
    _check_pair(name, i, j)


@pytest.mark.parametrize("name", ["2x2"])
def test_every_pair_on_2x2(name: str) -> None:
    _mesh, _shape, shardings = CACHE[name]
    for i in range(len(shardings)):
        for j in range(len(shardings)):
            _check_pair(name, i, j)


def test_state_round_trip() -> None:
    for name in MESHES:
        mesh, shape, shardings = CACHE[name]
        for ts in shardings:
            assert to_sharding(mesh, len(shape), state_of(ts)) == ts
