"""Presets as pure alpha-beta topologies, for tests whose expectations are textbook formulas.

The GPU presets carry measured-curve terms (costmodel.measured); a test that derives its
expected plan or price by hand from the alpha-beta formulas (Thakur et al. 2005) prices on the
same links with those terms removed, so its oracle stays independent of the fitted model.
Likewise the device: the GPU presets carry kernel-model parameters (``DeviceSpec.kernels``:
GEMM tile/wave quantisation, FlashAttention tables); the textbook preset drops them, so compute
is the flat roofline (flops / (peak · efficiency), floored at ``min_kernel_s``) those oracles
assume.
"""

from __future__ import annotations

import dataclasses
import functools

from costmodel import Link, Topology, get_preset


def plain(link: Link) -> Link:
    """``link`` with only its alpha, beta and name (a textbook alpha-beta link)."""
    return Link(link.alpha_s, link.beta_s_per_byte, link.name)


@functools.cache
def alpha_beta_preset(name: str) -> Topology:
    """Preset ``name`` with every link (levels, named, per-axis) made pure alpha-beta and its
    device priced by the flat roofline (no kernel model)."""
    preset = get_preset(name)
    levels = tuple(dataclasses.replace(level, link=plain(level.link))
                   for level in preset.levels)
    return dataclasses.replace(
        preset, levels=levels, device=dataclasses.replace(preset.device, kernels=None),
        named_links={key: plain(link) for key, link in preset.named_links.items()},
        axis_links={key: plain(link) for key, link in preset.axis_links.items()})
