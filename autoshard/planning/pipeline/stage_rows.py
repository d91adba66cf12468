"""A pipelined plan's records copied onto the stages that run them: what its reports show.

A pipelined plan keeps the records of one *stage model* (``pipeline.stage_model_layers`` =
``k`` layers, planned once, :mod:`.pipelined`), but its step is priced per stage: each layer of
the whole model costs a stage-model layer, each layer boundary the reshards of one, the
embedding and the head once (:mod:`.layer_costs`). Read alone, the stage model's records
describe no stage and do not add up to the step. Here every record is copied where the step
runs it, so a stage's rows add up to that stage's work:

- **ops and reshards of a layer**: one copy per layer of the whole model, on the stage that
  holds the layer's chunk (chunk ``c`` on stage ``c mod p``), the layer index renamed; the
  counterpart (:func:`counterpart`) is the stage model's first layer for the model's first,
  its last for the last, its second for every other: the one the pricing charges that layer;
- **the reshards of a layer boundary** (the activation read in the next layer's layout, the
  gradient coming back): one copy per boundary of the whole model, within a stage and
  between stages alike, of the stage-model boundary :func:`boundary_counterpart` names: the
  activation's on the later layer's stage, the gradient's on the earlier one's;
- **the embedding** on the first stage, **the head and loss** on the last.

Each copy keeps its ``count`` (runs per step: the micro-batches for forward and backward
work, once for the optimizer's), so a stage's rows sum to ``m`` micro-batches of its chunks
plus its tail. Where each record goes (part and phase) is the pricing's own attribution,
saved in ``pipeline.charges``; a plan.json written before it has no copies (None).

Worked example: 8 layers on pp=2 (chunks of 4 and 4), a stage model of k=4 layers. Stage 0
holds the embedding and layers 0-3 (counterparts 0, 1, 1, 1), stage 1 layers 4-7
(counterparts 1, 1, 1, 3) and the head; boundary 0|1 copies the stage model's 0|1, boundary
6|7 its 2|3, the others its 1|2; boundary 3|4 (between the stages) has its activation's
reshards on stage 1 and its gradient's on stage 0.

This module imports no other planning module (the Plan record uses it to write its CSVs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoshard.errors import PlanFileError
from autoshard.planning.layers import layer_of

PRE, POST = -1, -2  # the embedding (before the first layer), the head and loss (after)
INTO, OUT_OF = -3, -4  # reshards at the later / the earlier layer of a layer boundary
PART_NAMES = {PRE: "pre", POST: "post", INTO: "into", OUT_OF: "out_of"}
PHASES = ("forward", "backward", "weight", "tail")


@dataclass(frozen=True, slots=True, kw_only=True)
class StageOp:
    """One op as a stage runs it: ``name`` in the whole model, ``model_name`` the stage-model
    op it copies (the key of ``plan.ops``), ``record`` that op's record."""

    stage: int
    chunk: int  # the virtual stage (model chunk) it belongs to
    phase: str  # forward, backward, weight (per micro-batch) or tail (once per step)
    order: int  # its copy's place in the chunk (embedding, layers in order, head)
    name: str
    model_name: str
    record: Any  # autoshard.planning.record.OpRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class StageReshard:
    """One reshard as a stage runs it: ``record`` renamed to the whole model's layers (its
    tensor, producer, consumer, other readers and the op it hides behind), and the stage
    model's tensor and consumer it copies."""

    stage: int
    chunk: int
    phase: str
    order: int
    record: Any  # autoshard.planning.record.ReshardRecord, renamed
    model_tensor: str
    model_consumer: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StageRows:
    """Every op and reshard of a pipelined step, stage by stage, chunk by chunk, in the
    order the stage model lists them (embedding, layers in order, head)."""

    ops: tuple[StageOp, ...]
    reshards: tuple[StageReshard, ...]


def parse_charge(code: str) -> tuple[int, str]:
    """``"forward:3"`` → ``(3, "forward")``; ``"tail:post"`` → ``(POST, "tail")``.

    >>> parse_charge("forward:3"), parse_charge("tail:post")
    ((3, 'forward'), (-2, 'tail'))
    """
    phase, _, part = code.partition(":")
    if phase not in PHASES:
        raise ValueError(f"unknown phase in charge {code!r}")
    names = {name: value for value, name in PART_NAMES.items()}
    return (names[part] if part in names else int(part)), phase


def counterpart(layer: int, layers: int, k: int) -> int:
    """The stage-model layer (of ``k``) that layer ``layer`` of a ``layers``-layer model
    copies: the first copies the first (both read the embedding), the last the last (both
    feed the head), every other layer the stage model's second (a layer between layers).
    Fixed by the layer's place in the model alone, so the cut search prices each layer
    before any cut is chosen. A stage model that is the whole model is its own copy.

    >>> [counterpart(i, 6, 4) for i in range(6)], [counterpart(i, 3, 1) for i in range(3)]
    ([0, 1, 1, 1, 1, 3], [0, 0, 0])
    """
    if k == layers or layer == 0:  # a stage model that is the whole model: itself
        return layer
    if layer == layers - 1:
        return k - 1
    return min(1, k - 1)


def boundary_counterpart(layer: int, layers: int, k: int) -> int:
    """The stage-model boundary (named by its later layer, of ``1 … k - 1``) whose reshards
    the boundary between layers ``layer - 1`` and ``layer`` copies: the first boundary the
    first, the last the last, the others the stage model's boundary between its second and
    third layers (between two layers that sit between layers; the last when ``k`` < 3).

    >>> [boundary_counterpart(i, 6, 4) for i in range(1, 6)]
    [1, 2, 2, 2, 3]
    """
    if k == layers or layer == 1:
        return layer
    if layer == layers - 1:
        return k - 1
    return min(2, k - 1)


def stage_rows(ops: Mapping[str, Any], reshards: Sequence[Any],
               pipeline: Mapping[str, Any]) -> StageRows | None:
    """Copy a pipelined plan's records (``plan.ops``, ``plan.reshards``) onto its stages
    (see the module docstring); None when ``pipeline`` holds no ``charges`` (a plan.json
    written before they were recorded).

    Raises:
        PlanFileError: the charges do not match the records (an edited plan.json).
    """
    saved = pipeline.get("charges")
    if not saved:
        return None
    try:
        return _copied(ops, reshards, pipeline, saved)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        message = (f"pipeline.charges do not fit the plan's records ({exc}); re-plan to get "
                   "consistent records")
        raise PlanFileError("plan.json", message) from None


def _copied(ops: Mapping[str, Any], reshards: Sequence[Any], pipeline: Mapping[str, Any],
            saved: Mapping[str, Any]) -> StageRows:
    op_codes, reshard_codes = list(saved["ops"]), list(saved["reshards"])
    if len(op_codes) != len(ops) or len(reshard_codes) != len(reshards):
        raise ValueError(f"pipeline.charges lists {len(op_codes)} ops and "
                         f"{len(reshard_codes)} reshards, the plan has {len(ops)} and "
                         f"{len(reshards)}")
    p, k = int(pipeline["stages"]), int(pipeline["stage_model_layers"])
    counts = [int(n) for n in pipeline["layers_per_chunk"]]
    layout = _Layout(p, k, counts)
    op_charges = [parse_charge(code) for code in op_codes]
    reshard_charges = [None if code is None else parse_charge(code) for code in reshard_codes]
    out_ops: list[StageOp] = []
    out_reshards: list[StageReshard] = []
    for chunk in range(len(counts)):
        for order, (part, rename) in enumerate(layout.parts(chunk)):
            stage = chunk % p
            for (name, record), (charged, phase) in zip(ops.items(), op_charges, strict=True):
                if charged == part:
                    out_ops.append(StageOp(stage=stage, chunk=chunk, phase=phase, order=order,
                                           name=_renamed(name, rename), model_name=name,
                                           record=record))
            for record, charge in zip(reshards, reshard_charges, strict=True):
                if charge is None or charge[0] != part or not layout.copies(part, record,
                                                                            rename):
                    continue
                out_reshards.append(StageReshard(
                    stage=stage, chunk=chunk, phase=charge[1], order=order,
                    record=_renamed_reshard(record, rename), model_tensor=record.tensor,
                    model_consumer=record.consumer))
    return StageRows(ops=tuple(out_ops), reshards=tuple(out_reshards))


class _Layout:
    """Which stage-model parts each chunk copies, and the layer renaming of each copy."""

    def __init__(self, stages: int, k: int, counts: Sequence[int]) -> None:
        self.stages, self.k, self.counts = stages, k, list(counts)
        self.n = sum(counts)
        self.starts = [sum(counts[:c]) for c in range(len(counts))]

    def parts(self, chunk: int) -> list[tuple[int, dict[int, int]]]:
        """``(part, {stage-model layer: whole-model layer})`` per copy in ``chunk``: the
        embedding, each layer with the boundary reshards it receives (the activation
        from the layer before) and sends back (the gradient to the layer before: charged to
        that earlier layer, so listed with it), the head."""
        out: list[tuple[int, dict[int, int]]] = []
        if chunk == 0:
            out.append((PRE, {j: j for j in range(self.k)}))
        start = self.starts[chunk]
        for layer in range(start, start + self.counts[chunk]):
            if layer > 0 and self.k > 1:  # boundary layer-1 | layer, at the later layer
                e = boundary_counterpart(layer, self.n, self.k)
                out.append((INTO, {e - 1: layer - 1, e: layer}))
            q = counterpart(layer, self.n, self.k)
            out.append((q, {q: layer}))
            if layer < self.n - 1 and self.k > 1:  # boundary layer | layer+1, the gradient
                e = boundary_counterpart(layer + 1, self.n, self.k)
                out.append((OUT_OF, {e - 1: layer, e: layer + 1}))
        if chunk == len(self.counts) - 1:
            out.append((POST, {j: self.n - self.k + j for j in range(self.k)}))
        return out

    def copies(self, part: int, record: Any, rename: Mapping[int, int]) -> bool:
        """Whether a reshard charged to ``part`` belongs in this copy: a boundary's only
        when it is the stage-model boundary copied, the others always."""
        if part not in (INTO, OUT_OF):
            return True
        ends = {where[0] for name in (record.producer, record.consumer)
                if (where := layer_of(name)) is not None}
        return ends == set(rename)


def _renamed(name: str, rename: Mapping[int, int]) -> str:
    """``name`` with its layer index mapped by ``rename`` (unchanged outside the layers)."""
    found = layer_of(name)
    if found is None or found[0] not in rename:
        return name
    return found[1].replace("*", str(rename[found[0]]), 1)


def _renamed_reshard(record: Any, rename: Mapping[int, int]) -> Any:
    kind, space, target = record.overlap.partition(" ")
    overlap = f"{kind}{space}{_renamed(target, rename)}" if kind == "op" else record.overlap
    return dataclasses.replace(
        record, tensor=_renamed(record.tensor, rename),
        producer=_renamed(record.producer, rename), consumer=_renamed(record.consumer, rename),
        shared_with=tuple(_renamed(n, rename) for n in record.shared_with), overlap=overlap)


__all__ = ["INTO", "OUT_OF", "PART_NAMES", "POST", "PRE", "StageOp", "StageReshard",
           "StageRows", "boundary_counterpart", "counterpart", "parse_charge", "stage_rows"]
