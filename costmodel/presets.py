"""Named hardware records (device + link hierarchy), each number with its source.

Why: ``--topology dgx-h100`` must mean one well-documented machine, and studies need a
unit-less ``generic`` mesh. Every constant below carries a citation comment; nothing is inline
elsewhere. The sources are listed in docs/sources.md ("Links and devices").

GPU links (NVLink, InfiniBand, EFA, TCPXO) carry the measured-curve terms of
:mod:`costmodel.measured` (launch floor, hop latency, pipeline fill, bus efficiency), fitted on
the nccl-tests tables in ``costmodel/data/nccl_tests/``; the comment above each constant names
the table. PCIe is a GPU link NCCL drives with the same kernels, so it gets the same curve
terms (NCCL's per-collective base latency and the NVLink fit's pipeline fill) with PCI's own hop
latency (see :data:`PCIE_CURVE`): without them a PCIe all-reduce of a few bytes came out
cheaper than the measured NVLink curve. Ethernet/DCN and TPU ICI links stay pure alpha-beta:
alphas per algorithm step from NCCL's ``hwLat`` (Simple network figure for sockets, 14 µs) and
≈1 µs per ICI hop (jax-ml scaling-book ``sharding.md``, ``T_min``).

Efficiency 0.6 for every real device: large bf16 matmuls reach ~60-70% of dense peak in
practice (e.g. ~600-700 of 989 TFLOP/s on H100), and the roofline applies it to every op.
Minimum kernel time 4 µs on GPUs (CUDA launch overhead of a few µs), 1 µs on TPUs (XLA fuses
and issues ops back to back without host launches).

The H100 and A100 devices also carry kernel-model parameters (``DeviceSpec.kernels``: GEMM
tile/wave quantisation, FlashAttention throughput, memory-bound ops at achievable HBM
bandwidth; :func:`costmodel.compute.kernel_seconds`), which replace the flat efficiency for
them; their sources are beside :data:`H100_KERNELS` and :data:`A100_KERNELS`. TPUs keep the
flat roofline (the GEMM model is one of thread blocks on SMs).
"""

from __future__ import annotations

import dataclasses
import difflib
import logging

from costmodel.attention_data import A100_ATTENTION, H100_ATTENTION
from costmodel.errors import UnknownPresetError
from costmodel.kernel_params import KernelParams
from costmodel.link import DeviceSpec, Link, Topology, TopologyLevel

logger = logging.getLogger(__name__)


# NCCL tuning.cc hwLat, ring, LL128 column (µs): PCI 2.5; Simple NET 14 for sockets
# (NVIDIA/nccl src/graph/tuning.cc at 01afd20a77b5804e0ecf1042509dd9d20ebf9e93; the same values
# in hwLatencies at 5067397c2676d5aed50042fc39e5c8ee96eb0027).
PCIE_ALPHA_S = 2.5e-6
ETHERNET_ALPHA_S = 14.0e-6
# NCCL's base latency, the part of every collective's predicted time that no transport changes:
# baseLatencies[Tree][LL] = 6.8 µs (Ring LL 6.6; LL128 14.0, Simple 8.4), added once per call
# before the per-step hwLatencies (NVIDIA/nccl src/graph/tuning.cc at
# 5067397c2676d5aed50042fc39e5c8ee96eb0027, ncclTunerConstantsDefaults and ncclTopoTuneModel).
NCCL_BASE_LATENCY_S = 6.8e-6
# scaling-book sharding.md: "T_min ≈ 1 µs" per ICI hop.
ICI_ALPHA_S = 1.0e-6

# --- measured-curve terms (costmodel.measured): launch floor, hop latency, pipeline fill, bus
# efficiency. Fitted with costmodel.calibrate on the nccl-tests tables shipped in
# costmodel/data/nccl_tests/ (provenance in that folder's README and each file's header);
# `autoshard bench calibration` refits and rechecks them. Rounded to 3 significant digits.
#
# A100 NVLink3/NVSwitch + IB HDR (dgx-a100): one joint fit of the Azure ND A100 v4 single-node
# table (8 ranks: pins the node level) and the OCI BM.GPU4.8 two-node table (16 ranks, RoCE
# 8 × 200 Gb/s per node: the same per-GPU rate and GPUDirect RDMA verbs path as HDR IB, the
# closest measured stand-in; no IB table with citable provenance was available). OCI's two-node
# curve is NVLink-bound at large sizes, so it does not pin the network's bus efficiency: that
# is 192/200 = 0.96, from an NCCL maintainer's "on DGX-A100 with 8×200 Gbit/s IB we measure
# 192 GB/s AllReduce BusBW" (https://github.com/NVIDIA/nccl/issues/812).
A100_NVLINK_CURVE = {"launch_s": 6.80e-6, "pipeline_s": 1.74e-5, "bus_efficiency": 0.775}
A100_NVLINK_ALPHA_S = 8.90e-7
HDR_IB_CURVE = {"launch_s": 6.80e-6, "pipeline_s": 3.83e-6, "bus_efficiency": 0.96}
HDR_IB_ALPHA_S = 4.79e-7
# A100 NVLink3 + EFA (aws-p4d): joint fit of the Azure single-node table and the AWS p4de
# two-node table (EFA 4 × 100 Gb/s per node); the EFA level is the bottleneck there and is
# pinned: bus efficiency 0.920 of 400 Gb/s per node.
P4D_NVLINK_CURVE = {"launch_s": 3.77e-6, "pipeline_s": 9.02e-6, "bus_efficiency": 0.789}
P4D_NVLINK_ALPHA_S = 1.90e-6
EFA_CURVE = {"launch_s": 3.65e-6, "pipeline_s": 1.25e-4, "bus_efficiency": 0.920}
EFA_ALPHA_S = 1.98e-6
# H100 (dgx-h100, aws-p5, gcp-a3-mega): no H100 table ships with costmodel. Latency terms are
# carried over from the A100 fits of the same transport (same NCCL, NVSwitch, RDMA verbs or
# EFA); bus efficiencies from NCCL maintainers: NVLink4 "~370 GB/s" busbw of the 450 GB/s line
# rate for ring (any collective; https://github.com/NVIDIA/nccl-tests/issues/212), IB NDR
# "46-48 GB/s per NIC" of 50 (https://github.com/NVIDIA/nccl-tests/issues/290).
H100_NVLINK_CURVE = {"launch_s": 6.80e-6, "pipeline_s": 1.74e-5, "bus_efficiency": 370 / 450}
NDR_IB_CURVE = {"launch_s": 6.80e-6, "pipeline_s": 3.83e-6, "bus_efficiency": 47 / 50}
# PCIe: no nccl-tests table with provenance ships, so no fit. NCCL's model prices a PCIe
# collective like an NVLink one but with PCI's per-step latency: the same baseLatencies (per
# algorithm and protocol, not per transport) and hwLatencies[PCI] ≥ hwLatencies[NVLINK] in every
# column (ring LL/LL128/Simple 1.0/2.5/5.7 against 0.6/1.9/3.4 µs; tuning.cc at 5067397c above).
# So: launch NCCL's base latency (6.8 µs, which the A100 NVLink fit also landed on), the NVLink
# fit's pipeline fill (the LL → LL128 → Simple switches are the same code on either transport;
# an assumption, uncalibrated) and bus efficiency 1 (no measurement: the link rate bounds it).
# Every term is at least NVLink's, so PCIe is never priced below NVLink at any size.
PCIE_CURVE = {"launch_s": NCCL_BASE_LATENCY_S, "pipeline_s": A100_NVLINK_CURVE["pipeline_s"],
              "bus_efficiency": 1.0}
# GPUDirect-TCPXO (gcp-a3-mega): no table; it offloads TCP to a NIC through a NCCL net plugin,
# as EFA goes through aws-ofi-nccl, so the EFA fit is the assumption (flagged, uncalibrated).
TCPXO_CURVE = dict(EFA_CURVE)

# NVLink4 (H100 SXM5): 18 links, 450 GB/s per direction (NVIDIA H100 product page).
NVLINK4 = Link.from_bandwidth(A100_NVLINK_ALPHA_S, 450e9, "nvlink", **H100_NVLINK_CURVE)
# NVLink3 (A100 SXM4): 12 links, 300 GB/s per direction (NVIDIA A100 datasheet).
NVLINK3 = Link.from_bandwidth(A100_NVLINK_ALPHA_S, 300e9, "nvlink", **A100_NVLINK_CURVE)
NVLINK3_P4D = Link.from_bandwidth(P4D_NVLINK_ALPHA_S, 300e9, "nvlink", **P4D_NVLINK_CURVE)
# DGX H100: 8× ConnectX-7 NDR 400 Gb/s per node, one per GPU → 400/8 = 50 GB/s per GPU.
IB_NDR = Link.from_bandwidth(HDR_IB_ALPHA_S, 400e9 / 8, "ib", **NDR_IB_CURVE)
# DGX A100: 8× HDR 200 Gb/s per node, one per GPU → 25 GB/s per GPU (nccl issue 812).
IB_HDR = Link.from_bandwidth(HDR_IB_ALPHA_S, 200e9 / 8, "ib", **HDR_IB_CURVE)
# AWS p4d/p4de.24xlarge: 4 EFA × 100 Gb/s = 400 Gb/s per node (AWS EC2 P4 instance page, as
# quoted in the p4de table's header; not re-read here) →
# 400/8/8 = 6.25 GB/s per GPU.
EFA_P4D = Link.from_bandwidth(EFA_ALPHA_S, 400e9 / 8 / 8, "efa", **EFA_CURVE)
# AWS p5.48xlarge: 32 EFA × 100 Gb/s = 3200 Gb/s per node (AWS EC2 P5 instance page; not
# re-read here) →
# 400 Gb/s = 50 GB/s per GPU.
EFA_P5 = Link.from_bandwidth(EFA_ALPHA_S, 3200e9 / 8 / 8, "efa", **EFA_CURVE)
# GCP a3-megagpu-8g: 8 GPU NICs × 200 Gb/s with GPUDirect-TCPXO (Google Cloud A3 Mega
# machine-type docs; not re-read here) → 200 Gb/s = 25 GB/s per GPU.
TCPXO = Link.from_bandwidth(EFA_ALPHA_S, 200e9 / 8, "tcpxo", **TCPXO_CURVE)
# PCIe Gen5 x16: 32 GT/s × 16 lanes ≈ 64 GB/s per direction; Gen4 x16 half of that.
PCIE_GEN5 = Link.from_bandwidth(PCIE_ALPHA_S, 64e9, "pcie", **PCIE_CURVE)
PCIE_GEN4 = Link.from_bandwidth(PCIE_ALPHA_S, 32e9, "pcie", **PCIE_CURVE)
# A TPU host's PCIe carries no NCCL, so no NCCL floor: textbook, like the TPU's other links.
PCIE_GEN4_HOST = Link.from_bandwidth(PCIE_ALPHA_S, 32e9, "pcie")
# 100 GbE: 100 Gb/s = 12.5 GB/s.
ETHERNET_100G = Link.from_bandwidth(ETHERNET_ALPHA_S, 100e9 / 8, "ethernet")
# TPU v5e ICI: 4.5e10 B/s one-way per link (scaling-book tpus.md). Sub-pod v5e axes (< 16)
# have no wraparound, so a ring runs one way: β = 1/4.5e10 (scaling-book's 4-chip example:
# 34 MB all-gather, theory ≈ 560 µs = 34e6·3/4 / 4.5e10).
ICI_V5E = Link.from_bandwidth(ICI_ALPHA_S, 4.5e10, "ici")
# TPU v5p ICI: 9e10 B/s one-way per link, 1.8e11 bidirectional; 3-D torus with wraparound, so
# a ring uses both directions (scaling-book: AllGather T = V / W_ICI,bidirectional).
ICI_V5P = Link.from_bandwidth(ICI_ALPHA_S, 1.8e11, "ici")
# v5e hosts: 2× 100 Gb/s NICs per host of 8 chips → 25 Gb/s = 3.125e9 B/s per chip
# (cloud.google.com/tpu/docs/v5e).
DCN_V5E = Link.from_bandwidth(ETHERNET_ALPHA_S, 200e9 / 8 / 8, "dcn")
# v5p: DCN 50 Gb/s per chip = 6.25e9 B/s (cloud.google.com/tpu/docs/v5p).
DCN_V5P = Link.from_bandwidth(ETHERNET_ALPHA_S, 50e9 / 8, "dcn")

STANDARD_LINKS: dict[str, Link] = {
    "nvlink": NVLINK4, "ib": IB_NDR, "pcie": PCIE_GEN5, "ici": ICI_V5P,
    "ethernet": ETHERNET_100G,
}
"""Fallback meaning of the link names ``--link`` accepts when a topology does not define them."""

GPU_EFFICIENCY = 0.6
TPU_EFFICIENCY = 0.6
GPU_MIN_KERNEL_S = 4e-6
TPU_MIN_KERNEL_S = 1e-6

# --- kernel model (costmodel.gemm, costmodel.attention) ------------------------------------
# SM counts: H100 SXM5 132 SMs (NVIDIA H100 Tensor Core GPU Architecture whitepaper, "the
# H100 SXM5 ... 132 SMs"); A100 108 SMs (NVIDIA A100 Tensor Core GPU Architecture whitepaper);
# both as listed in stas00/ml-engineering compute/accelerator/README.md at
# 7bc7c3054eb93c277a4755c597ae0864d77a63f1.
#
# H100 GEMM terms: fitted with costmodel.calibrate_gemm on OpenXLA's measured sm_90 bf16 table
# (costmodel/data/gemm/xla-sm90-bf16.csv, provenance in its header), 3 significant digits:
# ceiling 0.869 of the 989 TFLOP/s peak, small-K cost 136 K elements per tile, 5.71 µs per
# kernel; median error 2.7 %, 90th percentile 12 %. Tile 128×128 (K step 64): a cuBLAS tile of
# the "Matrix Multiplication Background User's Guide" (section 2.3); it fits the table best of
# the tiles ≥ 128 (2.7 % median vs 4.1 % for 256×128); the table's power-of-two shapes cannot
# separate smaller tiles (64×64: 2.4 %). Check against an independent measurement: the model
# gives 792 TFLOP/s at the "maximum achievable matmul FLOPS" shape 2048×2048×13312 where
# stas00/ml-engineering (compute/accelerator/README.md, commit above) measured 794.5.
# HBM: 1832 GB/s STREAM triad of 2039 GB/s peak on an H100 PCIe (te42kyfo/gpu-benches
# gpu-stream/h100_pcie.txt at 1c36d509ee717dca9215c27135fa1e611bb03ed1, full occupancy; the
# peak as that repository's gpu-stream/plot.py lists it); no SXM5 (HBM3) run with provenance
# was found, so the PCIe part's fraction stands in.
H100_KERNELS = KernelParams(sm_count=132, gemm_tile=(128, 128), gemm_tile_k=64,
                            gemm_efficiency=0.869, gemm_k_overhead=136.0, launch_s=5.71e-6,
                            hbm_efficiency=1832 / 2039, attention=H100_ATTENTION)
# A100: no matmul table with provenance; tile, small-K cost and launch carried over from the
# H100 fit. The ceiling is set so that the model reproduces the measured maximum achievable
# matmul FLOPS, 271.2 TFLOP/s at 1024×10240×5120 (stas00/ml-engineering, commit above):
# 0.917 (the raw ratio 271.2/312 = 0.869 is what the best shape reaches, below a full-wave,
# K → ∞ ceiling). HBM: 1759 GB/s triad of 2039 GB/s on an A100 80GB (gpu-benches
# gpu-stream/a100_80.txt, commit above; the file does not name the SXM or PCIe variant, the
# 2039 GB/s peak is the one plot.py lists).
A100_KERNELS = KernelParams(sm_count=108, gemm_tile=(128, 128), gemm_tile_k=64,
                            gemm_efficiency=0.917, gemm_k_overhead=136.0, launch_s=5.71e-6,
                            hbm_efficiency=1759 / 2039, attention=A100_ATTENTION)
# A100 SXM4 40GB: the same GA100 chip and clocks as the 80 GB part (so its GEMM and attention
# terms), HBM2 at 1,555 GB/s; 1360 GB/s STREAM triad at full occupancy (gpu-benches
# gpu-stream/a100_40.txt, commit above; 1555 GB/s is the peak its plot.py lists).
A100_40GB_KERNELS = dataclasses.replace(A100_KERNELS, hbm_efficiency=1360 / 1555)

# H100 SXM5 80GB: dense bf16/f16 989.4 TFLOP/s, FP8 1978.9, INT8 1978.9 TOPS, FP32 (non-tensor)
# 67, FP64 tensor 67; 80 GB HBM3 at 3.35 TB/s (nvidia.com/en-us/data-center/h100).
H100 = DeviceSpec(name="H100-SXM5-80GB",
                  peak_flops_per_s={"bf16": 989e12, "f16": 989e12, "f8e4m3": 1978.9e12,
                                    "int8": 1978.9e12, "f32": 67e12, "f64": 67e12},
                  hbm_bytes=80 * 10**9, hbm_bw_bytes_per_s=3.35e12,
                  efficiency=GPU_EFFICIENCY, min_kernel_s=GPU_MIN_KERNEL_S,
                  kernels=H100_KERNELS)
# A100 SXM4 80GB: dense bf16/f16 312 TFLOP/s, INT8 624 TOPS, FP32 19.5, FP64 tensor 19.5;
# 80 GB HBM2e at 2,039 GB/s (NVIDIA A100 datasheet).
A100 = DeviceSpec(name="A100-SXM4-80GB",
                  peak_flops_per_s={"bf16": 312e12, "f16": 312e12, "int8": 624e12,
                                    "f32": 19.5e12, "f64": 19.5e12},
                  hbm_bytes=80 * 10**9, hbm_bw_bytes_per_s=2.039e12,
                  efficiency=GPU_EFFICIENCY, min_kernel_s=GPU_MIN_KERNEL_S,
                  kernels=A100_KERNELS)
# A100 SXM4 40GB: the same chip and peaks; 40 GB HBM2 at 1,555 GB/s (NVIDIA A100 datasheet).
A100_40GB = dataclasses.replace(A100, name="A100-SXM4-40GB", hbm_bytes=40 * 10**9,
                                hbm_bw_bytes_per_s=1.555e12, kernels=A100_40GB_KERNELS)
# TPU v5e: 197 TFLOP/s bf16, 394 int8; 16 GB HBM2 at 819 GB/s (cloud.google.com/tpu/docs/v5e).
# f32 matmuls run as one bf16 MXU pass under JAX's default precision, hence f32 = bf16 peak.
TPU_V5E = DeviceSpec(name="TPU-v5e",
                     peak_flops_per_s={"bf16": 197e12, "f32": 197e12, "int8": 394e12},
                     hbm_bytes=16 * 10**9, hbm_bw_bytes_per_s=819e9,
                     efficiency=TPU_EFFICIENCY, min_kernel_s=TPU_MIN_KERNEL_S)
# TPU v5p: 459 TFLOP/s bf16, 918 int8; 95 GB HBM2e at 2,765 GB/s (cloud.google.com/tpu/docs/v5p).
TPU_V5P = DeviceSpec(name="TPU-v5p",
                     peak_flops_per_s={"bf16": 459e12, "f32": 459e12, "int8": 918e12},
                     hbm_bytes=95 * 10**9, hbm_bw_bytes_per_s=2.765e12,
                     efficiency=TPU_EFFICIENCY, min_kernel_s=TPU_MIN_KERNEL_S)

UNIT_LINK = Link(1.0, 1.0, "generic")
# Unit-less studies (as Alpa's mesh_alpha = mesh_beta = 1): communication only, compute free.
GENERIC_DEVICE = DeviceSpec(name="generic", peak_flops_per_s={"f32": float("inf")},
                            hbm_bytes=2**60, hbm_bw_bytes_per_s=float("inf"),
                            efficiency=1.0, min_kernel_s=0.0)


def _dgx(name: str, device: DeviceSpec, nvlink: Link, ib: Link, pcie: Link) -> Topology:
    levels = (TopologyLevel(name="node", devices=8, link=nvlink),
              TopologyLevel(name="cluster", devices=None, link=ib))
    return Topology(name=name, device=device, levels=levels,
                    named_links={"pcie": pcie, "ethernet": ETHERNET_100G})


def _tpu(name: str, device: DeviceSpec, ici: Link, pod: int, dcn: Link) -> Topology:
    # A torus gives every mesh axis its own ICI links, so every axis inside a pod sees the
    # per-axis bandwidth of ``ici``; a group spanning two torus axes is priced as one ring at
    # that bandwidth (conservative: scaling-book's V/(W·n_axes) would use both axes' links).
    levels = (TopologyLevel(name="pod", devices=pod, link=ici),
              TopologyLevel(name="dcn", devices=None, link=dcn))
    return Topology(name=name, device=device, levels=levels,
                    named_links={"ethernet": ETHERNET_100G, "pcie": PCIE_GEN4_HOST})


def _generic() -> Topology:
    names = ("nvlink", "ib", "pcie", "ici", "ethernet")
    return Topology(name="generic", device=GENERIC_DEVICE,
                    levels=(TopologyLevel(name="mesh", devices=None, link=UNIT_LINK),),
                    named_links={name: Link(1.0, 1.0, name) for name in names})


_PRESETS: dict[str, Topology] = {
    # The comments above the links say which measured table each level was fitted on.
    "dgx-h100": _dgx("dgx-h100", H100, NVLINK4, IB_NDR, PCIE_GEN5),
    "dgx-a100": _dgx("dgx-a100", A100, NVLINK3, IB_HDR, PCIE_GEN4),
    # the original DGX A100 (8 × A100 40GB): the same NVLink3/NVSwitch and 8 × 200 Gb/s HDR IB
    "dgx-a100-40gb": _dgx("dgx-a100-40gb", A100_40GB, NVLINK3, IB_HDR, PCIE_GEN4),
    # p4d.24xlarge: 8 × A100 40GB (AWS EC2 P4 instance page: "8 NVIDIA A100 Tensor Core GPUs",
    # 320 GB HBM2 per instance; p4de.24xlarge is the 8 × 80 GB one); the links fit p4de's tables
    "aws-p4d": _dgx("aws-p4d", A100_40GB, NVLINK3_P4D, EFA_P4D, PCIE_GEN4),
    "aws-p5": _dgx("aws-p5", H100, NVLINK4, EFA_P5, PCIE_GEN5),
    "gcp-a3-mega": _dgx("gcp-a3-mega", H100, NVLINK4, TCPXO, PCIE_GEN5),
    # v5e pod: 16×16 = 256 chips, 2-D torus.
    "tpu-v5e": _tpu("tpu-v5e", TPU_V5E, ICI_V5E, 256, DCN_V5E),
    # v5p pod: 8,960 chips, 3-D torus.
    "tpu-v5p": _tpu("tpu-v5p", TPU_V5P, ICI_V5P, 8960, DCN_V5P),
    "generic": _generic(),
}


def preset_names() -> tuple[str, ...]:
    """Names accepted by :func:`get_preset`, sorted."""
    return tuple(sorted(_PRESETS))


def get_preset(name: str) -> Topology:
    """The preset topology called ``name`` (case and ``_``/``-`` insensitive).

    Raises:
        UnknownPresetError: listing close names and every known one.

    Example:
        >>> get_preset("dgx-h100").device.peak_flops_per_s["bf16"]
        989000000000000.0
    """
    key = str(name).strip().lower().replace("_", "-")
    if key in _PRESETS:
        return _PRESETS[key]
    close = tuple(difflib.get_close_matches(key, preset_names(), n=3, cutoff=0.5))
    hint = f"did you mean {', '.join(close)}? " if close else ""
    message = (f"unknown topology preset {name!r}; {hint}known presets: "
               f"{', '.join(preset_names())} (or a .toml topology file)")
    raise UnknownPresetError(message, name=str(name), close=close, known=preset_names())
