"""Read the collectives out of XLA HLO text and say which mesh axes each one runs over.

Why: the XLA cross-check compares the collectives our plan predicts with those XLA's SPMD
partitioner inserts. XLA writes device groups, not mesh axes: explicit lists
(``replica_groups={{0,1,2,3},{4,5,6,7}}``), iota lists (``replica_groups=[2,4]<=[8]``,
``[4,2]<=[2,4]T(1,0)``) or, for permutes, ``source_target_pairs={{0,1},{1,0}}``. A group set
matches mesh axes S when it equals the set of groups that vary the coordinates of S and fix
all others (row-major device ids, as :class:`autoshard.sharding.mesh.Mesh` numbers them). Worked
example on ``dp=2,tp=4`` (ids = 4·dp + tp): ``{0,1,2,3},{4,5,6,7}`` is tp; ``{0,4},{1,5},
{2,6},{3,7}`` is dp; ``[4,2]<=[2,4]T(1,0)`` expands to iota(8).reshape(2,4).T.reshape(4,2) =
``{0,4},{1,5},{2,6},{3,7}``, dp again.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
# The result type is one shape or a tuple of them: XLA's CPU pipeline rewrites an all-to-all of
# one array into one all-to-all of a tuple of its pieces (``(f32[1,4], f32[1,4]) all-to-all(``).
_INSTRUCTION = re.compile(
    r"=\s*(?:\([^()]*\)|\S+)\s+"
    r"(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\((.*)$")
_EXPLICIT = re.compile(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}")
_IOTA = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH = re.compile(r"replica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\(\[([\d,]+)\]"
                   r"(?:T\(([\d,]+)\))?\))?\s*\{([^}]*)\}")
_PAIRS = re.compile(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}")


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t]


def replica_groups(line: str) -> list[frozenset[int]] | None:
    """The device groups of one collective instruction (None when the line names none)."""
    match = _MESH.search(line)
    if match:
        return _mesh_groups(match)
    match = _IOTA.search(line)
    if match:
        shape, dims = _ints(match[1]), _ints(match[2])
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if match[3]:
            ids = ids.transpose(_ints(match[3]))
        return [frozenset(int(d) for d in row) for row in ids.reshape(shape)]
    match = _EXPLICIT.search(line)
    if match:
        groups = re.findall(r"\{([\d,]*)\}", match[1])
        return [frozenset(_ints(g)) for g in groups if g]
    return None


def _mesh_groups(match: re.Match[str]) -> list[frozenset[int]]:
    """Newer XLA: ``replica_groups=mesh['a'=1,'b'=4,'c'=2], device_ids=([2,4]T(1,0))
    {'b'}`` — a mesh over permuted iota ids, and the mesh axes the collective spans."""
    axes = re.findall(r"'([^']+)'=(\d+)", match[1])
    sizes = [int(n) for _, n in axes]
    dims = _ints(match[2]) if match[2] else [int(np.prod(sizes))]
    ids = np.arange(int(np.prod(dims))).reshape(dims)
    if match[3]:
        ids = ids.transpose(_ints(match[3]))
    ids = ids.reshape(sizes)
    spanned = [k for k, (name, _) in enumerate(axes) if f"'{name}'" in match[4]]
    rest = [k for k in range(len(sizes)) if k not in spanned]
    width = int(np.prod([sizes[k] for k in spanned])) if spanned else 1
    rows = np.transpose(ids, (*rest, *spanned)).reshape(-1, width)
    return [frozenset(int(d) for d in row) for row in rows]


def _permute_axes(line: str, names: Sequence[str], sizes: Sequence[int]) -> tuple[str, ...]:
    match = _PAIRS.search(line)
    if not match:
        return ()
    moved: set[int] = set()
    for source, target in re.findall(r"\{(\d+),(\d+)\}", match[1]):
        a, b = np.unravel_index(int(source), sizes), np.unravel_index(int(target), sizes)
        moved.update(k for k in range(len(sizes)) if a[k] != b[k])
    return tuple(names[k] for k in sorted(moved))


def groups_to_axes(groups: list[frozenset[int]], names: Sequence[str],
                   sizes: Sequence[int]) -> tuple[str, ...] | None:
    """The mesh axes whose device groups equal ``groups`` (() for singletons; None if none)."""
    target = set(groups)
    ids = np.arange(int(np.prod(sizes))).reshape(sizes)
    for count in range(len(sizes) + 1):
        for axes in itertools.combinations(range(len(sizes)), count):
            rest = [k for k in range(len(sizes)) if k not in axes]
            moved = np.transpose(ids, (*rest, *axes)).reshape(-1, int(np.prod(
                [sizes[k] for k in axes])) if axes else 1)
            if {frozenset(int(d) for d in row) for row in moved} == target:
                return tuple(names[k] for k in axes)
    return None


def count_collectives(hlo: str, names: Sequence[str], sizes: Sequence[int]
                      ) -> Counter[tuple[str, str]]:
    """(kind, axes joined by ',') → count, for every collective instruction in ``hlo``.

    Groups that match no set of mesh axes count under axes ``"?"``; collectives over groups of
    one device (no communication) under ``""``.
    """
    counts: Counter[tuple[str, str]] = Counter()
    for line in hlo.splitlines():
        match = _INSTRUCTION.search(line)
        if not match:
            continue
        kind = match[1]
        if kind == "collective-permute":
            axes: tuple[str, ...] | None = _permute_axes(line, names, sizes)
        else:
            groups = replica_groups(line)
            axes = tuple(names) if not groups else groups_to_axes(groups, names, sizes)
        counts[(kind, "?" if axes is None else ",".join(axes))] += 1
    return counts
