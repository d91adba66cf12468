"""Run a plan's reshard exactly as it was priced: its own collective list, on device shards.

Why not re-plan the reshard: the point of the emulator is that what runs is what was priced.
A plan records each collective as (kind, mesh axes, bytes) but not the tensor dims it acts
on, so :func:`interpret` recovers them: starting from the layout the devices really hold, it
matches each recorded collective, in order, against the single steps the reshard search
allows from the current layout (:func:`autoshard.reshard.state.moves_from`) with the same
kind, the same axes in the same order and the same byte count, and keeps the choice of dims
that ends in the layout the consumer needs. When no reading of the list gets there (a
collective dropped, two nested all-gathers swapped, a priced list for another layout), the
reshard is wrong and the emulator says so, naming it.

Byte counts are compared as shard counts (tensor bytes / collective bytes) of the tensor the
plan priced, so a plan made for a large graph runs on a scaled-down copy of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from autoshard.planning.record import CollectiveRecord
from autoshard.reshard.convert import state_of, to_sharding
from autoshard.reshard.find import Collective, ReshardStep
from autoshard.reshard.state import Move, State, moves_from
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.tensor_sharding import TensorSharding
from autoshard.verify.collectives import apply_step


def interpret(records: Sequence[CollectiveRecord], src: TensorSharding, dst: TensorSharding,
              shape: Sequence[int], priced_bytes: float) -> list[ReshardStep] | None:
    """The steps (with dims) that read ``records`` as a path from ``src`` to ``dst``.

    Args:
        records: the plan's collectives of one reshard, in order.
        src, dst: the layout the devices hold and the layout that is needed.
        shape: the global shape of the tensor being run (possibly scaled down).
        priced_bytes: the total bytes of the tensor the plan priced (its own shape).

    Returns:
        One step per record, or None when no reading of the list ends in ``dst``.
    """
    mesh = src.mesh
    shape = tuple(int(n) for n in shape)
    target = state_of(dst)
    path = _search(list(records), state_of(src), target, mesh, shape, priced_bytes)
    if path is None:
        return None
    steps, state = [], state_of(src)
    for record, move in zip(records, path, strict=True):
        collective = Collective(kind=move.kind, axes=tuple(record.axes),
                                group_size=int(record.group_size), bytes=float(record.bytes),
                                seconds=float(record.seconds), src_dim=move.src_dim,
                                dst_dim=move.dst_dim, reduce_op=move.reduce_op)
        steps.append(ReshardStep(collective, to_sharding(mesh, len(shape), state),
                                 to_sharding(mesh, len(shape), move.after)))
        state = move.after
    return steps


def _search(records: list[CollectiveRecord], state: State, target: State, mesh: Mesh,
            shape: tuple[int, ...], priced_bytes: float) -> list[Move] | None:
    if not records:
        return [] if state == target else None
    record, rest = records[0], records[1:]
    for move in _matching(record, state, target, mesh, shape, priced_bytes):
        tail = _search(rest, move.after, target, mesh, shape, priced_bytes)
        if tail is not None:
            return [move, *tail]
    return None


def _matching(record: CollectiveRecord, state: State, target: State, mesh: Mesh,
              shape: tuple[int, ...], priced_bytes: float) -> list[Move]:
    try:
        axes = tuple(int(mesh.axis_index(name)) for name in record.axes)
    except Exception:
        return []
    sizes = tuple(int(n) for n in mesh.axis_sizes)
    moves = moves_from(state, sizes, shape, target[1])
    return [m for m in moves if m.kind == record.kind and tuple(m.axes) == axes
            and _same_share(record.bytes, priced_bytes, m.bytes_divisor)]


def _same_share(record_bytes: float, priced_bytes: float, divisor: int) -> bool:
    if priced_bytes <= 0:
        return True
    return math.isclose(record_bytes * divisor, priced_bytes, rel_tol=1e-9)


def run_steps(arrays: Sequence[np.ndarray], steps: Sequence[ReshardStep],
              shape: Sequence[int]) -> list[np.ndarray]:
    """Every device's array after the steps (device positions in row-major mesh order)."""
    out = list(arrays)
    for step in steps:
        out = apply_step(out, step, shape)
    return out
