"""Flash-attention time from measured kernel throughput, by head size and sequence length.

Why: attention is neither a GEMM cuBLAS runs nor a memory-bound op; its speed is what the
FlashAttention kernels reach, which the FlashAttention-2 paper (Dao 2023, arXiv:2307.08691,
figures 4-7) and FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608, figure 5) publish
per head dimension, sequence length and mask. A device's ``KernelParams.attention`` holds such
rows (the presets' come from :mod:`costmodel.attention_data`); this module reads them:

- pass: a forward kernel uses the "fwd" rows, a backward kernel the "bwd" rows; a device that
  only lists "fwd_bwd" (one figure timing both) uses those for either.
- mask: rows of the same ``causal`` flag; if a device lists only the other flag, those.
- sequence length: piecewise linear in log2(seq_k) between measured lengths, clamped to the
  measured range (no extrapolation); head dimension: linear between measured sizes, clamped.
- grid: FlashAttention-2 parallelises over batch, heads and blocks of 128 query rows (paper,
  section 3.2; the backward over blocks of keys). A grid smaller than the GPU's SMs, or ending
  in a partial wave, runs at ``rate · ctas / (waves · sm_count)``. The published runs (16k
  tokens, hidden 2048) fill at least 97 % of their last wave on 108 or 132 SMs, so their rates
  are used as full-wave rates (a bias of at most 3 %).

    seconds = max(flops / (rate · fill), bytes / (hbm_bw · hbm_efficiency)) + launch_s

``flops`` is FlashAttention's count (:class:`costmodel.kernels.Attention`: causal halves it),
the convention its TFLOP/s are measured in. With no rows at all the kernel is priced like a
GEMM at the device's ``gemm_efficiency`` ceiling.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from costmodel.gemm import params_of
from costmodel.kernel_params import AttentionPass, AttentionRate, KernelParams
from costmodel.kernels import Attention
from costmodel.link import DeviceSpec

BLOCK_ROWS = 128
"""Rows (queries, or keys in the backward) per thread block (FlashAttention-2, section 3.2)."""


def _rows_for(attention: Attention, params: KernelParams) -> list[AttentionRate]:
    wanted = AttentionPass.BWD if attention.backward else AttentionPass.FWD
    for pass_ in (wanted, AttentionPass.FWD_BWD):
        rows = [row for row in params.attention if row.pass_ is pass_]
        same_mask = [row for row in rows if row.causal == attention.causal]
        if same_mask or rows:
            return same_mask or rows
    return []


def _along_seq(rows: Sequence[AttentionRate], seq: int) -> float:
    ordered = sorted(rows, key=lambda row: row.seq)
    xs = np.log2([row.seq for row in ordered])
    return float(np.interp(math.log2(seq), xs, [row.tflops for row in ordered]))


def attention_tflops(attention: Attention, params: KernelParams) -> float | None:
    """The interpolated throughput (TFLOP/s, FlashAttention's count) or None without rows.

    Example:
        >>> from costmodel import get_preset
        >>> params = get_preset("dgx-a100").device.kernels
        >>> attention_tflops(Attention(batch=8, heads=16, seq_q=2048, seq_k=2048,
        ...                            head_dim=128, head_dim_v=128), params)
        155.0
    """
    rows = _rows_for(attention, params)
    if not rows:
        return None
    dims = sorted({row.head_dim for row in rows})
    rates = [_along_seq([row for row in rows if row.head_dim == dim], attention.seq_k)
             for dim in dims]
    return float(np.interp(attention.head_dim, dims, rates))


def attention_fill(attention: Attention, sm_count: int) -> float:
    """Busy fraction of the SM slots the kernel's waves occupy (1.0 for whole waves)."""
    rows = attention.seq_k if attention.backward else attention.seq_q
    ctas = attention.batch * attention.heads * math.ceil(rows / BLOCK_ROWS)
    return ctas / (math.ceil(ctas / sm_count) * sm_count)


def attention_seconds(attention: Attention, bytes_moved: float, peak_flops_per_s: float,
                      device: DeviceSpec) -> float:
    """Seconds of one flash-attention kernel on ``device`` (module docstring)."""
    params = params_of(device)
    tflops = attention_tflops(attention, params)
    rate = tflops * 1e12 if tflops is not None else peak_flops_per_s * params.gemm_efficiency
    compute = attention.flops / (rate * attention_fill(attention, params.sm_count))
    memory = bytes_moved / (device.hbm_bw_bytes_per_s * params.hbm_efficiency)
    return max(compute, memory) + params.launch_s
