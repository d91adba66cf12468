"""``aten.scaled_dot_product_attention`` → the ``attention`` kind (flash layout, GQA, causal).

torch's layout is q [b, hq, s, d], k [b, hk, t, d], v [b, hk, t, e]; ours is [b, s, h, d], so
q, k and v are transposed in and the result transposed back (free layout ops for the planner).
Grouped-query attention: when k and v arrive with their heads repeated by the Hugging Face
``repeat_kv`` pattern (``unsqueeze(x, 2)`` → ``expand`` to [b, hk, g, t, d] → ``reshape`` to
[b, hk·g, t, d]) the un-repeated tensors are used, which is exactly our kind's grouping (query
head i reads kv head i // g); ``enable_gqa=True`` gives the same directly.

Masks: ``is_causal=True`` without a mask is causal when s = t (torch aligns the triangle top
left, ours bottom right; they agree only then). An ``attn_mask`` must be static (see
:mod:`graphs.importers.torch_static`); it is evaluated and must equal, after broadcasting,
either the causal triangle (→ ``causal=True``) or all-visible (→ ``causal=False``). A boolean
mask marks visible entries True; a float mask is additive (0 visible, ≤ −1e4 hidden). Any
other mask (padding, sliding windows, ALiBi), or a mask that cannot be evaluated, makes the op
unmapped. Dropout is not modelled (it does not change the planner's costs).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from graphs.importers.torch_lower import Lowering, Unmapped, arg, shape_of

logger = logging.getLogger(__name__)

_VIEWS = ("aten.reshape.default", "aten.view.default", "aten._unsafe_view.default")
_HIDDEN = -1e4


def _ungrouped(node: Any) -> tuple[Any, int]:
    """(source node, g) when ``node`` is a repeat_kv of its source, else (node, 1)."""
    if str(node.target) not in _VIEWS:
        return node, 1
    expand = node.args[0]
    if str(getattr(expand, "target", "")) != "aten.expand.default":
        return node, 1
    unsqueeze = expand.args[0]
    if (str(getattr(unsqueeze, "target", "")) != "aten.unsqueeze.default"
            or unsqueeze.args[1] != 2):
        return node, 1
    source = unsqueeze.args[0]
    b, hk, t, d = shape_of(source)
    wide = shape_of(expand)
    if len(wide) != 5 or wide[:2] != (b, hk) or wide[3:] != (t, d):
        return node, 1
    if shape_of(node) != (b, hk * wide[2], t, d):
        return node, 1
    return source, wide[2]


def classify_mask(mask: Any, s: int, t: int) -> str | None:
    """"causal", "none" or None (anything else) for an evaluated torch mask."""
    values = mask.detach().cpu().numpy()
    if values.dtype == np.bool_:
        visible = values
    else:
        visible = values == 0
        if not np.all(values[~visible] <= _HIDDEN):
            return None
    try:
        visible = np.broadcast_to(visible, (*visible.shape[:-2], s, t))
    except ValueError:
        return None
    if visible.all():
        return "none"
    causal = np.arange(t)[None, :] <= np.arange(s)[:, None] + (t - s)
    return "causal" if np.array_equal(visible, np.broadcast_to(causal, visible.shape)) else None


def _causal(ctx: Lowering, node: Any, s: int, t: int) -> bool:
    mask = arg(node, 3, "attn_mask")
    if mask is None:
        if arg(node, 5, "is_causal", False) and s != t:
            raise Unmapped("is_causal with s != t (torch aligns the triangle top left)")
        return bool(arg(node, 5, "is_causal", False))
    value = ctx.static.evaluate(mask) if ctx.static.is_static(mask) else None
    kind = classify_mask(value, s, t) if value is not None else None
    if kind is None:
        raise Unmapped("attention mask is neither causal nor all-visible, or not static")
    return kind == "causal"


def lower_sdpa(ctx: Lowering, node: Any) -> str:
    q, k, v = node.args[:3]
    hq, s, t = shape_of(q)[1], shape_of(q)[2], shape_of(k)[2]
    causal = _causal(ctx, node, s, t)
    (k_src, gk), (v_src, gv) = _ungrouped(k), _ungrouped(v)
    if gk != gv:
        k_src, v_src = k, v
    if hq % shape_of(k_src)[1] or shape_of(k_src)[1] != shape_of(v_src)[1]:
        raise Unmapped(f"heads: q has {hq}, k {shape_of(k_src)[1]}, v {shape_of(v_src)[1]}")
    base = ctx.base_name(node, "attention")
    perm = [0, 2, 1, 3]
    flash = [ctx.emit("transpose", [ctx.tensor(x)], f"{base}.{what}_bshd", perm=perm)
             for x, what in ((q, "q"), (k_src, "k"), (v_src, "v"))]
    scale = node.kwargs.get("scale")
    out = ctx.emit("attention", flash, base, causal=causal,
                   scale=None if scale is None else float(scale))
    return ctx.emit("transpose", [out], f"{base}.bhsd", perm=perm)
