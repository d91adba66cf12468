"""Which export format accepts a sharding of a given global shape, and how exactly.

The formats disagree on uneven sizes (DTensor ``torch.chunk`` shards, XLA's padded tiles,
Shardy's divisibility rule; docs/sources.md, "Sharding formats"):

* DTensor shards one mesh axis at a time, each a ``torch.chunk`` of the current local piece
  (chunks nest): it accepts everything, and a plan's local shapes are DTensor's.
* XLA HloSharding and Shardy tile a dim once, ``ceil(dim / total_shards)``: they accept
  everything, and agree with DTensor when the dim is divisible or sharded by a single axis.
  Example: 18 rows over axes (4, 2) are ``[3,2,3,2,3,2,2,1]`` rows per device in DTensor but
  ``[3,3,3,3,3,3,0,0]`` in XLA.
* JAX ``NamedSharding`` refuses any dim not divisible by its shard count (``IndivisibleError``).

`check_exportable` says so for one tensor, refusing (with the tensor, dim and axis named) what
the format cannot take, and noting where an accepted export is not exactly the plan's layout.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.export.errors import NotDivisibleExportError
from autoshard.export.hlo import to_hlo_sharding
from autoshard.export.jax_spec import partition_spec_source
from autoshard.export.layout import layout_of
from autoshard.export.shardy import to_shardy

logger = logging.getLogger(__name__)


@enum.unique
class ExportFormat(enum.Enum):
    """Per-tensor export formats.

    HLO: XLA HloSharding V2 (iota). HLO_V1: explicit device list. SHARDY: ``#sdy.sharding``.
    DTENSOR: PyTorch placements. JAX: PartitionSpec / NamedSharding.
    """

    HLO = "hlo"
    HLO_V1 = "hlo-v1"
    SHARDY = "shardy"
    DTENSOR = "dtensor"
    JAX = "jax"

    def __repr__(self) -> str:
        return f"ExportFormat.{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ExportCheck:
    """The verdict for one tensor in one format: accepted, and ``exact`` when every device
    gets the same block as in the plan (DTensor semantics); ``notes`` say why not."""

    format: ExportFormat
    tensor: str
    exact: bool
    notes: tuple[str, ...] = ()


def check_exportable(
    ts: Any, global_shape: Sequence[int], fmt: ExportFormat | str, tensor_name: str = ""
) -> ExportCheck:
    """Check that `ts` on a tensor of `global_shape` can be exported in `fmt`.

    Raises:
        NotDivisibleExportError: JAX with a non-divisible dim; XLA/Shardy with a non-divisible
            dim in a strided layout.
        NotExpressibleError: the format cannot write the layout at all (strided view layout,
            custom device order in V2, an unsupported Partial op), from the exporter itself.
        ValueError: `global_shape` does not have one entry per tensor dim.

    Example:
        >>> from autoshard.sharding.mesh import Mesh
        >>> from autoshard.sharding.placements import Shard
        >>> from autoshard.sharding.tensor_sharding import TensorSharding
        >>> ts = TensorSharding(Mesh(axes=(("dp", 4), ("tp", 2))), (Shard(0), Shard(0)), 1)
        >>> check_exportable(ts, (18,), "hlo", "w").exact
        False
        >>> check_exportable(ts, (18,), "jax", "w")
        Traceback (most recent call last):
        ...
        autoshard.export.errors.NotDivisibleExportError: tensor "w" dim 0 (size 18) is not ...
    """
    fmt = ExportFormat(fmt)
    if len(global_shape) != ts.ndim:
        message = (
            f'tensor "{tensor_name}" has shape {tuple(global_shape)} but its sharding '
            f"describes {ts.ndim} dims"
        )
        raise ValueError(message)
    if fmt is ExportFormat.DTENSOR:
        return ExportCheck(format=fmt, tensor=tensor_name, exact=True)
    _export_once(ts, fmt, tensor_name)
    return _check_divisible(ts, tuple(int(s) for s in global_shape), fmt, tensor_name)


def _export_once(ts: Any, fmt: ExportFormat, tensor_name: str) -> None:
    """Run the exporter so its own refusals (with their messages) surface here."""
    if fmt is ExportFormat.HLO:
        to_hlo_sharding(ts, 2, tensor_name)
    elif fmt is ExportFormat.HLO_V1:
        to_hlo_sharding(ts, 1, tensor_name)
    elif fmt is ExportFormat.SHARDY:
        to_shardy(ts, tensor_name=tensor_name)
    else:
        partition_spec_source(ts, tensor_name)


def _check_divisible(
    ts: Any, shape: tuple[int, ...], fmt: ExportFormat, tensor_name: str
) -> ExportCheck:
    layout = layout_of(ts, tensor_name)
    strided = any(type(p).__name__ == "StridedShard" for p in ts.placements)
    notes: list[str] = []
    for dim, (size, refs) in enumerate(zip(shape, layout.dims, strict=True)):
        shards = math.prod(r.size for r in refs)
        if size % shards == 0:
            continue
        axes = ", ".join(f'"{r.name}"' for r in refs)
        where = (
            f'tensor "{tensor_name}" dim {dim} (size {size}) is not divisible by mesh axes '
            f"{axes} ({shards} shards)"
        )
        if fmt is ExportFormat.JAX or strided:
            why = (
                "JAX NamedSharding requires even division"
                if fmt is ExportFormat.JAX
                else "an uneven strided layout is not a tile"
            )
            message = f"{where}; {why}; pick a mesh axis that divides {size} or pad the tensor"
            raise NotDivisibleExportError(
                message, format=fmt.value, tensor=tensor_name, dim=dim, axis=refs[-1].name
            )
        if len(refs) > 1:
            notes.append(
                f"{where}: XLA tiles once with ceil({size}/{shards}) while DTensor nests "
                "torch.chunk per axis, so local shapes differ from the plan's"
            )
    return ExportCheck(format=fmt, tensor=tensor_name, exact=not notes, notes=tuple(notes))
