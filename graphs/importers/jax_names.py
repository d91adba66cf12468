"""Names for imported JAX programs: pytree key paths → dotted tensor names, name stacks →
op names that read like module paths, and the layer an equation belongs to.

Why it matters: plans speak the user's names (``params['layers'][0]['wq']`` becomes the
parameter ``layers.0.wq``), and the planner and its reports group identical layers by the
first dotted integer component of op names (``layers.3.attn/dot_general``). Rules:

* A scope comes from ``jax.named_scope`` and ``jit`` function names (joined with ``.``).
* When no scope names a layer (no dotted integer), the layer is *inferred*: an equation that
  reads parameters directly belongs to their layer (``layers.3`` for ``layers.3.wq``; none for
  ``ln_f``); otherwise it inherits from its inputs — in the forward pass the latest layer
  (by first appearance of the layer's parameters), in the backward pass the earliest.
  Users who want exact names wrap each layer in ``jax.named_scope(f"layers.{i}")``.
* Op names are ``[bwd/]<scope>/<primitive>``; repeats get ``_1``, ``_2`` … in program order,
  so layer 0 and layer 7 get the same suffixes. Backward equations (under ``transpose``)
  get the ``bwd/`` prefix our own autodiff uses.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

_INDEXED = re.compile(r"(^|\.)\d+(\.|$)")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def key_name(entry: Any) -> str:
    """One pytree key (DictKey, SequenceKey, GetAttrKey, FlattenedIndexKey) as text."""
    for attribute in ("key", "idx", "name"):
        if hasattr(entry, attribute):
            return _UNSAFE.sub("_", str(getattr(entry, attribute))).strip("_") or "_"
    return _UNSAFE.sub("_", str(entry)).strip("_") or "_"


def dotted(path: Sequence[Any]) -> str:
    """A key path as a dotted name.

    Example:
        >>> from jax.tree_util import DictKey, SequenceKey
        >>> dotted((DictKey("layers"), SequenceKey(0), DictKey("wq")))
        'layers.0.wq'
    """
    return ".".join(key_name(entry) for entry in path)


def layer_of(name: str) -> str | None:
    """The layer a parameter name belongs to: the prefix up to its first integer component.

    Example:
        >>> layer_of("layers.3.attn.wq"), layer_of("ln_f.scale")
        ('layers.3', None)
    """
    parts = name.split(".")
    for index, part in enumerate(parts[:-1]):
        if part.isdigit():
            return ".".join(parts[: index + 1])
    return None


def has_layer(scope: str) -> bool:
    return bool(_INDEXED.search(scope))


def op_base(scopes: Sequence[str], layer: str | None, primitive: str, backward: bool) -> str:
    """``[bwd/]<scope>/<primitive>`` before de-duplication."""
    scope = ".".join(_UNSAFE.sub("_", s) for s in scopes if s)
    if layer and not has_layer(scope):
        scope = f"{layer}.{scope}" if scope else layer
    base = f"{scope}/{primitive}" if scope else primitive
    return f"bwd/{base}" if backward else base


class Namer:
    """Hands out unique op names in program order: ``base``, ``base_1``, ``base_2`` …"""

    def __init__(self, taken: Sequence[str] = ()) -> None:
        self._count: dict[str, int] = {}
        self._taken = set(taken)

    def __call__(self, base: str) -> str:
        while True:
            count = self._count.get(base, 0)
            self._count[base] = count + 1
            name = base if count == 0 else f"{base}_{count}"
            if name not in self._taken:
                self._taken.add(name)
                return name
