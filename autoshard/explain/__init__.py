"""What-if questions about saved plans: why a layout was chosen and what the alternatives
cost (:func:`explain_tensor`, :func:`explain_op`, :func:`fragile_decisions`, each backed by
re-solves), and what separates two plans (:func:`diff_plans`)."""

from autoshard.explain.alternatives import Alternative, Explanation, explain_op, explain_tensor
from autoshard.explain.context import ExplainContext, explain_context
from autoshard.explain.diff import PlanDiff, diff_plans
from autoshard.explain.fragile import Decision, Fragility, fragile_decisions

__all__ = ["Alternative", "Decision", "ExplainContext", "Explanation", "Fragility", "PlanDiff",
           "diff_plans", "explain_context", "explain_op", "explain_tensor", "fragile_decisions"]
