"""autoshard: an offline auto-sharding planner.

The public import surface: plan a graph on a mesh (:func:`plan`, with ``strategy=`` a named
hand plan and ``pins=`` layouts to keep; :func:`plan_pipeline` for a mesh with a ``pp``
pipeline axis, :func:`simulate` for a schedule's timeline), ask a saved plan what-if questions
(:func:`explain_tensor`, :func:`explain_op`, :func:`fragile_decisions`, :func:`diff_plans`),
lay its step out as a timeline (:func:`step_timeline`, :func:`write_trace` for a Chrome trace),
the sharding vocabulary
(:class:`Mesh`, the placements, :class:`TensorSharding`), the plan object, and the names users
need from the generic packages underneath (graphs, cost model, solver) so they never have to
import those directly.
"""

from autoshard import errors
from autoshard.errors import AutoshardError
from autoshard.explain import (
    diff_plans,
    explain_context,
    explain_op,
    explain_tensor,
    fragile_decisions,
)
from autoshard.planning.named import strategy_pins
from autoshard.planning.pins import Pins, load_pins, parse_pins, pins_from_plan
from autoshard.planning.pipeline.pipelined import PipelineOptions, plan_pipeline
from autoshard.planning.pipeline.schedules import Schedule
from autoshard.planning.pipeline.simulate import ChunkCost, simulate
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
from autoshard.timeline import step_timeline, write_trace
from autoshard.verify.emulator import emulate
from autoshard.verify.verification import verify
from costmodel import Link, Topology, get_preset, preset_names
from graphs import OpGraph, load, zoo
from solver import ChoiceProblem, solve

__all__ = [
    "AutoshardError", "ChoiceProblem", "ChunkCost", "Link", "Mesh", "OpGraph", "Partial", "Pins",
    "PipelineOptions", "Plan", "Replicate", "Schedule", "Shard", "Strategy", "StridedShard",
    "TensorSharding", "Topology", "_StridedShard", "diff_plans", "emulate",
    "enumerate_strategies", "errors", "explain_context", "explain_op", "explain_tensor",
    "fragile_decisions", "get_preset", "load", "load_pins", "parse_pins", "parse_placement",
    "pins_from_plan", "plan", "plan_pipeline", "preset_names", "simulate", "solve",
    "step_timeline", "strategy_pins", "verify", "write_trace", "zoo",
]
