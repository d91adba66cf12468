"""``cross_entropy_bwd`` and ``embedding_bwd``: the backward kinds of the ops that index by
integer ids (targets, tokens).

* ``cross_entropy_bwd(logits [..., v], targets int [...], dloss []) {count}`` →
  dlogits = (softmax(logits) − onehot(targets)) · dloss / count, in the logits' dtype.
  ``count`` is the GLOBAL number of target positions (the forward loss is their mean), so the
  reference is right on local shards of the batch-like factors, which are PARALLEL here; v is
  BLOCKED (the softmax needs the whole row). Linear in dloss. FLOPs: 5 per logit.
* ``embedding_bwd(ids int [...], dy [..., h]) {vocab}`` → dtable [vocab, h]: scatter-add of
  the rows of dy into the rows the ids name. Signature ``"d0 d1, d0 d1 h -> v h"``: the
  batch-like factors are CONTRACTED (sum), so under data parallelism the table gradient comes
  out Partial(sum), like any weight gradient; h PARALLEL; v BLOCKED (the vocab-parallel rule,
  each shard keeping only its ids, is a hand rule for ``autoshard`` to add). Linear in dy.
  FLOPs: one add per element of dy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import AttrError, ShapeError
from graphs.ops._common import dim_names, need_int, numel_flops, signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.ops.softmax import log_softmax
from graphs.signature import DimSignature, bind_signature

FLOPS_PER_LOGIT = 5


def _infer_ce(ins: Specs, attrs: Attrs) -> Specs:
    logits, targets, dloss = ins
    need_int(targets, "cross_entropy_bwd", "targets")
    if not logits.shape or logits.shape[:-1] != targets.shape or dloss.shape != ():
        msg = (f"cross_entropy_bwd: logits {list(logits.shape)}, targets "
               f"{list(targets.shape)}, dloss {list(dloss.shape)} must be [..., v], [...], []")
        raise ShapeError(msg)
    if int(attrs["count"]) <= 0:
        raise AttrError(f'cross_entropy_bwd: attr "count" must be positive, got {attrs["count"]}')
    return (logits,)


def _signature_ce(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = dim_names(len(ins[1].shape))
    text = signature_text([[*names, "v"], names, []], [[*names, "v"]])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=["v"])


def _ce(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    logits, targets, dloss = arrays
    probs = np.exp(log_softmax(logits.astype(np.float64), -1))
    onehot = np.arange(logits.shape[-1]) == targets[..., None]
    grad = (probs - onehot) * (float(dloss) / int(attrs["count"]))
    return (grad.astype(logits.dtype),)


register_op(OpDef(kind="cross_entropy_bwd", infer=_infer_ce, signature=_signature_ce,
                  reference=_ce, flops=numel_flops(FLOPS_PER_LOGIT),
                  partial_inputs=(frozenset({2}),), num_inputs=3, required_attrs={"count": int},
                  doc="Gradient of the mean cross-entropy w.r.t. the logits."))


def _infer_embedding(ins: Specs, attrs: Attrs) -> Specs:
    ids, dy = ins
    need_int(ids, "embedding_bwd", "ids")
    if dy.shape[:-1] != ids.shape or len(dy.shape) != len(ids.shape) + 1:
        msg = (f"embedding_bwd: dy {list(dy.shape)} must be the ids shape "
               f"{list(ids.shape)} plus a hidden dim")
        raise ShapeError(msg)
    vocab = int(attrs["vocab"])
    if vocab <= 0:
        raise AttrError(f'embedding_bwd: attr "vocab" must be positive, got {vocab}')
    return (TensorSpec((vocab, dy.shape[-1]), dy.dtype),)


def _signature_embedding(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = dim_names(len(ins[0].shape))
    text = signature_text([names, [*names, "h"]], [["v", "h"]])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=["v"])


def _embedding(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    ids, dy = arrays
    table = np.zeros((int(attrs["vocab"]), dy.shape[-1]), dtype=dy.dtype)
    np.add.at(table, ids.reshape(-1), dy.reshape(-1, dy.shape[-1]))
    return (table,)


def _embedding_flops(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return float(ins[1].numel)


register_op(OpDef(kind="embedding_bwd", infer=_infer_embedding, signature=_signature_embedding,
                  reference=_embedding, flops=_embedding_flops, partial_inputs=(frozenset({1}),),
                  num_inputs=2, required_attrs={"vocab": int},
                  doc="Scatter-add of dy rows into a [vocab, h] table gradient."))
