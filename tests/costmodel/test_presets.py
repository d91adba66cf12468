"""Presets carry the published numbers; link specs resolve or fail naming the culprit."""

from __future__ import annotations

import pytest

from costmodel import (
    AttentionRate,
    DeviceSpec,
    InvalidValueError,
    KernelParams,
    Link,
    LinkSpecError,
    Topology,
    TopologyLevel,
    UnknownPresetError,
    get_preset,
    parse_link_spec,
    preset_names,
)

# (preset, bf16 FLOP/s, HBM bytes, HBM B/s, innermost level devices, inner B/s, outer B/s):
# NVIDIA H100/A100 datasheets, Google Cloud TPU v5e/v5p pages, scaling-book tpus.md.
PUBLISHED = [
    ("dgx-h100", 989e12, 80e9, 3.35e12, 8, 450e9, 400e9 / 8),
    ("dgx-a100", 312e12, 80e9, 2.039e12, 8, 300e9, 200e9 / 8),
    ("dgx-a100-40gb", 312e12, 40e9, 1.555e12, 8, 300e9, 200e9 / 8),
    # AWS EC2 P4/P5 pages: 400 and 3200 Gb/s of EFA per node; GCP A3 Mega: 8 × 200 Gb/s NICs.
    ("aws-p4d", 312e12, 40e9, 1.555e12, 8, 300e9, 400e9 / 8 / 8),   # p4d: A100 40GB
    ("aws-p5", 989e12, 80e9, 3.35e12, 8, 450e9, 3200e9 / 8 / 8),
    ("gcp-a3-mega", 989e12, 80e9, 3.35e12, 8, 450e9, 200e9 / 8),
    ("tpu-v5e", 197e12, 16e9, 819e9, 256, 4.5e10, 200e9 / 8 / 8),
    ("tpu-v5p", 459e12, 95e9, 2.765e12, 8960, 1.8e11, 50e9 / 8),
]


def test_preset_names() -> None:
    assert preset_names() == ("aws-p4d", "aws-p5", "dgx-a100", "dgx-a100-40gb", "dgx-h100",
                              "gcp-a3-mega", "generic", "tpu-v5e", "tpu-v5p")


@pytest.mark.parametrize(("name", "bf16", "hbm", "hbm_bw", "node", "inner_bw", "outer_bw"),
                         PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_presets_have_published_numbers(name, bf16, hbm, hbm_bw, node, inner_bw,
                                        outer_bw) -> None:
    topology = get_preset(name)
    assert topology.name == name
    assert topology.device.peak_flops_per_s["bf16"] == bf16
    assert topology.device.hbm_bytes == hbm
    assert topology.device.hbm_bw_bytes_per_s == hbm_bw
    inner, outer = topology.levels
    assert inner.devices == node and outer.devices is None
    assert inner.link.bw_bytes_per_s == pytest.approx(inner_bw, rel=1e-12)
    assert outer.link.bw_bytes_per_s == pytest.approx(outer_bw, rel=1e-12)
    assert 0 < topology.device.efficiency <= 1 and topology.device.min_kernel_s > 0


def test_gpu_link_names() -> None:
    h100 = get_preset("dgx-h100")
    assert [level.link.name for level in h100.levels] == ["nvlink", "ib"]
    # bus efficiencies quoted by NCCL maintainers (nccl-tests issues 212 and 290)
    assert h100.levels[0].link.bus_efficiency == pytest.approx(370 / 450)
    assert h100.levels[1].link.bus_efficiency == pytest.approx(47 / 50)


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-a100", "dgx-a100-40gb", "aws-p4d", "aws-p5",
                                  "gcp-a3-mega"])
def test_gpu_presets_follow_measured_curves_and_tpus_stay_alpha_beta(name) -> None:
    for level in get_preset(name).levels:
        assert not level.link.is_alpha_beta
        assert level.link.launch_s > 0 and level.link.pipeline_s > 0
    for name in ("tpu-v5e", "tpu-v5p", "generic"):
        assert all(level.link.is_alpha_beta for level in get_preset(name).levels)


def test_a100_40gb_is_the_80gb_chip_with_its_own_memory() -> None:
    small, large = get_preset("dgx-a100-40gb").device, get_preset("dgx-a100").device
    assert small.kernels.sm_count == large.kernels.sm_count == 108
    assert small.kernels.gemm_efficiency == large.kernels.gemm_efficiency
    assert small.kernels.attention == large.kernels.attention
    # STREAM triad at full occupancy, gpu-benches gpu-stream/a100_40.txt: 1360 of 1555 GB/s
    assert small.kernels.hbm_efficiency * small.hbm_bw_bytes_per_s == pytest.approx(1360e9)


def test_generic_is_unit_less() -> None:
    generic = get_preset("generic")
    for level in generic.levels:
        assert (level.link.alpha_s, level.link.beta_s_per_byte) == (1.0, 1.0)
    for name in ("nvlink", "ib", "pcie", "ici", "ethernet"):
        link = parse_link_spec(name, generic)
        assert (link.alpha_s, link.beta_s_per_byte) == (1.0, 1.0)


def test_preset_lookup_is_forgiving_about_case_and_underscores() -> None:
    assert get_preset("DGX_H100") is get_preset("dgx-h100")


def test_unknown_preset_lists_close_names() -> None:
    with pytest.raises(UnknownPresetError) as info:
        get_preset("dgx-h10")
    assert info.value.close[0] == "dgx-h100"
    assert "'dgx-h10'" in str(info.value) and "dgx-h100" in str(info.value)


def test_presets_are_hashable_values() -> None:
    assert hash(get_preset("dgx-h100")) == hash(get_preset("dgx-h100"))
    assert get_preset("dgx-h100") != get_preset("dgx-a100")


H100 = get_preset("dgx-h100")


@pytest.mark.parametrize(("spec", "alpha_s", "bw"), [
    ("nvlink", 0.89e-6, 450e9), ("ib", 0.479e-6, 50e9), ("pcie", 2.5e-6, 64e9),
    ("ethernet", 14e-6, 12.5e9), ("ici", 1e-6, 1.8e11),
    ("alpha:5e-6,bw:25e9", 5e-6, 25e9), ("alpha:5us,bw:25GB/s", 5e-6, 25e9),
    ("alpha=2us, bw=400Gb/s", 2e-6, 50e9), ("alpha:1,beta:1", 1.0, 1.0),
], ids=lambda v: str(v))
def test_parse_link_spec(spec, alpha_s, bw) -> None:
    link = parse_link_spec(spec, H100)
    assert link.alpha_s == pytest.approx(alpha_s, rel=1e-12)
    assert link.bw_bytes_per_s == pytest.approx(bw, rel=1e-12)


def test_named_spec_returns_the_level_link_itself() -> None:
    assert parse_link_spec("nvlink", H100) == H100.levels[0].link
    assert parse_link_spec("nvlink", get_preset("dgx-a100")).bw_bytes_per_s == \
        pytest.approx(300e9)


@pytest.mark.parametrize(("spec", "culprit"), [
    ("warp-drive", "no link is named 'warp-drive'"),
    ("alpha:5us", "exactly one of bw or beta"),
    ("alpha:5us,bw:25GB/s,beta:1", "exactly one of bw or beta"),
    ("alpha:5us,speed:3", "unknown key 'speed'"),
    ("alpha:5parsecs,bw:1", "parsecs"),
    ("alpha:5us,alpha:6us,bw:1", "given twice"),
    ("alpha,bw:1", "'alpha' is not KEY:VALUE"),
    ("", "empty"),
], ids=["unknown-name", "no-bw", "both", "bad-key", "bad-unit", "twice", "no-colon", "empty"])
def test_bad_link_specs(spec, culprit) -> None:
    with pytest.raises(LinkSpecError) as info:
        parse_link_spec(spec, H100)
    message = str(info.value)
    assert info.value.spec == spec and culprit in message
    assert "nvlink" in message and "alpha:" in message   # says what is accepted


def test_link_validation() -> None:
    with pytest.raises(InvalidValueError, match="alpha_s"):
        Link(-1.0, 1e-9)
    with pytest.raises(InvalidValueError, match="bw_bytes_per_s"):
        Link.from_bandwidth(1e-6, 0.0)
    assert Link.from_bandwidth(1e-6, 25e9) == Link(1e-6, 4e-11)


def _device() -> DeviceSpec:
    return DeviceSpec(name="d", peak_flops_per_s={"f32": 1.0}, hbm_bytes=1,
                      hbm_bw_bytes_per_s=1.0)


@pytest.mark.parametrize(("levels", "culprit"), [
    ((), "at least one level"),
    ((TopologyLevel(name="a", devices=None, link=Link(1, 1)),
      TopologyLevel(name="b", devices=None, link=Link(1, 1))), "only the outermost"),
    ((TopologyLevel(name="a", devices=8, link=Link(1, 1)),
      TopologyLevel(name="b", devices=12, link=Link(1, 1))), "larger multiple"),
    ((TopologyLevel(name="a", devices=8, link=Link(1, 1)),
      TopologyLevel(name="b", devices=8, link=Link(1, 1))), "larger multiple"),
], ids=["empty", "two-unbounded", "not-multiple", "not-larger"])
def test_topology_validation(levels, culprit) -> None:
    with pytest.raises(InvalidValueError, match=culprit):
        Topology(name="t", device=_device(), levels=levels)


def test_device_validation() -> None:
    with pytest.raises(InvalidValueError, match="efficiency"):
        DeviceSpec(name="d", peak_flops_per_s={"f32": 1.0}, hbm_bytes=1, hbm_bw_bytes_per_s=1.0,
                   efficiency=1.5)
    with pytest.raises(InvalidValueError, match="peak_flops_per_s"):
        DeviceSpec(name="d", peak_flops_per_s={}, hbm_bytes=1, hbm_bw_bytes_per_s=1.0)


@pytest.mark.parametrize("name", preset_names())
def test_repr_evaluates_back(name) -> None:
    topology = get_preset(name)
    namespace = {"Topology": Topology, "DeviceSpec": DeviceSpec, "TopologyLevel": TopologyLevel,
                 "Link": Link, "inf": float("inf"), "KernelParams": KernelParams,
                 "AttentionRate": AttentionRate}
    assert eval(repr(topology), namespace) == topology


@pytest.mark.parametrize("devices", ["8", 2.5, 0, True], ids=["string", "fraction", "zero",
                                                             "bool"])
def test_level_devices_must_be_positive_integers(devices) -> None:
    with pytest.raises(InvalidValueError, match="devices"):
        TopologyLevel(name="node", devices=devices, link=Link(1, 1))


def test_the_agreed_api_is_importable() -> None:
    import costmodel
    agreed = ("Link", "Group", "CollectiveKind", "collective_seconds", "DeviceSpec", "Topology",
              "TopologyLevel", "get_preset", "preset_names", "compute_seconds", "parse_bytes",
              "format_bytes", "parse_link_spec", "load_topology", "dump_topology",
              "CostModelError", "UnknownPresetError", "LinkSpecError", "TopologyFileError",
              "UnitError")
    assert [name for name in agreed if not hasattr(costmodel, name)] == []
    assert issubclass(costmodel.UnitError, costmodel.CostModelError)
