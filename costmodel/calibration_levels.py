"""Which topology levels a set of nccl-tests tables determines, and which it cannot.

Why: a table measures one group shape, and on a multi-node group every parameter of the node
level (NVLink) enters the curve of :mod:`costmodel.measured` only mixed with the same parameter
of the network level: the launch floor as ``max(launch_node, launch_net)``, the pipeline fill as
``pipeline_node + pipeline_net``, the hop latencies as one fixed mix (``2·(7·alpha_node +
alpha_net)`` for NCCL's tree over 2 × 8 GPUs), the bus rate as the larger of the two levels'
``bus·beta/eff``. Any split of those sums and maxima fits the table equally well, so a fit on
multi-node tables alone puts the network's cost on NVLink as readily as on the network (it did:
a 150 µs NVLink fill from an EFA table). A level is therefore *fitted* only when some table
crosses it and no level outside it (a single-node table fits the node level; a multi-node table,
given the node level, the network level). A level that tables cross only together with an outer
level is *kept*: its parameters stay the base's exactly (pinned, not a prior: the tables carry
no information about the split for data to overcome a prior with, so a prior's weight would only
choose how much of the network to misattribute). Non-goal: separating levels from several
multi-node shapes (2 × 4 against 2 × 8 GPUs); such tables still keep the node level.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from costmodel.nccl_tests import NcclTable

logger = logging.getLogger(__name__)

NODE_LEVEL, NETWORK_LEVEL = 0, 1
"""Index of the level inside a node and across nodes in a topology's ``levels``."""


@enum.unique
class LevelSource(enum.Enum):
    """Where a level's measured-curve parameters come from after a calibration.

    - ``FITTED``: some table crosses this level and none outside it; fitted to the tables.
    - ``KEPT``: tables cross it only together with an outer level, which they cannot tell it
      apart from; the base's values are kept unchanged.
    - ``UNSPANNED``: no table crosses it; the base's values are kept unchanged.
    """

    FITTED = "fitted"
    KEPT = "kept"
    UNSPANNED = "unspanned"

    def __repr__(self) -> str:
        return f"LevelSource.{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelOrigin:
    """One level's source and the tables behind it: for ``FITTED``, the tables that determine
    it (they cross no outer level); for ``KEPT``, the tables that cross it with an outer one."""

    index: int
    source: LevelSource
    tables: tuple[str, ...]


def spanned_levels(table: NcclTable) -> tuple[int, ...]:
    """The levels whose links ``table``'s ranks cross, inner first (the rule of
    :func:`costmodel.calibrate.group_for`: GPUs of a node on level 0, nodes on level 1).

    Example:
        >>> from costmodel.kinds import CollectiveKind
        >>> def table(ranks, nodes):
        ...     return NcclTable(name="t", source="t", line=1, collective=CollectiveKind.ALL_REDUCE,
        ...                      ranks=ranks, nodes=nodes, nbytes=(8,), time_us=(1.0,), column="")
        >>> spanned_levels(table(8, 1)), spanned_levels(table(16, 2)), spanned_levels(table(2, 2))
        ((0,), (0, 1), (1,))
    """
    if table.nodes == 1:
        return (NODE_LEVEL,) if table.ranks > 1 else ()
    inner = (NODE_LEVEL,) if table.gpus_per_node > 1 else ()
    return (*inner, NETWORK_LEVEL)


def level_origins(tables: Sequence[NcclTable], levels: int) -> tuple[LevelOrigin, ...]:
    """The source of each of a topology's first ``levels`` levels after fitting ``tables``.

    Example:
        >>> from costmodel.kinds import CollectiveKind
        >>> def table(name, ranks, nodes):
        ...     return NcclTable(name=name, source=name, line=1, ranks=ranks, nodes=nodes,
        ...                      collective=CollectiveKind.ALL_REDUCE, nbytes=(8,),
        ...                      time_us=(1.0,), column="")
        >>> [o.source.value for o in level_origins([table("2node", 16, 2)], 2)]
        ['kept', 'fitted']
        >>> both = [table("1node", 8, 1), table("2node", 16, 2)]
        >>> [o.source.value for o in level_origins(both, 2)]
        ['fitted', 'fitted']
    """
    spans = [(table.name, spanned_levels(table)) for table in tables]
    origins = []
    for index in range(levels):
        pinning = tuple(name for name, span in spans if span and span[-1] == index)
        crossing = tuple(name for name, span in spans if index in span)
        if pinning:
            origins.append(LevelOrigin(index=index, source=LevelSource.FITTED, tables=pinning))
        elif crossing:
            origins.append(LevelOrigin(index=index, source=LevelSource.KEPT, tables=crossing))
        else:
            origins.append(LevelOrigin(index=index, source=LevelSource.UNSPANNED, tables=()))
    return tuple(origins)


def fitted_indices(origins: Sequence[LevelOrigin]) -> tuple[int, ...]:
    """The indices of the levels a calibration fits."""
    return tuple(o.index for o in origins if o.source is LevelSource.FITTED)


def kept_indices(origins: Sequence[LevelOrigin]) -> tuple[int, ...]:
    """The indices of the levels tables cross but cannot determine."""
    return tuple(o.index for o in origins if o.source is LevelSource.KEPT)
