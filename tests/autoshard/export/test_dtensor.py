"""DTensor exporter against torch's own placement classes (runs when torch is installed)."""

from __future__ import annotations

import pytest

from autoshard.export import DTENSOR_IMPORTS, to_dtensor, to_dtensor_source
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import Partial, Replicate, Shard, StridedShard
from autoshard.sharding.tensor_sharding import TensorSharding

pytestmark = pytest.mark.torch

CASES = [
    ((("dp", 2), ("tp", 4)), (Shard(0), Replicate()), 2, ("S(0)", "R")),
    ((("dp", 2), ("tp", 2)), (StridedShard(0, 2), Shard(0)), 1, ("_S(0, 2)", "S(0)")),
    ((("x", 4),), (Partial("sum"),), 1, ("P(sum)",)),
    ((("x", 2), ("y", 2)), (Partial("max"), Shard(1)), 2, ("P(max)", "S(1)")),
]


@pytest.mark.parametrize(
    ("axes", "placements", "ndim", "short"), CASES, ids=[" ".join(c[3]) for c in CASES]
)
def test_torch_placements_match_source(
    axes: tuple, placements: tuple, ndim: int, short: tuple[str, ...]
) -> None:
    import torch  # noqa: F401  (the torch extra; CI installs it, so this never skips)
    ts = TensorSharding(Mesh(axes=axes), placements, ndim)
    objects = to_dtensor(ts)
    assert tuple(str(p) for p in objects) == short
    namespace: dict = {}
    exec(DTENSOR_IMPORTS, namespace)
    assert eval(to_dtensor_source(ts), namespace) == objects


def test_shard_order_becomes_strided_shard_in_torch() -> None:
    import torch  # noqa: F401  (the torch extra; CI installs it, so this never skips)
    mesh = Mesh(axes=(("dp", 2), ("tp", 2)))
    ts = TensorSharding.from_partition_spec(mesh, (("tp", "dp"),), 1)
    assert tuple(str(p) for p in to_dtensor(ts)) == ("_S(0, 2)", "S(0)")
