"""``cross_entropy`` (logits [..., v], targets int [...]) → scalar f32 mean loss.

Signature ``"d0 d1 v, d0 d1 -> "``: v is BLOCKED (log-sum-exp needs the whole row; Megatron's
vocab-parallel loss is a hand-written rule in ``autoshard``), the batch-like factors are
CONTRACTED with reduction "avg": the mean of local means over equal shards is the global mean.
FLOPs: 5 per logit (max, subtract, exp, sum, pick), a documented estimate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import ShapeError
from graphs.ir import DType
from graphs.ops import vjps
from graphs.ops._common import dim_names, need_int, signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.ops.softmax import log_softmax
from graphs.signature import DimSignature, bind_signature

FLOPS_PER_LOGIT = 5


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    logits, targets = ins
    need_int(targets, "cross_entropy", "targets")
    if not logits.shape or logits.shape[:-1] != targets.shape:
        msg = (f"cross_entropy: targets shape {list(targets.shape)} must be the logits shape "
               f"{list(logits.shape)} without its last (vocab) dim")
        raise ShapeError(msg)
    return (TensorSpec((), DType.F32),)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = dim_names(len(ins[1].shape))
    text = signature_text([[*names, "v"], names], [[]])
    return bind_signature(text, [t.shape for t in ins], [()], blocked=["v"],
                          reductions=dict.fromkeys(names, "avg"))


def _reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    logits, targets = arrays
    logp = log_softmax(logits.astype(np.float64), -1)
    picked = np.take_along_axis(logp, targets[..., None].astype(np.int64), axis=-1)
    return (np.asarray(-picked.mean(), dtype=np.float32),)


def _flops(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return float(FLOPS_PER_LOGIT * ins[0].numel)


register_op(OpDef(kind="cross_entropy", infer=_infer, signature=_signature,
                  reference=_reference, flops=_flops, num_inputs=2, vjp=vjps.cross_entropy_vjp,
                  doc="Mean softmax cross-entropy over all target positions."))
