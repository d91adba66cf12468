"""Graph + mesh + topology → a certified, fully priced :class:`~autoshard.planning.record.Plan`.

:mod:`~autoshard.planning.planner` runs the pipeline; :mod:`~autoshard.planning.node_costs`,
:mod:`~autoshard.planning.edge_costs` and :mod:`~autoshard.planning.output_fix` build the
numbers the solver gets and :mod:`~autoshard.planning.decode` turns its answer into records;
:mod:`~autoshard.planning.memory` is the liveness memory model; :mod:`~autoshard.planning.layers`
finds repeated layers; :mod:`~autoshard.planning.record` is the Plan and its ``plan.json``;
:mod:`~autoshard.planning.summary` the text a user reads first. (Named ``planning`` so that
``autoshard.plan`` stays the function.)
"""

from autoshard.planning.planner import PlanOptions, plan
from autoshard.planning.record import Plan

__all__ = ["Plan", "PlanOptions", "plan"]
