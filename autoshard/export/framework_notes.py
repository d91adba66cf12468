"""What a plan needs beyond placing tensors and redistributing them: framework-level code.

Why: the exported scripts place every tensor and run every planned reshard (DTensor
``redistribute``, JAX ``with_sharding_constraint``), which covers data, tensor, sequence and
fully sharded parallelism, the expert-sharded weights and their optimizer state, and
DeepSpeed-Ulysses' all-to-alls (they are reshards between a sequence- and a head-sharded
layout). Two things are not a layout change of a dense tensor and the user's framework must do
them; the notes say where the plan uses them and which API does them:

* **MoE token routing**: top-k, capacity slots, dispatch and combine are index scatter/gather
  on the local tokens (``torch.Tensor.index_put_`` / ``index_add_``; JAX ``.at[].set`` /
  ``.at[].add``); when the plan moves the expert buffers between token- and expert-sharded
  layouts that move is an all-to-all over the named mesh axes
  (``torch.distributed.all_to_all_single`` on those mesh dims' process group, as
  Megatron-Core's ``MoEAlltoAllTokenDispatcher`` does; ``jax.lax.all_to_all`` inside
  ``jax.shard_map``).
* **Ring attention**: the attention's sequence sharded over a ring; PyTorch's
  ``torch.distributed.tensor.experimental.context_parallel`` (ring attention for
  ``scaled_dot_product_attention``) or Megatron-Core's ``--context-parallel-size`` with
  ``--cp-comm-type p2p``; in JAX a ``jax.shard_map`` loop of ``jax.lax.ppermute`` steps with
  the online-softmax merge. Megatron-Core balances causal work with its zig-zag sequence
  split (``get_batch_on_this_cp_rank``): feed the tokens and rotary positions in that order.

Example:
    >>> import autoshard
    >>> from graphs import zoo
    >>> graph = zoo.build("llama3.1-8b", layers=1, seq=65536, batch=1)
    >>> plan = autoshard.plan(graph, autoshard.Mesh.parse("cp=8"), training=True)
    >>> [note.topic for note in framework_notes(plan)]
    ['ring attention']
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

TORCH_ALL_TO_ALL = "torch.distributed.all_to_all_single"
JAX_ALL_TO_ALL = "jax.lax.all_to_all in jax.shard_map"
TORCH_RING = "torch.distributed.tensor.experimental.context_parallel"
JAX_RING = "jax.lax.ppermute in jax.shard_map"


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameworkNote:
    """One thing the plan needs framework code for: where, over which axes, and the APIs."""

    topic: str
    ops: tuple[str, ...]
    axes: tuple[str, ...]
    detail: str
    torch_api: str
    jax_api: str

    def lines(self) -> list[str]:
        """The note as comment lines for a script."""
        where = ", ".join(self.ops[:3]) + (f" and {len(self.ops) - 3} more"
                                            if len(self.ops) > 3 else "")
        return [f"{self.topic} over {','.join(self.axes) or 'no axis'}: {self.detail}",
                f"  ops: {where}", f"  PyTorch: {self.torch_api}", f"  JAX: {self.jax_api}"]


def framework_notes(plan: Any) -> tuple[FrameworkNote, ...]:
    """The plan's parts that need framework-level code, in a stable order."""
    return tuple(note for note in (_routing(plan), _ring(plan)) if note is not None)


def _routing(plan: Any) -> FrameworkNote | None:
    routed = sorted(name for name, rec in plan.ops.items()
                    if rec.kind in ("moe_dispatch", "moe_combine"))
    if not routed:
        return None
    buffers = {f"{name}.out" for name in routed if plan.ops[name].kind == "moe_dispatch"}
    axes: set[str] = set()
    for record in plan.reshards:
        if record.tensor in buffers or record.consumer in routed:
            axes.update(a for c in record.collectives if c.kind == "all_to_all" for a in c.axes)
    moved = sorted(axes)
    detail = ("top-k routing, capacity slots and the token scatter/gather are local index "
              "ops; the expert buffers move between token- and expert-sharded layouts by "
              "all-to-all" if moved else
              "top-k routing, capacity slots and the token scatter/gather are local index "
              "ops; no all-to-all (tokens reach their experts by the planned reshards)")
    return FrameworkNote(topic="MoE token dispatch/combine", ops=tuple(routed),
                         axes=tuple(moved), detail=detail,
                         torch_api=f"index_put_/index_add_; {TORCH_ALL_TO_ALL} on the mesh "
                                   "dims' process group (Megatron-Core "
                                   "MoEAlltoAllTokenDispatcher)",
                         jax_api=f".at[].set/.at[].add; {JAX_ALL_TO_ALL}")


def _ring(plan: Any) -> FrameworkNote | None:
    by_axes: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for name, rec in plan.ops.items():
        if rec.kind in ("attention", "attention_bwd") and ":s*" in rec.strategy:
            axes = tuple(part.split(":")[0] for part in rec.strategy.split()
                         if part.endswith(":s*"))
            by_axes[axes].append(name)
    if not by_axes:
        return None
    axes = tuple(sorted({a for key in by_axes for a in key}))
    ops = tuple(sorted(name for names in by_axes.values() for name in names))
    return FrameworkNote(topic="ring attention", ops=ops, axes=axes,
                         detail="queries and keys/values sharded along the sequence; K/V "
                                "blocks pass around the ring (point-to-point), merged with "
                                "the online softmax; zig-zag order balances causal work",
                         torch_api=f"{TORCH_RING} (or Megatron-Core --cp-comm-type p2p)",
                         jax_api=JAX_RING)
