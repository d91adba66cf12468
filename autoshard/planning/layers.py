"""Find a model's repeated layers in its op names, for the solver's periodic chain.

A transformer is a stack of identical layers, and its graph says so in its names: the zoo, the
PyTorch importer (module paths) and the JAX importer (parameter paths) all name the ops of
layer 3 ``…layers.3.…``, forward (``layers.3.mlp.up``), backward (``bwd/layers.3.mlp.up.1``)
and optimizer (``opt/layers.3.mlp.w1``) alike. The layer index is the first dotted integer
component that has more path after it (``model.layers.3/add`` is in layer 3; ``final_norm.1``
is a suffix, not a layer).

The blocks found here are only a claim: ``solver.solve`` checks that the costs and edges of the
interior blocks are identical before it relies on them, and solves the whole problem otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Sequence

LAYER_INDEX = re.compile(r"(?<![^./])(\d+)(?=[./])")
MIN_LAYERS = 4


def layer_of(name: str) -> tuple[int, str] | None:
    """``(layer index, name with the index replaced by *)``, or None outside any layer."""
    match = LAYER_INDEX.search(name)
    if match is None:
        return None
    return int(match.group(1)), f"{name[: match.start()]}*{name[match.end():]}"


def layer_count(names: Iterable[str]) -> int | None:
    """How many layers op or tensor names count (the largest index plus one), None when
    they name none: what a plan and a model are compared by when their ops differ.

    Example:
        >>> layer_count(["embed", "layers.0.mlp.up", "bwd/layers.3.attn"]), layer_count(["x"])
        (4, None)
    """
    found = [where[0] for name in names if (where := layer_of(name)) is not None]
    return max(found) + 1 if found else None


def repeated_blocks(names: Sequence[str], keys: Sequence[Hashable]
                    ) -> tuple[tuple[int, ...], ...] | None:
    """Node indices per layer, aligned position by position (same template, same structure
    key), in layer order; None when the names show no stack of at least MIN_LAYERS layers
    whose members all match."""
    layers: dict[int, dict[str, int]] = {}
    for node, name in enumerate(names):
        found = layer_of(name)
        if found is not None:
            layers.setdefault(found[0], {})[found[1]] = node
    if len(layers) < MIN_LAYERS:
        return None
    order = sorted(layers)
    templates = sorted(layers[order[0]])
    blocks = []
    for index in order:
        members = layers[index]
        if sorted(members) != templates:
            return None
        blocks.append(tuple(members[t] for t in templates))
    for position in range(len(templates)):
        if len({keys[block[position]] for block in blocks}) != 1:
            return None
    return tuple(blocks)
