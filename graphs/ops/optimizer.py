"""Optimizer step kinds ``sgd_step`` and ``adamw_step``: one op per parameter, elementwise.

Why they are ops: the optimizer's state (fp32 master weights, two moments) is most of a
training run's memory (12 of the 16 bytes per parameter of mixed-precision Adam), and ZeRO/FSDP
exist to shard it. As elementwise ops over (param, grad, state…) their strategies shard every
operand alike, so the state is "sharded with its parameter" by construction and the search
decides where the reduce-scatter of the gradient and the all-gather of the updated parameter go.

Operands (all the parameter's shape):

* ``sgd_step(param, grad) -> param_next``: ``p - lr·g``.
* ``adamw_step(param, grad, m, v[, master]) -> (param_next, m_next, v_next[, master_next])``:
  AdamW (Loshchilov & Hutter) with bias correction at step ``step``; m, v and master are fp32.
  With ``master`` (mixed precision: bf16 param and grad) the update is applied to the fp32
  master copy and ``param_next`` is its cast to the param dtype; without it the param is
  updated directly (fp32 training).

``updates`` marks every output as overwriting its input in place (param, m, v, master).
FLOPs: 2 per element for SGD, 14 per element for AdamW (moments 6, bias-corrected update 6,
decay 2); transcendentals are not weighted more, as for the other elementwise kinds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import ShapeError
from graphs.ir import DType
from graphs.ops._common import dim_names, numel_flops, signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature

STATE_DTYPE = DType.F32


def _same_shapes(ins: Specs, kind: str) -> tuple[int, ...]:
    shape = ins[0].shape
    for index, spec in enumerate(ins[1:], start=1):
        if spec.shape != shape:
            msg = (f"{kind}: operand {index} has shape {list(spec.shape)} but the parameter "
                   f"has {list(shape)}")
            raise ShapeError(msg)
    return shape


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names = dim_names(len(ins[0].shape))
    text = signature_text([names] * len(ins), [names] * len(outs))
    return bind_signature(text, [t.shape for t in ins], [t.shape for t in outs])


def _infer_sgd(ins: Specs, attrs: Attrs) -> Specs:
    shape = _same_shapes(ins, "sgd_step")
    return (TensorSpec(shape, ins[0].dtype),)


def _sgd(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    param, grad = arrays
    return ((param - float(attrs["lr"]) * grad).astype(param.dtype, copy=False),)


def _infer_adamw(ins: Specs, attrs: Attrs) -> Specs:
    if len(ins) not in (4, 5):
        raise ShapeError(f"adamw_step takes (param, grad, m, v[, master]), got {len(ins)} "
                         "operands")
    shape = _same_shapes(ins, "adamw_step")
    for index in range(2, len(ins)):
        if ins[index].dtype is not STATE_DTYPE:
            msg = (f"adamw_step: optimizer state operand {index} must be f32, "
                   f"got {ins[index].dtype.value}")
            raise ShapeError(msg)
    state = TensorSpec(shape, STATE_DTYPE)
    outs = [TensorSpec(shape, ins[0].dtype), state, state]
    if len(ins) == 5:
        outs.append(state)
    return tuple(outs)


def adamw_update(param: np.ndarray, grad: np.ndarray, m: np.ndarray, v: np.ndarray,
                 master: np.ndarray | None, attrs: Attrs) -> tuple[np.ndarray, ...]:
    """One AdamW step exactly as ``torch.optim.AdamW`` (decoupled decay, bias correction)."""
    lr, eps, decay = float(attrs["lr"]), float(attrs["eps"]), float(attrs["weight_decay"])
    beta1, beta2, step = float(attrs["beta1"]), float(attrs["beta2"]), int(attrs["step"])
    weights = param if master is None else master
    grad = grad.astype(m.dtype, copy=False)  # a 16-bit gradient is upcast, as amp does
    m_next = beta1 * m + (1.0 - beta1) * grad
    v_next = beta2 * v + (1.0 - beta2) * grad * grad
    m_hat = m_next / (1.0 - beta1**step)
    v_hat = v_next / (1.0 - beta2**step)
    updated = weights * (1.0 - lr * decay) - lr * m_hat / (np.sqrt(v_hat) + eps)
    param_next = updated.astype(param.dtype, copy=False)
    if master is None:
        return param_next, m_next.astype(m.dtype), v_next.astype(v.dtype)
    return (param_next, m_next.astype(m.dtype), v_next.astype(v.dtype),
            updated.astype(master.dtype, copy=False))


def _adamw(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    param, grad, m, v = arrays[:4]
    master = arrays[4] if len(arrays) == 5 else None
    return adamw_update(param, grad, m, v, master, attrs)


register_op(OpDef(kind="sgd_step", infer=_infer_sgd, signature=_signature, reference=_sgd,
                  flops=numel_flops(2), num_inputs=2, optional_attrs={"lr": 1e-3},
                  updates=(0,), doc="Plain SGD step p - lr·g, in place."))
register_op(OpDef(kind="adamw_step", infer=_infer_adamw, signature=_signature, reference=_adamw,
                  flops=numel_flops(14), num_inputs=None, num_outputs=None,
                  optional_attrs={"lr": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8,
                                  "weight_decay": 0.1, "step": 1},
                  updates=(0, 2, 3, 4),
                  doc="AdamW step on (param, grad, m, v[, fp32 master]), in place."))
