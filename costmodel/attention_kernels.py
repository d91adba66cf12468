"""Which attention kernel a run uses, as the measured rates the kernel model prices it with.

Why: the presets carry one attention kernel per GPU (the fastest published: FlashAttention-3's
forward on the H100, FlashAttention-2 on the A100), but a training run uses whatever its
framework calls, and the kernels differ by up to 2.5× at the same shape (Dao 2023,
FlashAttention-2, figure 4: 80 against 189 TFLOP/s, causal, head dim 128, 16k tokens on an
A100). PyTorch's ``scaled_dot_product_attention`` runs FlashAttention-2 (PyTorch 2.2 release
notes: "FlashAttention-2 ... in SDPA"); llm-foundry's ``attn_impl: triton`` runs the Triton
FlashAttention of :mod:`costmodel.attention_data`. :func:`with_attention_kernel` returns the
topology with its device's attention rows replaced by the named kernel's.
"""

from __future__ import annotations

import dataclasses
from enum import Enum

from costmodel.attention_data import (
    A100_ATTENTION,
    A100_TRITON_ATTENTION,
    H100_ATTENTION,
    H100_FA2_ATTENTION,
    H100_TRITON_ATTENTION,
)
from costmodel.errors import InvalidValueError
from costmodel.kernel_params import AttentionRate
from costmodel.link import Topology


class AttentionKernel(Enum):
    """A fused attention implementation with published throughput."""

    FA2 = "fa2"
    FA3 = "fa3"
    TRITON = "triton"


ATTENTION_ROWS: dict[tuple[str, AttentionKernel], tuple[AttentionRate, ...]] = {
    ("A100-SXM4-80GB", AttentionKernel.FA2): A100_ATTENTION,
    ("A100-SXM4-80GB", AttentionKernel.TRITON): A100_TRITON_ATTENTION,
    # the 40 GB part: the same chip and clocks (attention is compute-bound)
    ("A100-SXM4-40GB", AttentionKernel.FA2): A100_ATTENTION,
    ("A100-SXM4-40GB", AttentionKernel.TRITON): A100_TRITON_ATTENTION,
    ("H100-SXM5-80GB", AttentionKernel.FA2): H100_FA2_ATTENTION,
    ("H100-SXM5-80GB", AttentionKernel.FA3): H100_ATTENTION,
    ("H100-SXM5-80GB", AttentionKernel.TRITON): H100_TRITON_ATTENTION,
}
"""(device name, kernel) → rows; FlashAttention-3 needs Hopper, so the A100 has none."""


def with_attention_kernel(topology: Topology, kernel: AttentionKernel | str) -> Topology:
    """``topology`` whose device prices attention as ``kernel`` (the rest unchanged).

    Raises:
        InvalidValueError: an unknown kernel name, or no published rates for it on the
            topology's device (or a device without kernel-model parameters).

    Example:
        >>> from costmodel import get_preset
        >>> a100 = get_preset("dgx-a100")
        >>> slow = with_attention_kernel(a100, "triton")
        >>> slow.device.kernels.attention == A100_TRITON_ATTENTION, slow.levels == a100.levels
        (True, True)
    """
    try:
        kernel = AttentionKernel(getattr(kernel, "value", kernel))
    except ValueError:
        known = ", ".join(k.value for k in AttentionKernel)
        raise InvalidValueError(f"attention kernel {kernel!r} is not one of {known}",
                                field="attention_kernel", value=kernel) from None
    device = topology.device
    rows = ATTENTION_ROWS.get((device.name, kernel))
    if rows is None or device.kernels is None:
        listed = ", ".join(k.value for (name, k) in ATTENTION_ROWS if name == device.name)
        raise InvalidValueError(
            f"no published {kernel.value} attention rates for the device {device.name!r} "
            f"(kernels with rates for it: {listed or 'none'}); give its rows in the "
            "topology file's [device.kernels] attention instead", field="attention_kernel",
            value=kernel.value)
    kernels = dataclasses.replace(device.kernels, attention=rows)
    return dataclasses.replace(topology, device=dataclasses.replace(device, kernels=kernels))
