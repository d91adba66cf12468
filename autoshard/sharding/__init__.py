"""The value types every other part of autoshard speaks: meshes, placements, tensor shardings.

A :class:`Mesh` names device axes; a placement says what one mesh axis does to a tensor
(DTensor's ``Replicate``, ``Shard``, ``_StridedShard``, ``Partial``); a
:class:`TensorSharding` is one placement per axis. :mod:`~autoshard.sharding.layout` says which
elements each device holds (the NumPy ground truth the tests use) and
:mod:`~autoshard.sharding.links` which physical link each mesh axis rides on. Nothing here
imports another autoshard subpackage.
"""

from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import (
    Partial,
    Placement,
    Replicate,
    Shard,
    StridedShard,
    _StridedShard,
    parse_placement,
)
from autoshard.sharding.tensor_sharding import TensorSharding

__all__ = ["Mesh", "MeshLinks", "Partial", "Placement", "Replicate", "Shard", "StridedShard",
           "TensorSharding", "_StridedShard", "parse_placement"]
