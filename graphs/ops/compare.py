"""``compare`` {op: lt | le | gt | ge | eq | ne}: an elementwise comparison giving a bool mask.

Why a kind: imported programs build masks (ReLU's backward selects with ``x > 0``, causal
attention compares positions) and feed them to ``where``. Broadcasting and signature as the
binary elementwise kinds (every factor PARALLEL). The output is bool, so autodiff never asks
for a gradient through it (no VJP on purpose). FLOPs: one per output element.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import AttrError
from graphs.ir import DType
from graphs.ops._common import numel_flops, same_dtype
from graphs.ops.elementwise import broadcast_shape, broadcast_signature
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature

COMPARISONS = {"lt": np.less, "le": np.less_equal, "gt": np.greater,
               "ge": np.greater_equal, "eq": np.equal, "ne": np.not_equal}


def _check(attrs: Attrs) -> str:
    op = str(attrs["op"])
    if op not in COMPARISONS:
        raise AttrError(f'compare: attr op "{op}" is not one of {", ".join(COMPARISONS)}')
    return op


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    _check(attrs)
    same_dtype(ins, "compare")
    return (TensorSpec(broadcast_shape([t.shape for t in ins], "compare"), DType.BOOL),)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    return broadcast_signature(ins, outs)


def _reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    return (np.asarray(COMPARISONS[_check(attrs)](*arrays)),)


COMPARE = register_op(OpDef(kind="compare", infer=_infer, signature=_signature,
                            reference=_reference, flops=numel_flops(1), num_inputs=2,
                            required_attrs={"op": str},
                            doc="Elementwise comparison (lt le gt ge eq ne) → bool."))
