"""What kind of kernel an op runs, in shapes: the optional ``OpDef.kernel`` hook's answer.

Why: a cost model that prices matmuls by tile and wave quantisation, or attention by a flash
kernel's measured throughput, needs the (local) GEMM or attention shape, not just FLOPs. The
op kinds know their maths, so they say it here; graphs stays independent of any cost model
(these are plain records, the planner translates them).

- :class:`GemmShape`: ``batch`` independent (m × k) @ (k × n) products (``2·batch·m·n·k``
  FLOPs); for an einsum, batch = letters in both operands and the output, m = letters only in
  the first operand and the output, n = only in the second and the output, k = letters in both
  operands but not the output (see :func:`einsum_gemm`).
- :class:`AttentionShape`: a flash-attention call (forward or backward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GemmShape:
    """A (batched) matrix product's sizes."""

    m: int
    n: int
    k: int
    batch: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionShape:
    """A flash-attention call: ``heads`` query heads, ``seq_q`` queries, ``seq_k`` keys."""

    batch: int
    heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    head_dim_v: int
    causal: bool
    backward: bool = False


KernelShape = GemmShape | AttentionShape


def einsum_gemm(operands: tuple[str, ...], output: str, sizes: dict[str, int]
                ) -> GemmShape | None:
    """The GEMM a two-operand einsum is, or None (one operand, an outer product, a letter
    summed away inside one operand: not one GEMM).

    Example:
        >>> einsum_gemm(("bsh", "hf"), "bsf", {"b": 2, "s": 8, "h": 16, "f": 32})
        GemmShape(m=16, n=32, k=16, batch=1)
        >>> einsum_gemm(("bhsd", "bhtd"), "bhst", dict(b=2, h=4, s=8, t=8, d=16))
        GemmShape(m=8, n=8, k=16, batch=8)
    """
    if len(operands) != 2:
        return None
    left, right = set(operands[0]), set(operands[1])
    out = set(output)
    batch = left & right & out
    contracted = (left & right) - out
    if not contracted or (left | right) - out - contracted:
        return None
    size = lambda letters: math.prod(sizes[c] for c in letters)  # noqa: E731
    return GemmShape(m=size((left & out) - batch), n=size((right & out) - batch),
                     k=size(contracted), batch=size(batch))
