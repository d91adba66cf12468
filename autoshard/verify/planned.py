"""The graph a saved plan was made for, rebuilt from a model, and what differs when it is not.

A training plan records its whole step (forward, backward ``bwd/``, gradients ``grad/``,
optimizer ``opt/``), a model gives its forward graph: :func:`planned_graph` rebuilds the step
with the optimizer and recomputation read off the plan's op kinds and names. When no step fits,
the message compares plan.json with the closest step (never with the forward graph, against
which every backward op would "differ"), naming ops as both spell them.
"""

from __future__ import annotations

import logging

from autoshard.errors import UsageError
from autoshard.planning.layers import layer_count
from autoshard.planning.planner import training_step_graph
from autoshard.planning.record import Plan
from autoshard.verify.results import EmulationError
from graphs import OpGraph

logger = logging.getLogger(__name__)


def planned_graph(plan: Plan, graph: OpGraph, *, training: bool | None = None,
                  optimizer: str | None = None, recompute: str | None = None) -> OpGraph:
    """``graph``, or its training step when the plan is of one (optimizer and recomputation
    read off the plan's op kinds and names).

    ``training``, ``optimizer`` and ``recompute`` are the plan command's options when a caller
    has them (``autoshard export``/``verify``); None reads them off the plan, a value must
    agree with it.

    Raises:
        UsageError: a given option contradicts the plan (naming what the plan was made with).
        EmulationError: the plan's ops are not those of ``graph`` (or its training step).
    """
    is_training = any(record.role == "grad" for record in plan.tensors.values())
    _check_training(is_training, training, optimizer, recompute)
    if all(name in plan.ops for name in (op.name for op in graph.ops)) and \
            len(plan.ops) == len(graph.ops):
        return graph
    kinds = {rec.kind for rec in plan.ops.values()}
    planned_optimizer = "sgd" if "sgd_step" in kinds else "adamw"
    if not kinds & {"sgd_step", "adamw_step"}:
        raise _mismatch(plan, graph)
    if optimizer is not None and optimizer != planned_optimizer:
        raise UsageError(f"the plan was made with --optimizer {planned_optimizer}, not "
                         f"{optimizer}; drop --optimizer or pass {planned_optimizer}")
    order = ("none", "selective", "full")
    if recompute is not None:
        order = (recompute, *(r for r in order if r != recompute))
    tried: list[tuple[OpGraph, str]] = []
    for choice in order:
        try:
            candidate = training_step_graph(graph, planned_optimizer, choice)
        except Exception as exc:
            logger.debug("no %s training graph: %s", choice, exc)
            continue
        if sorted(op.name for op in candidate.ops) == sorted(plan.ops):
            if recompute is not None and choice != recompute:
                raise UsageError(f"the plan was made with --recompute {choice}, not "
                                 f"{recompute}; drop --recompute or pass {choice}")
            return candidate
        tried.append((candidate, f"'s training step (--optimizer {planned_optimizer}, "
                                 f"--recompute {choice})"))
    # the step closest to the plan's ops says what differs, not the forward graph
    closest = min(tried, key=lambda pair: len(set(plan.ops) ^ {op.name for op in pair[0].ops}),
                  default=(graph, ""))
    raise _mismatch(plan, *closest)


def _check_training(is_training: bool, training: bool | None, optimizer: str | None,
                    recompute: str | None) -> None:
    if training is not None and training != is_training:
        raise UsageError("the plan is of a training step: drop --inference" if is_training
                         else "the plan is of inference: drop --training")
    if not is_training and (optimizer is not None or recompute is not None):
        raise UsageError("--optimizer and --recompute describe a training step, but the plan "
                         "is of inference")


def _mismatch(plan: Plan, graph: OpGraph, step: str = "") -> EmulationError:
    """The ops only plan.json has and those only the model has, named as plan.json and the
    model's graph spell them (forward ops first, as both list them), with the layer counts
    when they differ: a plan checked against the wrong --layers is the common case.

    Example:
        >>> from graphs import zoo
        >>> import autoshard
        >>> two = autoshard.plan(zoo.build("mlp", layers=2), autoshard.Mesh.parse("tp=2"))
        >>> print(_mismatch(two, zoo.build("mlp", layers=3)))  # doctest: +NORMALIZE_WHITESPACE
        plan.json (of "mlp", 11 ops) does not fit model "mlp" (16 ops): 5 ops only in the
        model ("layers.2.mlp.w1", "layers.2.mlp.up", "layers.2.mlp.gelu", ...); plan.json has
        2 layers and the model 3 (--layers); pass the --model and shape options the plan was
        made with
    """
    built = [op.name for op in graph.ops]
    only_plan = [name for name in plan.ops if name not in set(built)]
    only_model = [name for name in built if name not in plan.ops]
    parts = [f"{len(names)} ops only in {where} ({_some(names)})"
             for names, where in ((only_plan, "plan.json"), (only_model, "the model")) if names]
    layers = (layer_count(plan.ops), layer_count(built))
    if layers[0] != layers[1] and None not in layers:
        parts.append(f"plan.json has {layers[0]} layers and the model {layers[1]} (--layers)")
    return EmulationError(f'plan.json (of "{plan.model}", {len(plan.ops)} ops) does not fit '
                          f'model "{graph.name}"{step} ({len(built)} ops): {"; ".join(parts)}; '
                          "pass the --model and shape options the plan was made with")


def _some(names: list[str], shown: int = 3) -> str:
    more = ", ..." if len(names) > shown else ""
    return ", ".join(f'"{name}"' for name in names[:shown]) + more
