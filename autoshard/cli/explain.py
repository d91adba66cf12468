"""``autoshard explain PLAN.json --model M [--tensor NAME | --op NAME]``: why the plan lays a
tensor out (or runs an op) as it does, and what every alternative would change in the whole
step, each one re-solved with it pinned. Without a name: the ten most fragile decisions.
``--time-limit`` covers the whole command; a status line on stderr (on a terminal) names the
re-solve running.

The graph is rebuilt from ``--model`` and the shape options, as ``autoshard verify`` does, and
must be the plan's (fingerprint); the plan's own pins, memory limit and reserve apply to every
re-solve.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from autoshard.cli.common import (
    PlanFileType,
    batch_options,
    friendly_errors,
    parse_links,
    saved_plan_model,
    shape_options,
)
from autoshard.errors import UsageError
from autoshard.explain import explain_context, explain_op, explain_tensor, fragile_decisions
from autoshard.explain.render import as_json, explanation_text, fragility_text
from autoshard.export.plan_view import check_layouts
from autoshard.planning.planner import check_time_limit
from autoshard.planning.record import Plan


@click.command("explain")
@click.argument("plan_path", metavar="PLAN.json", type=PlanFileType())
@click.option("--model", default=None,
              help="The zoo model, Hugging Face config.json or graph JSON file the plan was "
                   "made for, with the same shape options (default: the model plan.json "
                   "names).")
@click.option("--tensor", default=None, help="Explain this tensor's layout (plan.json names).")
@click.option("--op", "op_name", default=None, help="Explain this op's strategy.")
@click.option("--limit", type=int, default=24, show_default=True,
              help="Re-solve at most this many alternatives, those with the smallest "
                   "single-change bound (0: all of them).")
@click.option("--count", type=int, default=10, show_default=True,
              help="Without --tensor/--op: how many fragile decisions to show (0: every "
                   "one re-solved).")
@click.option("--shortlist", type=int, default=20, show_default=True,
              help="Without --tensor/--op: how many candidate decisions to re-solve (at "
                   "least 1; raised to --count).")
@click.option("--time-limit", type=float, default=None,
              help="Seconds for the whole command: rebuilding the plan's problem and every "
                   "re-solve, each of which gets what is left and returns the best plan it "
                   "found with its gap; alternatives not re-solved by then show only their "
                   "single-change bound, and the report says how many were re-solved.")
@click.option("--topology", default=None,
              help="The topology the plan was made with (default: the one it names).")
@click.option("--link", "link_specs", multiple=True, metavar="AXIS=SPEC",
              help="A link override the plan was made with (repeatable).")
@shape_options()
@batch_options(saved_plan=True)
@click.option("--json", "as_json_output", is_flag=True, help="Print the explanation as JSON.")
@friendly_errors
def explain_command(**options: Any) -> None:
    """Explain a plan's choice for a tensor or op, or list its most fragile decisions."""
    run_explain(**options)


def run_explain(*, plan_path: Path, model: str | None, tensor: str | None, op_name: str | None,
                limit: int, count: int, shortlist: int, topology: str | None,
                link_specs: tuple[str, ...], as_json_output: bool,
                time_limit: float | None = None, **shape: Any) -> None:
    started = time.perf_counter()  # --time-limit covers the whole command
    check_time_limit(time_limit)
    if tensor is not None and op_name is not None:
        raise UsageError("give --tensor or --op, not both")
    if min(limit, count, shortlist) < 0:
        raise UsageError("--limit, --count and --shortlist must not be negative")
    if shortlist == 0:
        raise UsageError("--shortlist 0 re-solves no decision, so none could be shown; pass "
                         "--shortlist 1 or more (default 20)")
    plan = Plan.load(plan_path)
    check_layouts(plan, str(plan_path))
    graph = saved_plan_model(plan, model, shape)
    ctx = explain_context(plan, graph, topology=topology,
                          link_overrides=parse_links(link_specs), time_limit=time_limit,
                          started=started, progress=sys.stderr.isatty())
    if tensor is not None:
        result: Any = explain_tensor(ctx, tensor, limit)
        text = explanation_text
    elif op_name is not None:
        result, text = explain_op(ctx, op_name, limit), explanation_text
    else:
        result, text = fragile_decisions(ctx, count, shortlist), fragility_text
    click.echo(as_json(result) if as_json_output else text(result))
