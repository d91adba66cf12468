"""``attention_bwd(q, k, v, dout) {causal, scale}`` → (dq, dk, dv): the flash-attention
backward (Dao 2022, algorithm 2) as one op.

Why one op: like the forward kind it recomputes the probabilities P = softmax(q·kᵀ·scale)
inside the op, so no s×t tensor is ever a graph tensor (nothing s² is saved or moved).
dv = Pᵀ·dout, dP = dout·vᵀ, dS = P ∘ (dP − D), dq = dS·k·scale, dk = dSᵀ·q·scale, with
D = rowsum(P ∘ dP), which equals FlashAttention's rowsum(dout ∘ out) since out = P·v. Taking
D that way means the op does not read the forward output: the only attention tensor the
backward keeps is the one the output projection saves anyway (Korthikanti's 2sbh "output
projection input"), instead of a second copy before the head-merge reshape.
Grouped-query heads as in the forward kind (query head i uses kv head i // g); dk and dv sum
over the g query heads of each kv head.

Signature ``"b s (hk g) d, b t hk d, b t hk e, b s (hk g) e ->
b s (hk g) d, b t hk d, b t hk e"``: b and hk PARALLEL; t, d, e BLOCKED as in the forward;
s and g BLOCKED too, because dk and dv sum over them (parallel for dq, contracted for dk/dv:
no single factor kind describes that). Linear in dout (partial_inputs {3}).

FLOPs: five matmuls, 2·b·s·t·hq·(3d + 2e) (= 2.5× the forward's 2·b·s·t·hq·(d + e) when
d = e), dense like the forward; bytes: the operands and results only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphs.errors import ShapeError
from graphs.ops._common import same_dtype
from graphs.ops.attention import attention_kernel, infer_attention
from graphs.ops.kernel_shape import AttentionShape
from graphs.ops.registry import Attrs, OpDef, Specs, register_op
from graphs.signature import DimSignature, bind_signature

SIGNATURE = ("b s (hk g) d, b t hk d, b t hk e, b s (hk g) e -> "
             "b s (hk g) d, b t hk d, b t hk e")


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    q, k, v, dout = ins
    (want,) = infer_attention((q, k, v), attrs)
    if dout != want:
        msg = (f"attention_bwd: dout {list(dout.shape)} {dout.dtype.value} must be shaped like "
               f"the attention output {list(want.shape)} {want.dtype.value}")
        raise ShapeError(msg)
    same_dtype(ins, "attention_bwd")
    return q, k, v


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    return bind_signature(SIGNATURE, [t.shape for t in ins], [t.shape for t in outs],
                          blocked=["s", "g", "t", "d", "e"])


def probabilities(q: np.ndarray, k: np.ndarray, scale: float, causal: bool) -> np.ndarray:
    """P [b, hq, s, t] with k already expanded to the query heads."""
    s, t = q.shape[1], k.shape[1]
    scores = np.einsum("bshd,bthd->bhst", q, k) * scale
    if causal:
        visible = np.arange(t)[None, :] <= np.arange(s)[:, None] + (t - s)
        scores = np.where(visible, scores, -np.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    return weights / weights.sum(axis=-1, keepdims=True)


def _reference(arrays: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    q, k, v, dout = arrays
    b, t, hk = k.shape[:3]
    group = q.shape[2] // hk
    scale = attrs.get("scale")
    scale = 1.0 / np.sqrt(q.shape[3]) if scale is None else float(scale)
    heads = np.arange(q.shape[2]) // group
    keys, values = k[:, :, heads], v[:, :, heads]
    probs = probabilities(q, keys, scale, bool(attrs.get("causal", True)))
    dv = np.einsum("bhst,bshe->bthe", probs, dout)
    dprobs = np.einsum("bshe,bthe->bhst", dout, values)
    rows = np.einsum("bhst,bhst->bhs", probs, dprobs)[..., None]
    dscores = probs * (dprobs - rows)
    dq = np.einsum("bhst,bthd->bshd", dscores, keys) * scale
    dk = np.einsum("bhst,bshd->bthd", dscores, q) * scale
    dk = dk.reshape(b, t, hk, group, -1).sum(axis=3)
    dv = dv.reshape(b, t, hk, group, -1).sum(axis=3)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


def _flops(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    b, s, hq, d = ins[0].shape
    t, e = ins[1].shape[1], ins[2].shape[3]
    return 2.0 * b * s * t * hq * (3 * d + 2 * e)


def _kernel(ins: Specs, outs: Specs, attrs: Attrs) -> AttentionShape:
    return attention_kernel(ins, outs, attrs, backward=True)


register_op(OpDef(kind="attention_bwd", infer=_infer, signature=_signature, reference=_reference,
                  flops=_flops, partial_inputs=(frozenset({3}),), num_inputs=4, num_outputs=3,
                  kernel=_kernel,
                  optional_attrs={"causal": True, "scale": None},
                  doc="Flash-attention backward; see the module docstring."))
