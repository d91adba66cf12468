"""``embedding`` (ids int [...], table [v, h]) → [..., h]: a row lookup.

The vocab factor v is BLOCKED in this generic signature (a local table shard cannot serve ids
outside it); the vocab-sharded strategy (masked lookup → Partial(sum)) is a hand-written rule
in ``autoshard``. The op is linear in the table, so partial_inputs is {1}. FLOPs: 0 (a
gather); bytes moved: the ids, the rows actually read, and the output.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.ops import vjps
from graphs.ops._common import dim_names, need_int, need_rank, signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    ids, table = ins
    need_int(ids, "embedding", "ids")
    need_rank(table, 2, "embedding", "table")
    return (TensorSpec((*ids.shape, table.shape[1]), table.dtype),)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = dim_names(len(ins[0].shape))
    text = signature_text([names, ["v", "h"]], [[*names, "h"]])
    return bind_signature(text, [t.shape for t in ins], [outs[0].shape], blocked=["v"])


def _reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    ids, table = arrays
    return (table[ids],)


def _zero(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return 0.0


def _bytes(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return float(ins[0].nbytes + 2 * outs[0].nbytes)


register_op(OpDef(kind="embedding", infer=_infer, signature=_signature, reference=_reference,
                  flops=_zero, bytes_moved=_bytes, partial_inputs=(frozenset({1}),),
                  num_inputs=2, vjp=vjps.embedding_vjp, doc="table[ids]; vocab blocked."))
