"""Verify a plan in seconds: emulate it on a scaled-down copy of its graph.

Why: emulating Llama-3 8B at its real sizes would need the whole model in memory once per
device. Sharding correctness depends on the graph's structure and on which factors divide by
which mesh axes, not on how large the dims are. So the plan is run on a copy of its graph with
the same ops and mesh but small dims, and the copy is accepted only when it runs *the same
plan*: every op's chosen strategy exists on it (found again by its label), and every operand
of every chosen strategy is evenly sharded on the copy exactly when it is on the planned graph
(:func:`same_program`). The reshards between them are then the same collective lists
(the emulator replays the priced list and fails if it does not turn source into target).

Sizes are picked by a rule that keeps divisibility for every mesh-axis product, per model
dimension of size ``n`` on a mesh of ``M`` devices: let ``g = gcd(n, M)``; the new size is
``g·k`` for the smallest ``k`` with ``gcd(k, M/g) = 1`` (``k ≥ 2`` unless ``n = g`` when local
sizes must stay above 1). Then every product of mesh axes (a divisor of ``M``) divides the new
size exactly when it divided ``n``. Worked example, ``M = 8``::

    dim      n        g    new   (local > 1)   divides by 2, 4, 8 (before and after)
    seq      4096     8    8     16            yes, yes, yes
    vocab    50257    1    3     3             no,  no,  no
    kv_heads 8        8    8     8             yes, yes, yes (8 shards of 1 stay 1)
    batch    6        2    2     6             yes, no,  no

Candidates are tried smallest first and the first that passes the check above wins: head dims
of 2 (outside the rule: 128 divides by 8, 2 does not; attention keeps the head dim whole, so
most plans never shard it, and the check rejects the candidate for the plans that do); the
rule; the rule keeping local sizes above 1 (shardings of merged dims depend on local sizes of
1). Heads are scaled as KV heads × group size, head dims as twice their rotary half. Graphs the
zoo builds only (its presets and Hugging Face configs): the config is read back from the graph
(:func:`graphs.zoo.config_of`, which proves it by rebuilding the same graph) and the copy is
built from it at the small sizes. Any other graph, or one no candidate fits, runs at its own
sizes.

What verification does not check: the *prices*. It proves that the chosen strategies and the
priced collective lists compute the unsharded values; it does not re-measure the bytes each
collective moves or the seconds it was priced at (the cost model's job, checked against closed
forms and measurements in its own tests), and on a scaled copy the bytes are the copy's.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from autoshard.planning.record import Plan
from autoshard.planning.record_check import check_tensor_records, strategy_of
from autoshard.sharding.mesh import Mesh
from autoshard.verify.emulator import emulate
from autoshard.verify.pipeline import emulate_pipeline
from autoshard.verify.planned import planned_graph
from autoshard.verify.results import EmulationError, EmulationResult
from graphs import GraphError, OpGraph, zoo
from graphs.zoo import Family, ModelConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Verification:
    """The verdict of :func:`verify`, and what it goes into ``plan.json`` as.

    ``scaled_dims`` maps each scaled model dimension to ``(planned size, emulated size)``;
    empty when the plan ran at its own sizes. ``culprit`` is the first divergent op or
    reshard (None when passed).
    """

    passed: bool
    max_abs_err: float
    max_rel_err: float
    scaled_dims: Mapping[str, tuple[int, int]]
    culprit: str | None
    message: str
    seed: int
    seconds: float
    result: EmulationResult = field(repr=False)

    def to_record(self) -> dict[str, Any]:
        """The ``verification`` object of ``plan.json``."""
        return {"passed": self.passed, "max_abs_err": self.max_abs_err,
                "max_rel_err": self.max_rel_err,
                "scaled_dims": {k: list(v) for k, v in self.scaled_dims.items()},
                "seed": self.seed, "first_divergence": self.culprit,
                "message": self.message}


def verify(plan: Plan, graph: OpGraph, *, seed: int = 0, scale: bool = True,
           progress: bool = False) -> Verification:
    """Emulate ``plan`` on a scaled-down copy of ``graph`` and judge it.

    Args:
        plan: the plan to prove.
        graph: the graph it was planned for: forward-only is fine for a training plan (the
            training step is rebuilt with the plan's optimizer and recomputation).
        seed: seeds the random inputs.
        scale: False runs at the graph's own sizes.
        progress: a progress bar of the emulated ops on stderr (not for pipelined plans).

    Returns:
        A :class:`Verification`.

    Raises:
        EmulationError: the plan does not belong to ``graph``.
        PlanRecordError: a tensor record of the plan is not what its op's strategy writes
            (:func:`~autoshard.planning.record_check.check_tensor_records`), or an op's
            strategy is none the op has.

    Example:
        >>> import autoshard
        >>> graph = autoshard.zoo.build("mlp", layers=1, hidden=64, ffn=256, batch=8, seq=16)
        >>> result = verify(autoshard.plan(graph, autoshard.Mesh.parse("tp=2")), graph)
        >>> result.passed, result.scaled_dims["hidden"]
        (True, (64, 2))
    """
    start = time.perf_counter()
    if plan.pipeline:
        return _verify_pipeline(plan, graph, seed=seed, scale=scale)
    full = planned_graph(plan, graph)
    check_tensor_records(plan, full)  # what export emits is what runs below
    small, dims = _scaled(plan, graph, full) if scale else (full, {})
    result = emulate(plan, small, seed, progress=progress)
    culprit = None if result.divergence is None else result.divergence.name
    return Verification(passed=result.passed, max_abs_err=result.max_abs_err,
                        max_rel_err=result.max_rel_err, scaled_dims=dims, culprit=culprit,
                        message=result.summary(), seed=seed,
                        seconds=time.perf_counter() - start, result=result)


def _verify_pipeline(plan: Plan, graph: OpGraph, *, seed: int, scale: bool) -> Verification:
    """A pipelined plan, micro-batch by micro-batch (:mod:`autoshard.verify.pipeline`), on
    the smallest copy of the model whose stage model runs the plan's program."""
    start = time.perf_counter()
    config = zoo.config_of(graph)
    if config is None:
        raise EmulationError("a pipelined plan is verified on a zoo model or Hugging Face "
                             "config (its stages are rebuilt from the config); graph "
                             f'"{graph.name}" is neither')
    chosen, dims = config, {}
    layers = int(plan.pipeline["stage_model_layers"])  # type: ignore[index]
    stage = replace(plan, mesh=tuple(a for a in plan.mesh if a[0] != "pp"))
    full = planned_graph(stage, zoo.build_config(replace(config, layers=layers)))
    check_tensor_records(stage, full)  # the records are the stage model's
    if scale:
        mesh = Mesh(axes=tuple(stage.mesh))
        for small in _candidates(config, mesh.size):
            try:
                copy = planned_graph(stage, zoo.build_config(replace(small, layers=layers)))
            except (GraphError, EmulationError):
                continue
            if same_program(stage, full, copy, mesh):
                chosen, dims = small, _statement(config, small)
                break
    run = emulate_pipeline(plan, chosen, seed=seed)
    result = run.result
    culprit = None if result.divergence is None else result.divergence.name
    return Verification(passed=result.passed, max_abs_err=result.max_abs_err,
                        max_rel_err=result.max_rel_err, scaled_dims=dims, culprit=culprit,
                        message=run.summary(), seed=seed,
                        seconds=time.perf_counter() - start, result=result)


def verify_and_attach(plan: Plan, graph: OpGraph, *, seed: int = 0) -> Plan:
    """``plan`` with its ``verification`` record set (for ``autoshard plan --verify``)."""
    return replace(plan, verification=verify(plan, graph, seed=seed).to_record())


# ---- scaling ------------------------------------------------------------------------------
def scaled_graph(plan: Plan, graph: OpGraph) -> tuple[OpGraph, dict[str, tuple[int, int]]]:
    """A small copy of the plan's graph that runs the same program (:func:`same_program`),
    and the dims scaled (planned → emulated); the plan's own graph and ``{}`` when none fits."""
    return _scaled(plan, graph, planned_graph(plan, graph))


def _scaled(plan: Plan, graph: OpGraph, full: OpGraph
            ) -> tuple[OpGraph, dict[str, tuple[int, int]]]:
    config = zoo.config_of(graph)
    if config is None:
        return full, {}
    mesh = Mesh(axes=tuple(plan.mesh))
    for small_config in _candidates(config, mesh.size):
        try:
            small = planned_graph(plan, zoo.build_config(small_config))
        except (GraphError, EmulationError) as exc:
            logger.debug("scaling %s failed: %s", config.name, exc)
            continue
        if same_program(plan, full, small, mesh):
            return small, _statement(config, small_config)
    return full, {}


SCALED = ("batch", "seq", "hidden", "ffn", "vocab", "heads", "kv_heads", "head_dim", "experts",
          "expert_ffn")
"""The model dims a scaled copy changes (and reports); layers and dtype stay."""


def _dims(config: ModelConfig) -> dict[str, int]:
    keys = ("batch", "seq", "hidden", "ffn") if config.family is Family.MLP else SCALED
    dims = {key: getattr(config.moe if key.startswith("expert") else config, key, None)
            for key in keys}
    return {k: v for k, v in dims.items() if v is not None}


def _candidates(config: ModelConfig, devices: int) -> list[ModelConfig]:
    """Scaled configs to try, smallest first: head dims of 2 (attention keeps them whole, so
    plans rarely shard them), then the divisibility-preserving rule, then the rule keeping
    every local size above 1."""
    aggressive = scale_config(config, devices, keep_local=False)
    out = [aggressive] if config.family is Family.MLP else [
        _with_head_dim(aggressive, 2)]
    for candidate in (aggressive, scale_config(config, devices, keep_local=True)):
        if candidate not in out:
            out.append(candidate)
    return out


def _with_head_dim(config: ModelConfig, head_dim: int) -> ModelConfig:
    if config.explicit_head_dim is not None:
        return replace(config, explicit_head_dim=head_dim)
    return replace(config, hidden=config.heads * head_dim)


def _statement(before: ModelConfig, after: ModelConfig) -> dict[str, tuple[int, int]]:
    old, new = _dims(before), _dims(after)
    return {k: (old[k], new[k]) for k in sorted(old) if old[k] != new[k]}


def scale_config(config: ModelConfig, devices: int, *, keep_local: bool) -> ModelConfig:
    """``config`` with every model dim shrunk by :func:`shrink` (see the module docstring):
    heads as KV heads × group size, head dims as twice their rotary half; layers, dtype and
    the architecture unchanged."""
    def small(size: int) -> int:
        return shrink(size, devices, keep_local=keep_local)

    fields: dict[str, Any] = {key: small(getattr(config, key)) for key in ("batch", "seq", "ffn")}
    if config.vocab is not None:
        fields["vocab"] = small(config.vocab)
    if config.moe is not None:
        fields["moe"] = _scaled_moe(config.moe, small)
    if config.mla is not None:
        return _scaled_mla(config, small, fields)
    if config.family is Family.MLP:
        return replace(config, hidden=small(config.hidden), **fields)
    kv_heads = small(config.kv_heads)
    heads = kv_heads * small(config.heads // config.kv_heads)
    head_dim = 2 * small(config.head_dim // 2)
    if config.explicit_head_dim is None:
        return replace(config, heads=heads, kv_heads=kv_heads, hidden=heads * head_dim,
                       **fields)
    return replace(config, heads=heads, kv_heads=kv_heads, explicit_head_dim=head_dim,
                   hidden=small(config.hidden), **fields)


def _scaled_mla(config: ModelConfig, small: Any, fields: dict[str, Any]) -> ModelConfig:
    """Latent attention: heads, ranks and head dims shrunk (the rotary dim as twice its
    half), the hidden size by the rule; the explicit head dim follows the rotary dim."""
    mla = config.mla
    rope = 2 * small(mla.qk_rope_head_dim // 2)
    scaled = replace(mla, q_lora_rank=None if mla.q_lora_rank is None else small(mla.q_lora_rank),
                     kv_lora_rank=small(mla.kv_lora_rank),
                     qk_nope_head_dim=small(mla.qk_nope_head_dim), qk_rope_head_dim=rope,
                     v_head_dim=small(mla.v_head_dim))
    heads = small(config.heads)
    return replace(config, heads=heads, kv_heads=heads, explicit_head_dim=rope, mla=scaled,
                   hidden=small(config.hidden), **fields)


def _scaled_moe(moe: Any, small: Any) -> Any:
    """Experts and expert widths shrunk like every dim (keeping at least top-k experts); the
    capacity follows from the scaled seq by the model's own rule."""
    experts = small(moe.experts)
    return replace(moe, experts=experts if experts >= moe.top_k else moe.experts,
                   expert_ffn=small(moe.expert_ffn),
                   shared_ffn=small(moe.shared_ffn) if moe.shared_ffn else 0)


def shrink(size: int, devices: int, *, keep_local: bool) -> int:
    """The smallest ``g·k`` (``g = gcd(size, devices)``) dividing by the same mesh-axis
    products as ``size``; with ``keep_local``, ``k ≥ 2`` unless ``size == g``.

    Example:
        >>> shrink(4096, 8, keep_local=False), shrink(50257, 8, keep_local=False)
        (8, 3)
        >>> shrink(6, 8, keep_local=False), shrink(6, 8, keep_local=True)
        (2, 6)
    """
    g = math.gcd(size, devices)
    if size == g:
        return size
    k = 2 if keep_local or g == 1 else 1
    while math.gcd(k, devices // g) != 1:
        k += 1
    return min(g * k, size)


def same_program(plan: Plan, full: OpGraph, small: OpGraph, mesh: Mesh) -> bool:
    """Whether ``small`` runs the plan made for ``full``: every op's chosen strategy exists on
    both (by its label) and each operand's sharding divides ``small``'s shape exactly when it
    divides ``full``'s.

    Example:
        >>> from graphs import zoo
        >>> from autoshard.planning.planner import plan as make_plan
        >>> full = zoo.build("mlp", layers=1, batch=8, seq=1024)
        >>> dp4 = Mesh.parse("dp=4")
        >>> planned = make_plan(full, dp4)   # data parallel: the batch split 4 ways
        >>> planned.ops["layers.0.mlp.up"].strategy
        'dp:b'
        >>> small = dict(layers=1, hidden=4, ffn=8, seq=4)
        >>> same_program(planned, full, zoo.build("mlp", batch=4, **small), dp4)
        True
        >>> same_program(planned, full, zoo.build("mlp", batch=6, **small), dp4)  # uneven
        False
    """
    for op in small.ops:
        record = plan.ops.get(op.name)
        if record is None:
            return False
        planned = strategy_of(full, full.op_by_name(op.name), mesh, record.strategy)
        copied = strategy_of(small, op, mesh, record.strategy)
        if planned is None or copied is None:
            logger.debug("op %s: strategy %s missing", op.name, record.strategy)
            return False
        full_specs, small_specs = full.specs(full.op_by_name(op.name)), small.specs(op)
        for side in (0, 1):
            for before, after, big, little in zip(
                    planned.inputs if side == 0 else planned.outputs,
                    copied.inputs if side == 0 else copied.outputs,
                    full_specs[side], small_specs[side], strict=True):
                if before.is_divisible(big.shape) != after.is_divisible(little.shape):
                    logger.debug("op %s: %s divides differently at small dims", op.name,
                                 after.short())
                    return False
    return True
