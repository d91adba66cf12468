"""The parameters of the kernel-efficiency model, carried by a device (``DeviceSpec.kernels``).

Why a separate record: a device without it keeps the flat roofline of :mod:`costmodel.compute`
exactly (so TOML files and studies written before it keep their meaning); a device with it is
priced per kernel shape by :mod:`costmodel.gemm` (matmuls), :mod:`costmodel.attention` (flash
attention) and a memory-bound rule for everything else. Every field is validated here, so a
bad TOML value fails with the field's name.

Fields:
- ``sm_count``: streaming multiprocessors; one wave runs ``sm_count`` GEMM tiles at once.
- ``gemm_tile``: (rows, cols) of the output tile one thread block computes, and
  ``gemm_tile_k``: the K step of its main loop (K is rounded up to it).
- ``gemm_efficiency`` (0, 1]: the fraction of the dense peak a full wave of full tiles reaches
  (the "maximum achievable matmul FLOPS" ceiling).
- ``gemm_k_overhead`` (≥ 0, in K elements): a tile's fixed cost (prologue, pipeline fill,
  epilogue) expressed as extra K it could have multiplied: tile time ∝ K + k_overhead, the
  small-K penalty.
- ``hbm_efficiency`` (0, 1]: the fraction of the HBM bandwidth a streaming kernel reaches
  (STREAM-like); memory-bound kernels and every kernel's memory floor use it.
- ``launch_s`` (≥ 0, s): the fixed cost of one kernel (launch, first tile's fill, tail),
  added to its work, so also the floor of any kernel. Under the kernel model it replaces the
  device's ``min_kernel_s``.
- ``attention``: measured FlashAttention throughput rows (:class:`AttentionRate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from costmodel.errors import InvalidValueError


class AttentionPass(Enum):
    """Which kernel a measured attention throughput times."""

    FWD = "fwd"
    BWD = "bwd"
    FWD_BWD = "fwd_bwd"


def _fraction(value: object, name: str) -> float:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidValueError(f"{name} = {value!r} is not a number", field=name,
                                value=value) from None
    if not 0 < number <= 1:
        raise InvalidValueError(f"{name} = {value!r} must be in (0, 1]", field=name,
                                value=value)
    return number


def _count(value: object, name: str) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if not ok:
        raise InvalidValueError(f"{name} = {value!r} must be a positive integer", field=name,
                                value=value)
    return int(value)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionRate:
    """One measured point: ``tflops`` (FlashAttention's FLOP convention, see
    :class:`costmodel.kernels.Attention`) of ``pass_`` at ``head_dim`` and sequence length
    ``seq``, with or without the causal mask."""

    pass_: AttentionPass
    causal: bool
    head_dim: int
    seq: int
    tflops: float

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "pass_", AttentionPass(getattr(self.pass_, "value",
                                                                    self.pass_)))
        except ValueError:
            known = ", ".join(p.value for p in AttentionPass)
            raise InvalidValueError(f"attention pass {self.pass_!r} is not one of {known}",
                                    field="pass", value=self.pass_) from None
        if not isinstance(self.causal, bool):
            raise InvalidValueError(f"causal = {self.causal!r} must be true or false",
                                    field="causal", value=self.causal)
        _count(self.head_dim, "head_dim")
        _count(self.seq, "seq")
        tflops = float(self.tflops) if isinstance(self.tflops, int | float) else math.nan
        if not (math.isfinite(tflops) and tflops > 0):
            raise InvalidValueError(f"tflops = {self.tflops!r} must be a positive number",
                                    field="tflops", value=self.tflops)
        object.__setattr__(self, "tflops", tflops)

    def __repr__(self) -> str:
        return (f"AttentionRate(pass_={self.pass_.value!r}, causal={self.causal!r}, "
                f"head_dim={self.head_dim!r}, seq={self.seq!r}, tflops={self.tflops!r})")


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelParams:
    """The kernel model's parameters (module docstring). Frozen, validated, hashable."""

    sm_count: int
    gemm_tile: tuple[int, int] = (128, 256)
    gemm_tile_k: int = 64
    gemm_efficiency: float = 1.0
    gemm_k_overhead: float = 0.0
    hbm_efficiency: float = 1.0
    launch_s: float = 0.0
    attention: tuple[AttentionRate, ...] = ()

    def __post_init__(self) -> None:
        _count(self.sm_count, "sm_count")
        tile = tuple(self.gemm_tile) if isinstance(self.gemm_tile, list | tuple) else ()
        if len(tile) != 2:
            raise InvalidValueError(f"gemm_tile = {self.gemm_tile!r} must be [rows, cols]",
                                    field="gemm_tile", value=self.gemm_tile)
        object.__setattr__(self, "gemm_tile", (_count(tile[0], "gemm_tile rows"),
                                               _count(tile[1], "gemm_tile cols")))
        _count(self.gemm_tile_k, "gemm_tile_k")
        object.__setattr__(self, "gemm_efficiency",
                           _fraction(self.gemm_efficiency, "gemm_efficiency"))
        object.__setattr__(self, "hbm_efficiency",
                           _fraction(self.hbm_efficiency, "hbm_efficiency"))
        for name, unit in (("gemm_k_overhead", "K elements"), ("launch_s", "seconds")):
            value = getattr(self, name)
            valid = isinstance(value, int | float) and not isinstance(value, bool) and \
                math.isfinite(value) and value >= 0
            if not valid:
                raise InvalidValueError(f"{name} = {value!r} must be a non-negative number "
                                        f"({unit})", field=name, value=value)
            object.__setattr__(self, name, float(value))
        rows = tuple(self.attention)
        for row in rows:
            if not isinstance(row, AttentionRate):
                raise InvalidValueError(f"attention rows must be AttentionRate, got {row!r}",
                                        field="attention", value=row)
        object.__setattr__(self, "attention", rows)
