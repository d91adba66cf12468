"""Alpha-beta (Hockney) cost of every collective, in one place, each formula with its source.

Why: the planner prices every resharding step and every intra-op collective with these
functions; they must be cheap (vectorized over NumPy arrays of byte counts, since the planner
prices millions of entries) and they must be the only copy of the formulas.

Contract (byte conventions, per rank):

======================  ===============================================================
kind                    ``nbytes`` is
======================  ===============================================================
ALL_GATHER              the full gathered OUTPUT each rank ends with
REDUCE_SCATTER          the full INPUT each rank starts with
ALL_REDUCE              the buffer (same size in and out)
BROADCAST, REDUCE       the buffer
ALL_TO_ALL              the per-rank buffer; each rank sends (n−1)/n of it
COLLECTIVE_PERMUTE      the buffer each rank sends
======================  ===============================================================

A group is levels ``((size, link), ...)`` inner→outer (``((8, nvlink), (4, ib))`` is 32 ranks,
8 per node). A group of total size 1 costs 0, and so does a collective of 0 bytes. Reduction
arithmetic (the γ term of the papers) is ignored: it hides under the transfer on GPUs/TPUs.
Non-power-of-two group sizes make the power-of-two-only algorithms (recursive doubling/halving,
Rabenseifner) unavailable (priced ``inf``), so the ring variants win there.

Sources: R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective Communication
Operations in MPICH", IJHPCA 19(1), 2005 (quoted from MPICH ``src/mpi/coll/*`` cost comments);
NCCL ring step counts (``src/graph/tuning.cc``: ``nsteps = 2(n−1)`` all-reduce, ``n−1``
all-gather/reduce-scatter); Horovod ``NCCLHierarchicalAllreduce`` for the two-level form.
MPICH's cost comments read at pmodels/mpich 6a79bf6 (``src/mpi/coll/``); NCCL's at NVIDIA/nccl
5067397 (``src/graph/tuning.cc``); all listed in docs/sources.md.

Two models share :func:`collective_seconds`: groups of pure alpha-beta links (the default
:class:`~costmodel.link.Link`) are priced by the formulas below, unchanged; a group where some
level's link sets a measured-curve field (``launch_s``, ``pipeline_s``, ``bus_efficiency``) is
priced by the size-aware model of :mod:`costmodel.measured`.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import TypeAlias

import numpy as np

from costmodel.errors import InvalidValueError
from costmodel.kinds import CollectiveKind
from costmodel.link import Link
from costmodel.measured import measured_seconds, uses_measured_model

logger = logging.getLogger(__name__)

Bytes: TypeAlias = "float | np.ndarray"
Group: TypeAlias = tuple[tuple[int, Link], ...]
"""Ranks of one collective as levels ``((size, link), ...)`` inner→outer."""


def _is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _unavailable(m: Bytes) -> Bytes:
    return m * 0.0 + math.inf


def _ceil_log2(n: int) -> int:
    return (n - 1).bit_length()


# --- single-level algorithms: n ranks, message m bytes (per the table above), one link -------


def ring_all_reduce(n: int, m: Bytes, link: Link) -> Bytes:
    """Ring reduce-scatter + ring all-gather: 2(n−1)α + 2(n−1)/n·mβ (Thakur et al. 2005; NCCL).

    Example:
        >>> ring_all_reduce(4, 1000.0, Link(1.0, 0.01))
        21.0
    """
    if n == 1:
        return m * 0.0
    return 2 * (n - 1) * link.alpha_s + 2 * (n - 1) / n * m * link.beta_s_per_byte


def recursive_doubling_all_reduce(n: int, m: Bytes, link: Link) -> Bytes:
    """Recursive doubling: log2(n)·(α + mβ), power-of-two n (Thakur et al. 2005, §4.4)."""
    if n == 1:
        return m * 0.0
    if not _is_power_of_two(n):
        return _unavailable(m)
    return math.log2(n) * (link.alpha_s + m * link.beta_s_per_byte)


def rabenseifner_all_reduce(n: int, m: Bytes, link: Link) -> Bytes:
    """Recursive-halving reduce-scatter + recursive-doubling all-gather:
    2·log2(n)·α + 2(n−1)/n·mβ, power-of-two n (Rabenseifner; Thakur et al. 2005, §4.4)."""
    if n == 1:
        return m * 0.0
    if not _is_power_of_two(n):
        return _unavailable(m)
    return 2 * math.log2(n) * link.alpha_s + 2 * (n - 1) / n * m * link.beta_s_per_byte


def ring_all_gather(n: int, m: Bytes, link: Link) -> Bytes:
    """Ring all-gather, m = gathered output: (n−1)α + (n−1)/n·mβ (Thakur et al. 2005, §4.1)."""
    if n == 1:
        return m * 0.0
    return (n - 1) * link.alpha_s + (n - 1) / n * m * link.beta_s_per_byte


def recursive_doubling_all_gather(n: int, m: Bytes, link: Link) -> Bytes:
    """Recursive doubling all-gather: log2(n)α + (n−1)/n·mβ, power-of-two n (Thakur 2005)."""
    if n == 1:
        return m * 0.0
    if not _is_power_of_two(n):
        return _unavailable(m)
    return math.log2(n) * link.alpha_s + (n - 1) / n * m * link.beta_s_per_byte


def ring_reduce_scatter(n: int, m: Bytes, link: Link) -> Bytes:
    """Ring (pairwise) reduce-scatter, m = full input: (n−1)α + (n−1)/n·mβ (Thakur 2005, §4.3)."""
    return ring_all_gather(n, m, link)


def recursive_halving_reduce_scatter(n: int, m: Bytes, link: Link) -> Bytes:
    """Recursive halving reduce-scatter: log2(n)α + (n−1)/n·mβ, power-of-two n (Thakur 2005)."""
    return recursive_doubling_all_gather(n, m, link)


def pairwise_all_to_all(n: int, m: Bytes, link: Link) -> Bytes:
    """Pairwise exchange, m = per-rank buffer: (n−1)α + (n−1)/n·mβ (Thakur et al. 2005, §4.5;
    MPICH writes (p−1)α + n'β with n' = (n−1)/n·m the bytes actually sent)."""
    if n == 1:
        return m * 0.0
    return (n - 1) * link.alpha_s + (n - 1) / n * m * link.beta_s_per_byte


def binomial_tree_broadcast(n: int, m: Bytes, link: Link) -> Bytes:
    """Binomial tree: ⌈log2 n⌉(α + mβ) (Thakur et al. 2005, §4.2; MPICH bcast_intra_binomial)."""
    if n == 1:
        return m * 0.0
    return _ceil_log2(n) * (link.alpha_s + m * link.beta_s_per_byte)


def scatter_allgather_broadcast(n: int, m: Bytes, link: Link) -> Bytes:
    """Van de Geijn: binomial scatter + ring all-gather: (⌈log2 n⌉ + n − 1)α + 2(n−1)/n·mβ
    (Thakur et al. 2005, §4.2)."""
    if n == 1:
        return m * 0.0
    return ((_ceil_log2(n) + n - 1) * link.alpha_s
            + 2 * (n - 1) / n * m * link.beta_s_per_byte)


def binomial_tree_reduce(n: int, m: Bytes, link: Link) -> Bytes:
    """Binomial tree reduce: ⌈log2 n⌉(α + mβ), γ ignored (Thakur et al. 2005, §4.6)."""
    return binomial_tree_broadcast(n, m, link)


def reduce_scatter_gather_reduce(n: int, m: Bytes, link: Link) -> Bytes:
    """Ring reduce-scatter + binomial gather, the mirror of van de Geijn's broadcast:
    (⌈log2 n⌉ + n − 1)α + 2(n−1)/n·mβ (Rabenseifner reduce; Thakur et al. 2005, §4.6)."""
    return scatter_allgather_broadcast(n, m, link)


def point_to_point_permute(n: int, m: Bytes, link: Link) -> Bytes:
    """Collective-permute: every rank sends m to one peer at once: α + mβ (Hockney)."""
    if n == 1:
        return m * 0.0
    return link.alpha_s + m * link.beta_s_per_byte


Algorithm = Callable[[int, Bytes, Link], Bytes]

ALGORITHMS: dict[CollectiveKind, tuple[Algorithm, ...]] = {
    CollectiveKind.ALL_REDUCE: (ring_all_reduce, recursive_doubling_all_reduce,
                                rabenseifner_all_reduce),
    CollectiveKind.ALL_GATHER: (ring_all_gather, recursive_doubling_all_gather),
    CollectiveKind.REDUCE_SCATTER: (ring_reduce_scatter, recursive_halving_reduce_scatter),
    CollectiveKind.ALL_TO_ALL: (pairwise_all_to_all,),
    CollectiveKind.BROADCAST: (binomial_tree_broadcast, scatter_allgather_broadcast),
    CollectiveKind.REDUCE: (binomial_tree_reduce, reduce_scatter_gather_reduce),
    CollectiveKind.COLLECTIVE_PERMUTE: (point_to_point_permute,),
}
"""The algorithms the cheapest-choice considers per kind (what NCCL/MPICH choose among)."""


def single_level_seconds(kind: CollectiveKind, n: int, m: Bytes, link: Link) -> Bytes:
    """The cheapest algorithm of ``kind`` over ``n`` ranks on one link, as NCCL would pick.

    Example:
        >>> single_level_seconds(CollectiveKind.ALL_REDUCE, 4, 1000.0, Link(1.0, 0.01))
        19.0
    """
    costs = [algorithm(n, m, link) for algorithm in ALGORITHMS[kind]]
    best = costs[0]
    for cost in costs[1:]:
        best = _minimum(best, cost)
    return best


def _minimum(first: Bytes, second: Bytes) -> Bytes:
    if isinstance(first, np.ndarray) or isinstance(second, np.ndarray):
        return np.minimum(first, second)
    return min(float(first), float(second))


# --- multi-level groups ------------------------------------------------------------------------


def hierarchical_seconds(kind: CollectiveKind, m: Bytes, levels: Group) -> Bytes:
    """Level-by-level schedule over ``levels`` (inner→outer, sizes > 1), Horovod/NCCL style.

    With g the inner level's size and "rest" the outer levels (the phase across rest takes
    the cheaper of flat and hierarchical over rest, so three or more levels recurse). The slow
    outer levels always see the smaller message: all-gather crosses them first, on m/g, and
    reduce-scatter last, on m/g; the inner phase carries the full m on the fast link.

    - all-reduce: reduce-scatter inside on m, all-reduce across rest on m/g (g of them in
      parallel, one per local rank, one NIC each), all-gather inside on m (Horovod
      ``NCCLHierarchicalAllreduce`` in ``horovod/common/ops/nccl_operations.cc``);
    - all-gather: all-gather across rest on m/g, then inside on m (output m);
    - reduce-scatter: inside on m, then across rest on m/g;
    - all-to-all (two-phase): inside on m (each rank collects, per local peer, the chunks bound
      for that peer's position on every node), then across rest on m; total bytes leaving a
      rank over the outer link are (N−1)/N·m, the flat algorithm's minimum;
    - broadcast: across rest on m, then inside on m; reduce: inside then across;
    - collective-permute: no level structure, one α + mβ on the slowest link.
    """
    (size, link), rest = levels[0], levels[1:]
    if not rest or kind is CollectiveKind.COLLECTIVE_PERMUTE:
        return flat_seconds(kind, m, levels)
    inner = single_level_seconds
    if kind is CollectiveKind.ALL_REDUCE:
        return (inner(CollectiveKind.REDUCE_SCATTER, size, m, link)
                + _cheaper_schedule(kind, m / size, rest)
                + inner(CollectiveKind.ALL_GATHER, size, m, link))
    if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        return inner(kind, size, m, link) + _cheaper_schedule(kind, m / size, rest)
    return inner(kind, size, m, link) + _cheaper_schedule(kind, m, rest)


def _cheaper_schedule(kind: CollectiveKind, m: Bytes, levels: Group) -> Bytes:
    """The cheaper of flat and hierarchical over ``levels`` (the outer phase of a schedule)."""
    seconds = flat_seconds(kind, m, levels)
    if len(levels) > 1:
        seconds = _minimum(seconds, hierarchical_seconds(kind, m, levels))
    return seconds


@functools.lru_cache(maxsize=4096)
def slowest_link(levels: Group) -> Link:
    """A link as slow as the slowest of ``levels``: max α and max β (a flat ring's bound)."""
    if len(levels) == 1:
        return levels[0][1]
    return Link(alpha_s=max(link.alpha_s for _, link in levels),
                beta_s_per_byte=max(link.beta_s_per_byte for _, link in levels),
                name="+".join(link.name for _, link in levels))


def flat_seconds(kind: CollectiveKind, m: Bytes, levels: Group) -> Bytes:
    """All ranks of ``levels`` as one flat group on the slowest link (max α, max β)."""
    total = math.prod(size for size, _ in levels)
    return single_level_seconds(kind, total, m, slowest_link(levels))


def _canonical_group(group: Group) -> Group:
    try:
        return _canonical_group_cached(group)
    except TypeError:  # unhashable entries: validate uncached to get the real message
        return _canonical_group_uncached(group)


@functools.lru_cache(maxsize=4096)
def _canonical_group_cached(group: Group) -> Group:
    return _canonical_group_uncached(group)


def _canonical_group_uncached(group: Group) -> Group:
    levels = []
    for entry in group:
        try:
            size, link = entry
        except (TypeError, ValueError):
            message = f"group entry {entry!r} must be a (size, Link) pair"
            raise InvalidValueError(message, field="group", value=group) from None
        if isinstance(size, bool) or int(size) != size or size < 1 or not isinstance(link, Link):
            message = (f"group entry {entry!r} needs a positive integer size and a "
                       f"costmodel.Link; the group was {group!r}")
            raise InvalidValueError(message, field="group", value=group)
        if size > 1:
            levels.append((int(size), link))
    return tuple(levels)


def _checked_bytes(nbytes: Bytes) -> Bytes:
    if isinstance(nbytes, np.ndarray):
        m = nbytes.astype(float, copy=False)
        if m.size and not (np.all(np.isfinite(m)) and m.min() >= 0):
            message = "nbytes must be finite and non-negative (an array entry is not)"
            raise InvalidValueError(message, field="nbytes", value=None)
        return m
    m = float(nbytes)
    if not math.isfinite(m) or m < 0:
        message = f"nbytes = {nbytes!r} must be finite and non-negative"
        raise InvalidValueError(message, field="nbytes", value=nbytes)
    return m


def collective_seconds(kind: CollectiveKind, nbytes: Bytes, group: Group) -> Bytes:
    """Seconds for collective ``kind`` of ``nbytes`` (see the module's byte conventions) over
    ``group``. Pure alpha-beta links: the cheaper of the hierarchical schedule and the flat
    one on the slowest link, each with the cheapest algorithm per step; links with
    measured-curve fields: the size-aware model of :mod:`costmodel.measured`. Vectorized: an
    array ``nbytes`` gives an array.

    Raises:
        InvalidValueError: negative or non-finite bytes, malformed group.

    Example:
        >>> unit = Link(1.0, 1.0)
        >>> collective_seconds(CollectiveKind.ALL_GATHER, 8.0, ((4, unit),))  # 2α + 3/4·8β
        8.0
        >>> collective_seconds(CollectiveKind.ALL_REDUCE, 8.0, ((1, unit),))
        0.0
    """
    kind = CollectiveKind(kind)
    levels = _canonical_group(group)
    m = _checked_bytes(nbytes)
    if not levels:
        return m * 0.0
    if uses_measured_model(levels):
        seconds = measured_seconds(kind, m, levels)
    else:
        seconds = _cheaper_schedule(kind, m, levels)
    if isinstance(m, np.ndarray):
        return np.where(m == 0, 0.0, seconds)
    return 0.0 if m == 0 else float(seconds)
