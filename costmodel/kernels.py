"""What a kernel is, in the numbers a kernel-efficiency model needs: a GEMM or an attention.

Why: the flat roofline prices every op by its FLOPs and bytes alone, so a matmul whose local
shape leaves most SMs idle costs the same as one that fills the GPU. The kernel model of
:mod:`costmodel.gemm` and :mod:`costmodel.attention` needs the *shape* instead. costmodel knows
nothing of graphs, so the caller (autoshard, from an op's local shapes) describes the kernel
with these records; an op that is neither is priced as a memory-bound kernel.

Conventions:
- :class:`Gemm`: ``batch`` independent products of an (m × k) by a (k × n) matrix, so
  ``2·batch·m·n·k`` FLOPs. Which operand is "m" does not matter (the model tries both tile
  orientations).
- :class:`Attention`: a FlashAttention call over ``batch`` sequences of ``heads`` query heads,
  ``seq_q`` queries against ``seq_k`` keys, head sizes ``head_dim`` (q, k) and ``head_dim_v``
  (v, out). ``backward`` selects the backward kernel (dq, dk, dv).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.errors import InvalidValueError


def _positive_int(value: object, name: str) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if not ok:
        raise InvalidValueError(f"{name} = {value!r} must be a positive integer", field=name,
                                value=value)
    return int(value)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Gemm:
    """A (batched) matrix product: ``batch`` × (m × k) @ (k × n).

    Example:
        >>> Gemm(m=4096, n=4096, k=4096).flops
        137438953472
    """

    m: int
    n: int
    k: int
    batch: int = 1

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "batch"):
            _positive_int(getattr(self, name), name)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k


@dataclass(frozen=True, slots=True, kw_only=True)
class Attention:
    """A fused (flash) attention kernel, forward or backward.

    ``flops`` follows FlashAttention's benchmark convention (``benchmarks/`` of
    Dao-AILab/flash-attention): forward ``4·b·s·t·h·d`` (written ``2·b·s·t·h·(d + e)`` for
    distinct value width), backward 2.5× that, halved when ``causal`` (the kernel skips the
    masked blocks). The published TFLOP/s this module is priced with use the same count.

    Example:
        >>> Attention(batch=1, heads=16, seq_q=2048, seq_k=2048, head_dim=128,
        ...           head_dim_v=128, causal=True).flops
        17179869184.0
    """

    batch: int
    heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    head_dim_v: int
    causal: bool = True
    backward: bool = False

    def __post_init__(self) -> None:
        for name in ("batch", "heads", "seq_q", "seq_k", "head_dim", "head_dim_v"):
            _positive_int(getattr(self, name), name)

    @property
    def flops(self) -> float:
        width = 3 * self.head_dim + 2 * self.head_dim_v if self.backward else \
            self.head_dim + self.head_dim_v
        dense = 2.0 * self.batch * self.heads * self.seq_q * self.seq_k * width
        return dense / 2 if self.causal else dense


Kernel = Gemm | Attention
"""A kernel the efficiency model has a shape for; ``None`` stands for any other op."""
