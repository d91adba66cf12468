"""Export a tensor sharding as PyTorch DTensor placements and the mesh as a DeviceMesh.

Two outputs: evaluable source text (always; for generated scripts) and real torch objects (only
when torch is installed; torch is imported inside the function). DTensor shards left to right
over mesh dims, so a dim whose axes are ordered against mesh order is written with
`_StridedShard`, following ``DTensorSpec._convert_shard_order_to_StridedShard``:
``split_factor(m) = prod(size(i) for i earlier in the dim's order and i > m)``.

Worked example, mesh ``(dp=2, tp=2)``, dim 0 sharded tp-major then dp (``P(('tp','dp'))``):
dp comes first in the mesh but is minor, so it gets ``_StridedShard(0, split_factor=2)``
(``|tp|``) and tp gets ``Shard(0)``; rows of an ``[8]`` tensor land as
``(0,0)→0-1, (0,1)→4-5, (1,0)→2-3, (1,1)→6-7``.
"""

from __future__ import annotations

import logging
from typing import Any

from autoshard.sharding.frameworks import DTensorPlacement, dtensor_placements

logger = logging.getLogger(__name__)

__all__ = ["DTENSOR_IMPORTS", "DTensorPlacement", "dtensor_mesh_source", "dtensor_placements",
           "to_dtensor", "to_dtensor_source"]

DTENSOR_IMPORTS = (
    "import torch\n"
    "from torch.distributed.device_mesh import DeviceMesh, init_device_mesh\n"
    "from torch.distributed.tensor import Partial, Replicate, Shard\n"
    "from torch.distributed.tensor.placement_types import _StridedShard\n"
)


def to_dtensor_source(ts: Any) -> str:
    """Evaluable source of the placements tuple, e.g. ``(Shard(0), Replicate())``.

    Evaluate it with the names of `DTENSOR_IMPORTS` in scope.

    Example:
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.tensor_sharding import TensorSharding
        >>> mesh = Mesh(axes=(("dp", 2), ("tp", 2)))
        >>> to_dtensor_source(TensorSharding.from_partition_spec(mesh, (("tp", "dp"),), 1))
        '(_StridedShard(0, split_factor=2), Shard(0))'
    """
    parts = [p.source() for p in dtensor_placements(ts)]
    inner = ", ".join(parts) + ("," if len(parts) == 1 else "")
    return f"({inner})"


def to_dtensor(ts: Any) -> tuple[Any, ...]:
    """The placements as torch objects (needs torch)."""
    return tuple(p.to_torch() for p in dtensor_placements(ts))


def dtensor_mesh_source(mesh: Any, device_type: str = "cuda") -> str:
    """Source that builds the DeviceMesh, e.g.
    ``init_device_mesh("cuda", (2, 4), mesh_dim_names=("dp", "tp"))``; a custom device order
    becomes ``DeviceMesh("cuda", torch.tensor([...]).reshape(...), mesh_dim_names=...)``."""
    shape = _tuple_source(str(int(s)) for s in mesh.axis_sizes)
    names = _tuple_source(f'"{n}"' for n in mesh.axis_names)
    ids = [int(d) for d in mesh.device_ids]
    if ids == list(range(len(ids))):
        return f'init_device_mesh("{device_type}", {shape}, mesh_dim_names={names})'
    tensor = f"torch.tensor({ids}).reshape{shape}"
    return f'DeviceMesh("{device_type}", {tensor}, mesh_dim_names={names})'


def _tuple_source(items: Any) -> str:
    parts = list(items)
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
