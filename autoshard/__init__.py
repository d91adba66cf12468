"""autoshard: an offline auto-sharding planner.

The public import surface: plan a graph on a mesh (:func:`plan`), the sharding vocabulary
(:class:`Mesh`, the placements, :class:`TensorSharding`), the plan object, and the names users
need from the generic packages underneath (graphs, cost model, solver) so they never have to
import those directly.
"""

from autoshard import errors
from autoshard.errors import AutoshardError
from autoshard.planning.planner import plan
from autoshard.planning.record import Plan
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import (
    Partial,
    Replicate,
    Shard,
    StridedShard,
    _StridedShard,
    parse_placement,
)
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.strategies.derive import Strategy, enumerate_strategies
from autoshard.verify.emulator import emulate
from autoshard.verify.verification import verify
from costmodel import Link, Topology, get_preset, preset_names
from graphs import OpGraph, load, zoo
from solver import ChoiceProblem, solve

__all__ = [
    "AutoshardError", "ChoiceProblem", "Link", "Mesh", "OpGraph", "Partial", "Plan",
    "Replicate", "Shard", "Strategy", "StridedShard", "TensorSharding", "Topology",
    "_StridedShard", "emulate", "enumerate_strategies", "errors", "get_preset", "load",
    "parse_placement", "plan", "preset_names", "solve", "verify", "zoo",
]
