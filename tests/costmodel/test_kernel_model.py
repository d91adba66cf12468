"""Kernel model dispatch: flat devices unchanged, memory-bound ops, attention from the tables."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import (
    Attention,
    AttentionPass,
    AttentionRate,
    DeviceSpec,
    Gemm,
    InvalidValueError,
    KernelParams,
    compute_seconds,
    get_preset,
    kernel_seconds,
)
from costmodel.attention import attention_fill, attention_tflops
from costmodel.attention_data import FA2_H100_FWD, FA2_H100_FWD_BWD, FA3_H100_FWD

FLAT = DeviceSpec(name="flat", peak_flops_per_s={"bf16": 100.0}, hbm_bytes=1,
                  hbm_bw_bytes_per_s=10.0, efficiency=0.5, min_kernel_s=0.1)


@pytest.mark.parametrize("kernel", [None, Gemm(m=8, n=8, k=8),
                                    Attention(batch=1, heads=1, seq_q=4, seq_k=4, head_dim=2,
                                              head_dim_v=2)])
@pytest.mark.parametrize(("flops", "nbytes"), [(1000, 20), (10, 500), (1, 1), (0, 0)])
def test_a_device_without_kernel_parameters_is_the_flat_roofline(kernel, flops, nbytes) -> None:
    assert kernel_seconds(kernel, flops, nbytes, "bf16", FLAT) == \
        compute_seconds(flops, nbytes, "bf16", FLAT)


def test_tpu_and_generic_presets_keep_the_flat_model() -> None:
    for name in ("tpu-v5e", "tpu-v5p", "generic"):
        assert get_preset(name).device.kernels is None


def test_memory_bound_op_is_bytes_at_achievable_bandwidth_plus_launch() -> None:
    h100 = get_preset("dgx-h100").device
    nbytes = 3 * 2 * 8192 * 4096.0      # an elementwise add of two bf16 [8192, 4096]
    expected = nbytes / (3.35e12 * 1832 / 2039) + 5.71e-6
    assert kernel_seconds(None, 8192 * 4096.0, nbytes, "bf16", h100) == pytest.approx(expected)
    assert kernel_seconds(None, 0.0, 0.0, "bf16", h100) == 0.0


def test_negative_counts_are_rejected() -> None:
    with pytest.raises(InvalidValueError, match="bytes_moved"):
        kernel_seconds(None, 1.0, -1.0, "bf16", get_preset("dgx-h100").device)


def test_attention_rates_are_the_published_points() -> None:
    params = get_preset("dgx-h100").device.kernels
    for (causal, dim), values in FA3_H100_FWD.items():
        for seq, value in zip((512, 1024, 2048, 4096, 8192, 16384), values, strict=True):
            shape = Attention(batch=1, heads=16, seq_q=seq, seq_k=seq, head_dim=dim,
                              head_dim_v=dim, causal=causal)
            assert attention_tflops(shape, params) == value
    # backward from FA2's H100 runs: 2.5 F in (3.5 F / R_fb − F / R_f)
    back = Attention(batch=1, heads=16, seq_q=4096, seq_k=4096, head_dim=64, head_dim_v=64,
                     causal=True, backward=True)
    r_fb, r_f = FA2_H100_FWD_BWD[(True, 64)][3], FA2_H100_FWD[(True, 64)][3]
    assert attention_tflops(back, params) == pytest.approx(2.5 / (3.5 / r_fb - 1 / r_f))


def test_attention_interpolates_in_log_sequence_and_clamps() -> None:
    rows = tuple(AttentionRate(pass_=AttentionPass.FWD_BWD, causal=True, head_dim=64, seq=s,
                               tflops=t) for s, t in ((1024, 100.0), (4096, 200.0)))
    params = KernelParams(sm_count=100, attention=rows)

    def rate(seq: int) -> float | None:
        return attention_tflops(Attention(batch=1, heads=1, seq_q=seq, seq_k=seq, head_dim=64,
                                          head_dim_v=64), params)
    assert rate(2048) == pytest.approx(150.0)      # halfway in log2
    assert rate(256) == 100.0 and rate(65536) == 200.0
    assert np.all(np.diff([rate(s) for s in (512, 1024, 1500, 2048, 3000, 4096)]) >= 0)


def test_a_small_attention_grid_pays_for_its_idle_sms() -> None:
    small = Attention(batch=1, heads=4, seq_q=1024, seq_k=1024, head_dim=128, head_dim_v=128)
    assert attention_fill(small, 132) == pytest.approx(32 / 132)    # 4 heads × 8 row blocks
    h100 = get_preset("dgx-h100").device
    big = dataclasses.replace(small, heads=132)                     # 1056 blocks = 8 waves
    assert attention_fill(big, 132) == 1.0
    per_head_small = kernel_seconds(small, 0.0, 1.0, "bf16", h100) / 4
    per_head_big = kernel_seconds(big, 0.0, 1.0, "bf16", h100) / 132
    assert per_head_small > 3 * per_head_big


@pytest.mark.parametrize(("field", "value", "match"), [
    ("sm_count", 0, "sm_count"), ("gemm_efficiency", 1.5, r"\(0, 1\]"),
    ("hbm_efficiency", 0, "hbm_efficiency"), ("gemm_k_overhead", -1, "non-negative"),
    ("gemm_tile", (128,), "rows, cols"), ("launch_s", float("nan"), "launch_s"),
])
def test_bad_kernel_parameters_name_the_field(field, value, match) -> None:
    with pytest.raises(InvalidValueError, match=match):
        KernelParams(**{"sm_count": 10, field: value})


def test_bad_attention_row_names_the_field() -> None:
    with pytest.raises(InvalidValueError, match="not one of fwd, bwd, fwd_bwd"):
        AttentionRate(pass_="forward", causal=True, head_dim=64, seq=512, tflops=1.0)
    with pytest.raises(InvalidValueError, match="tflops"):
        AttentionRate(pass_="fwd", causal=True, head_dim=64, seq=512, tflops=-1.0)
