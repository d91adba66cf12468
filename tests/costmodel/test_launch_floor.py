"""PCIe pays NCCL's per-collective floor; written alpha-beta links below the measured floor warn.

Expected values are written from the cited constants, not read back from the presets: NCCL
``src/graph/tuning.cc`` at 5067397c2676d5aed50042fc39e5c8ee96eb0027 gives the base latency
``baseLatencies[Tree][LL] = 6.8`` µs (no transport term) and ``hwLatencies[PCI][Ring][LL128] =
2.5`` µs per step; an all-reduce over n ranks takes 2(n−1) steps (``nsteps``, same file), and
nccl-tests' bus factor for all-reduce is 2(n−1)/n (``doc/PERFORMANCE.md``).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from costmodel import (
    CollectiveKind,
    LaunchFloorWarning,
    Link,
    collective_seconds,
    curve_terms,
    get_preset,
    parse_link_spec,
    undercut_floor,
)

K = CollectiveKind
GPU_PRESETS = ("dgx-h100", "dgx-a100", "dgx-a100-40gb", "aws-p4d", "aws-p5", "gcp-a3-mega")
SIZES = 2.0 ** np.arange(3, 31)  # 8 B … 1 GiB, every power of two
NCCL_BASE_LATENCY_S = 6.8e-6  # baseLatencies[Tree][LL]
PCI_STEP_S = 2.5e-6  # hwLatencies[PCI][Ring][LL128]


@pytest.mark.parametrize("kind", [K.ALL_REDUCE, K.ALL_GATHER, K.REDUCE_SCATTER, K.ALL_TO_ALL],
                         ids=lambda k: k.value)
@pytest.mark.parametrize("preset", GPU_PRESETS)
def test_pcie_is_never_cheaper_than_nvlink_at_any_size(preset, kind) -> None:
    topology = get_preset(preset)
    nvlink, pcie = parse_link_spec("nvlink", topology), parse_link_spec("pcie", topology)
    slow = collective_seconds(kind, SIZES, ((8, pcie),))
    fast = collective_seconds(kind, SIZES, ((8, nvlink),))
    cheaper = [int(m) for m, s, f in zip(SIZES, slow, fast, strict=True) if s < f]
    assert not cheaper, f"{preset}: pcie {kind.value} on 8 ranks is cheaper at {cheaper} B"


@pytest.mark.parametrize(("preset", "bandwidth"), [("dgx-h100", 64e9), ("dgx-a100", 32e9)])
def test_pcie_all_reduce_floor_is_nccls_base_plus_its_pci_steps(preset, bandwidth) -> None:
    pcie = parse_link_spec("pcie", get_preset(preset))
    nvlink = parse_link_spec("nvlink", get_preset(preset))
    ranks = 8
    floor = NCCL_BASE_LATENCY_S + 2 * (ranks - 1) * PCI_STEP_S  # 41.8 µs
    terms = curve_terms(K.ALL_REDUCE, ((ranks, pcie),))
    assert terms.latency_s == pytest.approx(floor, rel=1e-12)
    # the ramp is the NVLink fit's (the same NCCL protocol switches), the rate the link's
    assert terms.pipeline_s == nvlink.pipeline_s
    m = 8.0
    at_rate = 2 * (ranks - 1) / ranks * m / bandwidth
    expected = floor + (math.sqrt(nvlink.pipeline_s) + math.sqrt(at_rate)) ** 2
    assert collective_seconds(K.ALL_REDUCE, m, ((ranks, pcie),)) == pytest.approx(expected,
                                                                                rel=1e-12)


def _ib_floor_s(ranks: int) -> float:
    """The dgx-h100 IB curve on 8 bytes, written out: launch + 2·min(ring, tree) hops + fill
    (the preset's NDR terms: launch 6.8 µs, 0.479 µs per hop, fill 3.83 µs, 47 of 50 GB/s)."""
    hops = min(ranks - 1, (ranks - 1).bit_length()) if ranks > 2 else 1
    at_rate = 2 * (ranks - 1) / ranks * 8.0 / (47e9)
    return 6.8e-6 + 2 * hops * 0.479e-6 + (math.sqrt(3.83e-6) + math.sqrt(at_rate)) ** 2


def _nvlink_floor_s(ranks: int) -> float:
    """The dgx-h100 NVLink curve on 8 bytes, written out as ``_ib_floor_s`` (the preset's
    NVLink terms: launch 6.8 µs, 0.89 µs per hop, fill 17.4 µs, 370 of 450 GB/s)."""
    hops = min(ranks - 1, (ranks - 1).bit_length()) if ranks > 2 else 1
    at_rate = 2 * (ranks - 1) / ranks * 8.0 / (370e9)
    return 6.8e-6 + 2 * hops * 0.89e-6 + (math.sqrt(17.4e-6) + math.sqrt(at_rate)) ** 2


def test_a_textbook_link_below_the_measured_floor_is_found() -> None:
    gap = undercut_floor(Link.from_bandwidth(5e-6, 100e9), 2, get_preset("dgx-h100"), level=1)
    assert gap is not None and gap.floor_link == "ib"
    assert gap.textbook_s == pytest.approx(5e-6 + 8.0 / 100e9, rel=1e-12)  # one exchange
    assert gap.floor_s == pytest.approx(_ib_floor_s(2), rel=1e-12)


@pytest.mark.parametrize(("spec", "topology"), [
    ("alpha:5us,bw:100GB/s,launch:6.8us,pipeline:17.4us", "dgx-h100"),  # floor written
    ("pcie", "dgx-h100"), ("nvlink", "dgx-h100"),
    ("alpha:50us,bw:100GB/s", "dgx-h100"),  # slow enough per step
    ("alpha:5us,bw:100GB/s", "tpu-v5p"),  # no measured link to undercut
    ("alpha:1,beta:1", "generic"),
], ids=["launch-given", "pcie", "nvlink", "slow-alpha", "tpu", "generic"])
def test_no_warning_when_the_link_keeps_the_floor(spec, topology) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", LaunchFloorWarning)
        MeshLinks.build(Mesh(axes=(("dp", 2), ("tp", 4))), get_preset(topology), {"dp": spec})


def test_a_written_link_below_the_floor_warns_naming_the_axis_and_the_fix() -> None:
    with pytest.warns(LaunchFloorWarning) as caught:
        MeshLinks.build(Mesh(axes=(("dp", 2), ("tp", 4))), get_preset("dgx-h100"),
                        {"dp": "alpha:5us,bw:100GB/s"})
    message = str(caught[0].message)
    assert "--link dp=alpha:5us,bw:100GB/s" in message and "2 ranks" in message
    assert "launch:6.8us" in message and "ib" in message


# dgx-h100 has nodes of 8 devices: in dp=2,tp=4 the dp axis stays inside a node (NVLink); in
# dp=2,tp=8 it spans two nodes (IB). A 15 µs-per-step textbook link prices the 2-rank probe at
# 15 µs: above the IB curve's 11.6 µs, below the NVLink curve's 26.0 µs.
@pytest.mark.parametrize(("mesh", "spec", "crossed", "floor"), [
    ((("dp", 2), ("tp", 4)), "alpha:15us,bw:100GB/s", "nvlink", _nvlink_floor_s(2)),
    ((("dp", 2), ("tp", 4)), "alpha:5us,bw:100GB/s", "nvlink", _nvlink_floor_s(2)),
    ((("dp", 2), ("tp", 8)), "alpha:5us,bw:100GB/s", "ib", _ib_floor_s(2)),
    ((("dp", 16),), "alpha:1us,bw:100GB/s", "ib", None),  # nvlink×8 + ib×2: the outer one
], ids=["in-node-between-curves", "in-node", "across-nodes", "spanning-both"])
def test_an_axis_is_held_to_the_curve_of_the_level_it_crosses(mesh, spec, crossed,
                                                             floor) -> None:
    with pytest.warns(LaunchFloorWarning) as caught:
        MeshLinks.build(Mesh(axes=mesh), get_preset("dgx-h100"), {"dp": spec})
    message = str(caught[0].message)
    level = "node" if crossed == "nvlink" else "cluster"
    assert f" us of the measured {crossed} curve of the {level} level" in message, message
    if floor is not None:  # the curve written out holds for 2 ranks (one exchange)
        assert f"below the {floor * 1e6:.3g} us of the measured {crossed}" in message, message


def test_an_axis_across_nodes_is_not_held_to_the_nvlink_curve() -> None:
    """15 µs is below NVLink's 26.0 µs but above the IB curve the axis actually crosses."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", LaunchFloorWarning)
        MeshLinks.build(Mesh(axes=(("dp", 2), ("tp", 8))), get_preset("dgx-h100"),
                        {"dp": "alpha:15us,bw:100GB/s"})
