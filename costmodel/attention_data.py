"""Published FlashAttention throughput (TFLOP/s) per head size, sequence length and mask.

Read off the bar labels of the benchmark figures shipped in Dao-AILab/flash-attention at
0251105a2fb19d2957484b7f023cd8c115286ced (last changed in 7ef24848cf2f855077cef88fe122775b727dcd74),
the same figures as in the papers:

- ``assets/flash2_a100_fwd_bwd_benchmark.png``: FlashAttention-2 forward + backward on A100
  80GB SXM4 (Dao, "FlashAttention-2", arXiv:2307.08691, figure 4);
- ``assets/flash2_h100_fwd_bwd_benchmark.png``: FlashAttention-2 forward + backward on H100
  80GB SXM5 (same paper, figure 7);
- ``assets/flash3_fp16_fwd.png``: forward, BF16/FP16, H100 80GB SXM5, FlashAttention-3 and
  FlashAttention-2 bars (Shah et al., "FlashAttention-3", arXiv:2407.08608, figure 5).

The two FlashAttention-2 forward + backward figures also carry the other kernels' bars: the
first FlashAttention (CUDA, "FlashAttention"; both GPUs) and "FlashAttention Triton" (A100
only), the *experimental* Triton kernel ``flash_attn/flash_attn_triton.py`` of the same
repository, which mosaicml/llm-foundry copies as ``llmfoundry/models/layers/flash_attn_triton.py``
(its ``attn_impl: triton``). Those bars are read here too (``FA1_*``, ``TRITON_A100_FWD_BWD``).

Every run has 16k tokens in total (batch = 16384 / seqlen) and hidden size 2048 (32 heads of
64 or 16 of 128); FLOPs are FlashAttention's count (causal halved, backward 2.5× forward).
Values are as printed; a label hidden behind a figure's legend is left out (``None``) and one
partly hidden but legible is marked in a comment. Sequence lengths 512 … 16k.
"""

from __future__ import annotations

from costmodel.kernel_params import AttentionPass, AttentionRate

SEQS = (512, 1024, 2048, 4096, 8192, 16384)

# (causal, head_dim) → TFLOP/s at SEQS.
FA2_A100_FWD_BWD: dict[tuple[bool, int], tuple[float | None, ...]] = {
    (False, 64): (132, None, 162, 171, 175, 176),    # 1k label behind the legend
    (False, 128): (None, 173, 187, 196, 201, 203),   # 512 hidden; 1k partly hidden, read 173
    (True, 64): (88, 119, 140, 156, 165, 171),
    (True, 128): (99, 133, 155, 173, 182, 189),
}
FA2_H100_FWD_BWD: dict[tuple[bool, int], tuple[float | None, ...]] = {
    (False, 64): (215, 254, 274, 288, 294, 296),
    (False, 128): (248, 294, 320, 326, 335, 338),    # 1k partly hidden, read 294
    (True, 64): (141, 192, 232, 257, 273, 284),
    (True, 128): (163, 221, 265, 294, 308, 328),
}
# Same figures, the other kernels' bars (every label legible; checked on 2x crops).
FA1_A100_FWD_BWD: dict[tuple[bool, int], tuple[float | None, ...]] = {
    (False, 64): (91, 92, 104, 108, 110, 110),
    (False, 128): (76, 72, 76, 80, 82, 83),
    (True, 64): (58, 70, 77, 87, 92, 97),
    (True, 128): (55, 62, 69, 76, 80, 83),
}
FA1_H100_FWD_BWD: dict[tuple[bool, int], tuple[float | None, ...]] = {
    (False, 64): (157, 159, 161, 161, 166, 168),
    (False, 128): (127, 127, 128, 131, 137, 139),
    (True, 64): (104, 123, 136, 138, 149, 156),
    (True, 128): (98, 109, 108, 126, 135, 137),
}
TRITON_A100_FWD_BWD: dict[tuple[bool, int], tuple[float | None, ...]] = {
    (False, 64): (90, 102, 98, 98, 100, 100),
    (False, 128): (78, 85, 90, 93, 95, 95),
    (True, 64): (59, 75, 79, 76, 79, 80),
    (True, 128): (50, 61, 68, 74, 78, 80),
}
FA3_H100_FWD: dict[tuple[bool, int], tuple[float | None, ...]] = {
    (False, 64): (333, 392, 460, 476, 496, 497),
    (False, 128): (467, 565, 625, 638, 646, 648),    # 1k partly hidden, read 565
    (True, 64): (197, 265, 371, 420, 460, 473),
    (True, 128): (292, 423, 521, 579, 602, 616),
}
FA2_H100_FWD: dict[tuple[bool, int], tuple[float | None, ...]] = {
    (False, 64): (282, 306, 318, 321, 322, 324),
    (False, 128): (309, 350, 362, 368, 370, 370),
    (True, 64): (180, 229, 262, 284, 295, 299),
    (True, 128): (191, 260, 298, 319, 333, 335),
}


def rows(table: dict[tuple[bool, int], tuple[float | None, ...]], pass_: AttentionPass
         ) -> tuple[AttentionRate, ...]:
    """The table's readable points as :class:`AttentionRate` rows."""
    return tuple(AttentionRate(pass_=pass_, causal=causal, head_dim=dim, seq=seq,
                               tflops=float(value))
                 for (causal, dim), values in table.items()
                 for seq, value in zip(SEQS, values, strict=True) if value is not None)


def backward_rows(fwd: dict[tuple[bool, int], tuple[float | None, ...]],
                  fwd_bwd: dict[tuple[bool, int], tuple[float | None, ...]]
                  ) -> tuple[AttentionRate, ...]:
    """Backward-only throughput of one kernel from its forward and forward + backward runs.

    With F the forward FLOPs, the forward + backward run does 3.5·F in 3.5·F / R_fb and the
    forward F in F / R_f, so the backward's 2.5·F take the difference:
    R_bwd = 2.5 / (3.5 / R_fb − 1 / R_f).

    Example (H100, FlashAttention-2, no mask, head dim 128, 8k: 370 forward, 335 both):
        >>> round(backward_rows({(False, 128): (370,)}, {(False, 128): (335,)})[0].tflops, 1)
        322.8
    """
    out = []
    for key, values in fwd_bwd.items():
        for seq, both, forward in zip(SEQS, values, fwd[key], strict=False):
            if both is None or forward is None:
                continue
            rate = 2.5 / (3.5 / both - 1 / forward)
            out.append(AttentionRate(pass_=AttentionPass.BWD, causal=key[0], head_dim=key[1],
                                     seq=seq, tflops=rate))
    return tuple(out)


def scaled(table: dict[tuple[bool, int], tuple[float | None, ...]],
           new: dict[tuple[bool, int], tuple[float | None, ...]],
           old: dict[tuple[bool, int], tuple[float | None, ...]]
           ) -> dict[tuple[bool, int], tuple[float | None, ...]]:
    """``table`` carried to another GPU point by point: ``table · new / old``, where ``new``
    and ``old`` are one reference kernel's rates on the target and the measured GPU.

    Example (Triton's A100 rate, scaled by the first FlashAttention's H100/A100 ratio):
        >>> scaled({(True, 128): (80,)}, {(True, 128): (137,)}, {(True, 128): (83,)})
        {(True, 128): (132.0,)}
    """
    out: dict[tuple[bool, int], tuple[float | None, ...]] = {}
    for key, values in table.items():
        out[key] = tuple(None if v is None or n is None or o is None else round(v * n / o, 1)
                         for v, n, o in zip(values, new[key], old[key], strict=False))
    return out


TRITON_H100_FWD_BWD = scaled(TRITON_A100_FWD_BWD, FA1_H100_FWD_BWD, FA1_A100_FWD_BWD)
"""H100 "FlashAttention Triton": no published H100 figure has its bars, so its A100 rates are
carried over with the first FlashAttention's measured H100/A100 ratio at the same point. Both
are FlashAttention-1-style kernels on Ampere instructions (the Triton one is pinned to a 2022
pre-MLIR Triton, which emits no Hopper wgmma/TMA code), so they gain alike from the H100's
clocks and SMs; FlashAttention-2, another Ampere-instruction kernel, gains the same (its
H100/A100 ratio is within 10 % of FlashAttention-1's at every causal head-dim-128 point), which
``tests/costmodel/test_attention_kernels.py`` checks. An estimate, labelled as such."""

A100_ATTENTION = rows(FA2_A100_FWD_BWD, AttentionPass.FWD_BWD)
"""A100: FlashAttention-2's forward + backward rate, used for either pass (no per-pass
figure ships with the repository)."""

H100_ATTENTION = rows(FA3_H100_FWD, AttentionPass.FWD) + backward_rows(FA2_H100_FWD,
                                                                       FA2_H100_FWD_BWD)
"""H100: FlashAttention-3's forward; backward from FlashAttention-2's H100 runs (the
FlashAttention-3 backward figure is not among the shipped ones), a conservative choice."""
H100_FA2_ATTENTION = rows(FA2_H100_FWD, AttentionPass.FWD) + backward_rows(FA2_H100_FWD,
                                                                           FA2_H100_FWD_BWD)
"""H100 running FlashAttention-2 (PyTorch's SDPA flash backend): its forward and the backward
derived from its forward + backward runs."""
A100_TRITON_ATTENTION = rows(TRITON_A100_FWD_BWD, AttentionPass.FWD_BWD)
H100_TRITON_ATTENTION = rows(TRITON_H100_FWD_BWD, AttentionPass.FWD_BWD)
