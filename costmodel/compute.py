"""Roofline time of one kernel: the slower of its arithmetic and its HBM traffic.

Why: node costs in the planner are local compute on local shapes; a roofline is the simplest
model that ranks "shard the matmul" against "replicate it" correctly.

Rules (a contract):
- seconds = max(flops / (peak[dtype] · efficiency), bytes_moved / hbm_bw), then raised to the
  device's ``min_kernel_s`` (launch overhead), except that a kernel with no FLOPs and no bytes
  (a no-op reshape or view) costs exactly 0.
- dtype lookup: the device's own entry if present, else the fallback chain below, else the
  "f32" peak. Integer and bool dtypes use the f32 peak unless the device lists them: their
  ops (gathers, masks, indices) are memory-bound, so the choice rarely matters.

Kernel model (:func:`kernel_seconds`): a device that carries ``kernels`` parameters is priced
per kernel shape instead: a :class:`~costmodel.kernels.Gemm` by :mod:`costmodel.gemm` (tile and
wave quantisation, small-K penalty), an :class:`~costmodel.kernels.Attention` by
:mod:`costmodel.attention` (measured FlashAttention throughput), anything else as a
memory-bound kernel: ``max(flops / (peak · gemm_efficiency), bytes / (hbm_bw ·
hbm_efficiency)) + launch_s`` (elementwise ops, norms, softmax, optimizer updates: their
FLOPs are negligible next to their bytes). Every kernel pays the fixed ``launch_s`` of
:class:`~costmodel.kernel_params.KernelParams` on top of its work (the device's
``min_kernel_s`` floor is the flat model's). A device without the parameters falls back to
:func:`compute_seconds` for every kernel, so its numbers are exactly the flat roofline's.
"""

from __future__ import annotations

import logging

import numpy as np

from costmodel.attention import attention_seconds
from costmodel.errors import InvalidValueError, UnknownDtypeError
from costmodel.gemm import gemm_seconds
from costmodel.kernels import Attention, Gemm, Kernel
from costmodel.link import DeviceSpec

logger = logging.getLogger(__name__)

_FALLBACKS: dict[str, tuple[str, ...]] = {
    "f8e5m2": ("f8e4m3", "bf16", "f16"),   # FP8 variants share tensor-core throughput
    "f8e4m3": ("bf16", "f16"),             # no FP8 units (A100): runs upcast to 16 bit
    "f16": ("bf16",),
    "bf16": ("f16",),
    "f64": ("f32",),
    "int8": ("f32",), "int32": ("f32",), "int64": ("f32",), "bool": ("f32",),
}
KNOWN_DTYPES = ("bf16", "f16", "f32", "f64", "f8e4m3", "f8e5m2", "int8", "int32", "int64",
                "bool")


def peak_flops(dtype: str, device: DeviceSpec) -> float:
    """Peak FLOP/s of ``device`` for ``dtype`` after the documented fallbacks.

    Raises:
        UnknownDtypeError: the dtype is unknown and the device lists no "f32" peak.

    Example:
        >>> from costmodel import get_preset
        >>> peak_flops("f8e4m3", get_preset("dgx-a100").device) == 312e12
        True
    """
    name = str(getattr(dtype, "value", dtype))
    for candidate in (name, *_FALLBACKS.get(name, ()), "f32"):
        if candidate in device.peak_flops_per_s:
            return float(device.peak_flops_per_s[candidate])
    listed = ", ".join(device.peak_flops_per_s)
    message = (f"device {device.name!r} has no peak FLOP/s for dtype {name!r} nor a fallback "
               f"(it lists: {listed}); add a peak_flops_per_s entry for {name!r} or 'f32'")
    raise UnknownDtypeError(message, dtype=name, device=device.name)


def compute_seconds(flops: float | np.ndarray, bytes_moved: float | np.ndarray, dtype: str,
                    device: DeviceSpec) -> float | np.ndarray:
    """Roofline seconds for a kernel of ``flops`` and ``bytes_moved`` in ``dtype``.

    Vectorized: arrays of flops/bytes give an array (broadcast together).

    Raises:
        InvalidValueError: negative or NaN flops/bytes. UnknownDtypeError: see :func:`peak_flops`.

    Example:
        >>> from costmodel import DeviceSpec
        >>> dev = DeviceSpec(name="toy", peak_flops_per_s={"bf16": 100.0}, hbm_bytes=1,
        ...                  hbm_bw_bytes_per_s=10.0, efficiency=0.5, min_kernel_s=0.1)
        >>> compute_seconds(1000, 20, "bf16", dev), compute_seconds(0, 0, "bf16", dev)
        (20.0, 0.0)
    """
    peak = peak_flops(dtype, device) * device.efficiency
    flop_array, byte_array = np.asarray(flops, dtype=float), np.asarray(bytes_moved, dtype=float)
    for name, values in (("flops", flop_array), ("bytes_moved", byte_array)):
        if values.size and (np.isnan(values).any() or values.min() < 0):
            message = f"{name} must be non-negative numbers, got {values!r}"
            raise InvalidValueError(message, field=name, value=values)
    seconds = np.maximum(flop_array / peak, byte_array / device.hbm_bw_bytes_per_s)
    seconds = np.maximum(seconds, device.min_kernel_s)
    seconds = np.where((flop_array == 0) & (byte_array == 0), 0.0, seconds)
    if seconds.ndim == 0:
        return float(seconds)
    return seconds


def kernel_seconds(kernel: Kernel | None, flops: float, bytes_moved: float, dtype: str,
                   device: DeviceSpec) -> float:
    """Seconds of one kernel: by its shape when ``device`` has kernel parameters, else the
    flat roofline (module docstring). ``flops`` and ``bytes_moved`` are the op's own counts
    (the memory floor and the non-GEMM rule use them; a GEMM or attention times its shape).

    A kernel with no FLOPs and no bytes (a view) costs 0, as in the flat model.

    Raises:
        InvalidValueError: negative or NaN counts. UnknownDtypeError: see :func:`peak_flops`.

    Example:
        >>> from costmodel import Gemm, get_preset
        >>> h100 = get_preset("dgx-h100").device
        >>> seconds = kernel_seconds(Gemm(m=4096, n=4096, k=4096), 2 * 4096**3, 3 * 2 * 4096**2,
        ...                          "bf16", h100)
        >>> 650 < 2 * 4096**3 / seconds / 1e12 < 800   # TFLOP/s, below the 989 peak
        True
    """
    if device.kernels is None:
        return float(compute_seconds(flops, bytes_moved, dtype, device))
    for name, value in (("flops", flops), ("bytes_moved", bytes_moved)):
        if not value >= 0:
            raise InvalidValueError(f"{name} must be a non-negative number, got {value!r}",
                                    field=name, value=value)
    if flops == 0 and bytes_moved == 0:
        return 0.0
    peak = peak_flops(dtype, device)
    if isinstance(kernel, Gemm):
        return gemm_seconds(kernel, bytes_moved, peak, device)
    if isinstance(kernel, Attention):
        return attention_seconds(kernel, bytes_moved, peak, device)
    params = device.kernels
    return max(flops / (peak * params.gemm_efficiency),
               bytes_moved / (device.hbm_bw_bytes_per_s * params.hbm_efficiency)) + \
        params.launch_s
