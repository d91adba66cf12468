"""Attention kernels by name: the rows each one prices with, and the H100 Triton estimate's
premise checked on the published figures."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel import (
    Attention,
    AttentionKernel,
    InvalidValueError,
    get_preset,
    kernel_seconds,
    with_attention_kernel,
)
from costmodel.attention import attention_tflops
from costmodel.attention_data import (
    FA1_A100_FWD_BWD,
    FA1_H100_FWD_BWD,
    FA2_A100_FWD_BWD,
    FA2_H100_FWD_BWD,
    SEQS,
    TRITON_A100_FWD_BWD,
    TRITON_H100_FWD_BWD,
)


def test_ampere_instruction_kernels_gain_alike_from_an_h100() -> None:
    # the premise of TRITON_H100_FWD_BWD: FlashAttention-1 and -2 (both without Hopper
    # instructions) speed up by the same H100/A100 factor, within 10 %, at every causal
    # head-dim-128 point of the two published figures
    for seq_index in range(len(SEQS)):
        key = (True, 128)
        fa1 = FA1_H100_FWD_BWD[key][seq_index] / FA1_A100_FWD_BWD[key][seq_index]
        fa2 = FA2_H100_FWD_BWD[key][seq_index] / FA2_A100_FWD_BWD[key][seq_index]
        assert 0.9 < fa1 / fa2 < 1.1, SEQS[seq_index]
        assert 1.5 < fa1 < 1.8   # far below the 3.2x of the dense bf16 peaks (989 / 312)


def test_triton_h100_is_the_a100_figure_times_the_fa1_ratio() -> None:
    rate = TRITON_H100_FWD_BWD[(True, 128)][-1]
    assert rate == pytest.approx(80 * 137 / 83, abs=0.05)   # 16k tokens: 80, 137, 83 as read
    for key, values in TRITON_A100_FWD_BWD.items():
        for a100, h100 in zip(values, TRITON_H100_FWD_BWD[key], strict=True):
            assert a100 < h100 < 2 * a100


def test_a_triton_attention_costs_its_published_rate_on_an_a100() -> None:
    a100 = with_attention_kernel(get_preset("dgx-a100"), AttentionKernel.TRITON).device
    # 16k tokens as 1 × 16 heads × 16384 (hidden 2048, head dim 128): the figure's own run
    shape = Attention(batch=1, heads=16, seq_q=16384, seq_k=16384, head_dim=128,
                      head_dim_v=128, causal=True)
    assert attention_tflops(shape, a100.kernels) == 80.0
    flops = 4 * 16 * 16384**2 * 128 / 2             # FlashAttention's count, causal halved
    seconds = kernel_seconds(shape, flops, 0.0, "bf16", a100)
    fill = 16 * 128 / (-(-16 * 128 // 108) * 108)    # 2048 blocks of 128 rows on 108 SMs
    assert seconds == pytest.approx(flops / (80e12 * fill) + a100.kernels.launch_s)
    fa2 = kernel_seconds(shape, flops, 0.0, "bf16", get_preset("dgx-a100").device)
    assert seconds / fa2 == pytest.approx(189 / 80, rel=0.01)


def test_only_the_attention_rows_change() -> None:
    h100 = get_preset("dgx-h100")
    fa2 = with_attention_kernel(h100, "fa2")
    assert fa2.levels == h100.levels and fa2.device.name == h100.device.name
    assert dataclasses.replace(fa2.device.kernels, attention=()) == \
        dataclasses.replace(h100.device.kernels, attention=())
    assert with_attention_kernel(h100, "fa3") == h100   # the preset's own kernel


@pytest.mark.parametrize(("preset", "kernel", "message"), [
    ("dgx-a100", "fa3", "no published fa3 attention rates for the device 'A100-SXM4-80GB'"),
    ("dgx-a100", "xformers", "is not one of fa2, fa3, triton"),
    ("tpu-v5p", "fa2", "no published fa2 attention rates"),
])
def test_a_kernel_without_published_rates_is_refused(preset, kernel, message) -> None:
    with pytest.raises(InvalidValueError, match=message):
        with_attention_kernel(get_preset(preset), kernel)
