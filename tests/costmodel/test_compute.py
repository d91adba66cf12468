"""Roofline compute time against hand arithmetic on a toy device, plus dtype fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel import (
    CostModelError,
    DeviceSpec,
    UnknownDtypeError,
    compute_seconds,
    get_preset,
    peak_flops,
)

# peak 100 FLOP/s at efficiency 0.5 → 50 FLOP/s effective; HBM 10 B/s; floor 0.1 s.
TOY = DeviceSpec(name="toy", peak_flops_per_s={"bf16": 100.0, "f32": 40.0}, hbm_bytes=1,
                 hbm_bw_bytes_per_s=10.0, efficiency=0.5, min_kernel_s=0.1)


@pytest.mark.parametrize(("flops", "nbytes", "dtype", "expected"), [
    (1000, 20, "bf16", 20.0),      # compute bound: 1000/50 = 20 > 20/10 = 2
    (10, 500, "bf16", 50.0),       # memory bound: 500/10 = 50 > 10/50 = 0.2
    (1, 1, "bf16", 0.1),           # both tiny: the kernel floor
    (0, 0, "bf16", 0.0),           # a no-op (reshape/view) costs exactly 0
    (0, 5, "bf16", 0.5),           # pure copy: 5/10
    (1000, 0, "f32", 50.0),        # f32 peak 40·0.5 = 20 FLOP/s
    (1000, 0, "int32", 50.0),      # ints use the f32 peak
    (1000, 0, "f16", 20.0),        # f16 falls back to bf16
], ids=["compute", "memory", "floor", "noop", "copy", "f32", "int32", "f16-fallback"])
def test_roofline(flops, nbytes, dtype, expected) -> None:
    assert compute_seconds(flops, nbytes, dtype, TOY) == pytest.approx(expected, rel=1e-12)


def test_vectorized_equals_scalar() -> None:
    flops = np.array([0.0, 1.0, 1000.0, 10.0, 0.0])
    nbytes = np.array([0.0, 1.0, 20.0, 500.0, 5.0])
    seconds = compute_seconds(flops, nbytes, "bf16", TOY)
    assert isinstance(seconds, np.ndarray)
    expected = [compute_seconds(float(f), float(b), "bf16", TOY) for f, b in
                zip(flops, nbytes, strict=True)]
    np.testing.assert_allclose(seconds, expected, rtol=1e-12)
    np.testing.assert_allclose(seconds, [0.0, 0.1, 20.0, 50.0, 0.5], rtol=1e-12)


def test_h100_matmul_by_hand() -> None:
    # 4096³ bf16 matmul: 2·4096³ FLOPs at 989e12·0.6; bytes 3·4096²·2 at 3.35e12 B/s.
    h100 = get_preset("dgx-h100").device
    flops, nbytes = 2 * 4096**3, 3 * 4096**2 * 2
    expected = max(flops / (989e12 * 0.6), nbytes / 3.35e12)
    assert compute_seconds(flops, nbytes, "bf16", h100) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("preset", "dtype", "expected"), [
    ("dgx-a100", "f8e4m3", 312e12),   # no FP8 on A100: upcast to 16 bit
    ("dgx-h100", "f8e5m2", 1978.9e12),
    ("tpu-v5e", "f64", 197e12),       # f64 → f32, which on TPU is one bf16 pass
    ("dgx-h100", "bool", 67e12),
], ids=["a100-fp8", "h100-e5m2", "v5e-f64", "h100-bool"])
def test_dtype_fallbacks(preset, dtype, expected) -> None:
    assert peak_flops(dtype, get_preset(preset).device) == expected


def test_generic_compute_is_free() -> None:
    assert compute_seconds(1e15, 1e12, "bf16", get_preset("generic").device) == 0.0


def test_unknown_dtype_without_f32_fallback() -> None:
    device = DeviceSpec(name="bf16-only", peak_flops_per_s={"bf16": 1.0}, hbm_bytes=1,
                        hbm_bw_bytes_per_s=1.0)
    with pytest.raises(UnknownDtypeError) as info:
        compute_seconds(1.0, 1.0, "complex64", device)
    assert "'complex64'" in str(info.value) and "bf16-only" in str(info.value)


def test_negative_flops_rejected() -> None:
    with pytest.raises(CostModelError, match="flops"):
        compute_seconds(-1.0, 0.0, "bf16", TOY)
