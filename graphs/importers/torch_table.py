"""The aten op → handler table (what the torch importer maps, in one place to read).

Keys are ``str(node.target)`` of ``torch.export``'s aten IR (``aten.<name>.<overload>``) plus
``getitem`` for tuple outputs. Anything else becomes an ``opaque`` op. ``IGNORED`` nodes
produce no value (assertions).
"""

from __future__ import annotations

from graphs.importers import torch_aten as a
from graphs.importers import torch_aten_math as m
from graphs.importers.torch_attention import lower_sdpa

IGNORED = frozenset({
    "aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
    "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg",
})

_IDENTITY = ("alias.default", "contiguous.default", "clone.default", "detach.default",
             "dropout.default", "lift_fresh_copy.default", "feature_dropout.default",
             "alpha_dropout.default")
_TO = ("to.dtype", "to.dtype_layout", "to.device", "to.other", "_to_copy.default",
       "type_as.default")
_VIEW = ("view.default", "reshape.default", "_unsafe_view.default", "flatten.using_ints",
         "unflatten.int", "unsqueeze.default", "squeeze.default", "squeeze.dim", "squeeze.dims",
         "view_as.default", "reshape_as.default")
_TRANSPOSE = ("transpose.int", "permute.default", "t.default", "swapaxes.default")

HANDLERS = {
    **{f"aten.{k}": a._identity for k in _IDENTITY},
    **{f"aten.{k}": a._to for k in _TO},
    **{f"aten.{k}": a._view for k in _VIEW},
    **{f"aten.{k}": a._transpose for k in _TRANSPOSE},
    **{f"aten.{kind}.{o}": a._binary(kind) for kind in ("add", "sub", "mul", "div")
       for o in ("Tensor", "Scalar")},
    "aten.rsub.Scalar": a._rsub,
    **{f"aten.{kind}.default": a._unary(kind)
       for kind in ("neg", "exp", "log", "tanh", "sigmoid", "relu", "silu")},
    "aten.gelu.default": a._gelu,
    "aten.pow.Tensor_Scalar": a._power(None),
    "aten.rsqrt.default": a._power(-0.5),
    "aten.sqrt.default": a._power(0.5),
    "aten.reciprocal.default": a._power(-1.0),
    "aten.square.default": a._power(2.0),
    "aten.where.self": a._where,
    "aten.expand.default": a._expand,
    "aten.expand_as.default": a._expand,
    "aten.cat.default": a._cat,
    "aten.split.Tensor": a._split,
    "aten.split_with_sizes.default": a._split,
    "aten.chunk.default": a._split,
    "aten.slice.Tensor": a._slice,
    "aten.select.int": a._select,
    "aten.pad.default": a._pad,
    "aten.constant_pad_nd.default": a._pad,
    "getitem": a._getitem,
    "aten.mm.default": m._mm,
    "aten.bmm.default": m._bmm,
    "aten.addmm.default": m._addmm,
    "aten.linear.default": m._linear,
    "aten.matmul.default": m._matmul,
    "aten.einsum.default": m._aten_einsum,
    "aten.sum.dim_IntList": m._reduce("sum"),
    "aten.sum.default": m._reduce("sum"),
    "aten.mean.dim": m._reduce("mean"),
    "aten.mean.default": m._reduce("mean"),
    "aten.amax.default": m._reduce("max"),
    "aten.softmax.int": m._softmax("softmax"),
    "aten._softmax.default": m._softmax("softmax"),
    "aten.log_softmax.int": m._softmax("log_softmax"),
    "aten._log_softmax.default": m._softmax("log_softmax"),
    "aten.layer_norm.default": m._norm("layer_norm"),
    "aten.rms_norm.default": m._norm("rms_norm"),
    "aten.embedding.default": m._embedding,
    "aten.cross_entropy_loss.default": m._cross_entropy,
    "aten.scaled_dot_product_attention.default": lower_sdpa,
}
