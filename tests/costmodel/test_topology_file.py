"""TOML topology files: exact round trips, preset extension, and one clear error per bad file."""

from __future__ import annotations

import pytest

from costmodel import (
    DeviceSpec,
    Link,
    Topology,
    TopologyFileError,
    TopologyLevel,
    dump_topology,
    get_preset,
    load_topology,
    loads_topology,
    parse_link_spec,
    preset_names,
)


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_round_trips(name, tmp_path) -> None:
    topology = get_preset(name)
    path = tmp_path / f"{name}.toml"
    path.write_text(dump_topology(topology))
    assert load_topology(path) == topology
    assert dump_topology(load_topology(path)) == dump_topology(topology)


def test_custom_topology_with_odd_names_round_trips() -> None:
    device = DeviceSpec(name='my "gpu"', peak_flops_per_s={"bf16": 1.234567891e14, "f32": 3.0},
                        hbm_bytes=12345, hbm_bw_bytes_per_s=0.1 + 0.2, efficiency=0.3,
                        min_kernel_s=1.1e-7)
    levels = (TopologyLevel(name="board", devices=2, link=Link(1e-7, 1 / 3e11, "xgmi")),
              TopologyLevel(name="rack", devices=16, link=Link(2e-6, 1 / 7e10, "")),
              TopologyLevel(name="world", devices=None, link=Link(0.0, 0.0, "free")))
    topology = Topology(name="odd", device=device, levels=levels,
                        axis_links={"tp": Link(1e-6, 1e-12, "x"), "data.parallel": Link(1, 1)},
                        named_links={"slow ib": Link(8e-6, 1 / 12.5e9, "slow ib")})
    assert loads_topology(dump_topology(topology)) == topology


def test_extending_a_preset(tmp_path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text("""
name = "half-memory-h100"
base = "dgx-h100"

[device]
hbm = "40GB"
min_kernel = "2us"

[device.peak_flops]
f32 = 4.95e14

[links]
slow-ib = {alpha = "8us", bw = "100Gb/s"}

[axes]
tp = "nvlink"
dp = {alpha = "5us", bw = "25GB/s"}
pp = "slow-ib"
""")
    topology = load_topology(path)
    base = get_preset("dgx-h100")
    assert topology.name == "half-memory-h100"
    assert topology.device.hbm_bytes == 40 * 10**9
    assert topology.device.min_kernel_s == 2e-6
    assert topology.device.peak_flops_per_s["f32"] == 4.95e14
    assert topology.device.peak_flops_per_s["bf16"] == 989e12       # inherited
    assert topology.levels == base.levels
    assert topology.axis_links["tp"] == base.levels[0].link
    assert topology.axis_links["dp"] == Link(5e-6, 1 / 25e9)
    assert topology.axis_links["pp"] == Link(8e-6, 1 / 12.5e9, "slow-ib")
    assert topology.named_links["slow-ib"].bw_bytes_per_s == pytest.approx(12.5e9)
    assert loads_topology(dump_topology(topology)) == topology


def test_standalone_file_with_levels() -> None:
    topology = loads_topology("""
name = "two-level"
[device]
name = "chip"
hbm_bytes = 1000
hbm_bw = "1TB/s"
[device.peak_flops_per_s]
bf16 = 1e15
[[levels]]
name = "board"
devices = 4
link = {name = "fast", alpha = "1us", bw = "100GB/s"}
[[levels]]
name = "net"
link = "alpha:10us,bw:10GB/s"
""")
    assert [(level.name, level.devices) for level in topology.levels] == \
        [("board", 4), ("net", None)]
    assert topology.levels[0].link == Link(1e-6, 1 / 100e9, "fast")
    assert topology.levels[1].link == Link(1e-5, 1 / 10e9)
    assert topology.device.efficiency == 1.0 and topology.device.min_kernel_s == 0.0


BAD_FILES = [
    ('base = "dgx-h100"\nlevles = []\n', "levles", "unknown key"),
    ('base = "dgx-h100"\n[device]\nhbm = "80GX"\n', "device.hbm", "'GX'"),
    ('base = "dgx-h200"\n', "base", "dgx-h100"),
    ('base = "dgx-h100"\n[axes]\ndp = "warp"\n', "axes.dp", "'warp'"),
    ('base = "dgx-h100"\n[axes]\ndp = {alpha = "5us"}\n', "axes.dp", "bw or beta"),
    ('base = "dgx-h100"\n[axes]\ndp = {alpha = "5us", bw = 1, speed = 2}\n', "axes.dp.speed",
     "unknown key"),
    ('base = "dgx-h100"\n[device]\nhbm = 1\nhbm_bytes = 2\n', "device.hbm_bytes", "only one"),
    ('name = "x"\n', "device.name", "required"),
    ('base = "dgx-h100"\n[[levels]]\nname = "a"\ndevices = 8\nlink = "nvlink"\n'
     '[[levels]]\nname = "b"\ndevices = 12\nlink = "ib"\n', "levels", "larger multiple"),
    ('base = "dgx-h100"\n[[levels]]\nname = "a"\n', "levels[0]", "needs name and link"),
    ('base = "dgx-h100"\nformat = "other/v9"\n', "format", "autoshard.topology/v1"),
    ('base = "dgx-h100"\n[device\n', "", "not valid TOML"),
]


@pytest.mark.parametrize(("text", "key", "culprit"), BAD_FILES,
                         ids=["typo", "unit", "base", "link-name", "link-incomplete",
                              "link-key", "both-keys", "no-device", "levels", "level-keys",
                              "format", "syntax"])
def test_bad_files_name_the_file_and_key(text, key, culprit, tmp_path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(TopologyFileError) as info:
        load_topology(path)
    err = info.value
    assert err.file == str(path) and err.key == key
    assert str(path) in str(err) and culprit in str(err)


def test_missing_file(tmp_path) -> None:
    path = tmp_path / "nope.toml"
    with pytest.raises(TopologyFileError, match="cannot read") as info:
        load_topology(str(path))
    assert info.value.file == str(path)


@pytest.mark.parametrize(("text", "key", "culprit"), [
    ('base = "dgx-h100"\n[device]\nefficiency = "high"\n', "device", "'high'"),
    ('base = "dgx-h100"\n[[levels]]\nname = "a"\ndevices = "x"\nlink = "nvlink"\n',
     "levels[0].devices", "'x'"),
    ('base = "dgx-h100"\n[[levels]]\nname = "a"\nlink = {alpha = "1us", bw = "fast"}\n',
     "levels[0].link", "'fast'"),
], ids=["efficiency", "devices", "level-link"])
def test_bad_values_name_the_key(text, key, culprit) -> None:
    with pytest.raises(TopologyFileError) as info:
        loads_topology(text, "inline.toml")
    assert info.value.key == key and culprit in str(info.value)
    assert str(info.value).startswith("inline.toml: ")


# ------------------------------------------------------------ measured-curve terms

V1_FILE = """format = "autoshard.topology/v1"
name = "written-before-curves"
[device]
name = "chip"
hbm_bytes = 1000
hbm_bw_bytes_per_s = 1e12
[device.peak_flops_per_s]
bf16 = 1e15
[[levels]]
name = "node"
devices = 8
link = { name = "nvlink", alpha_s = 1.9e-06, beta_s_per_byte = 2.2222222222222224e-12 }
[[levels]]
name = "cluster"
link = { name = "ib", alpha_s = 4e-06, beta_s_per_byte = 2e-11 }
"""


def test_files_without_curve_terms_load_as_pure_alpha_beta() -> None:
    topology = loads_topology(V1_FILE)
    assert all(level.link.is_alpha_beta for level in topology.levels)
    assert topology.levels[0].link == Link(1.9e-6, 2.2222222222222224e-12, "nvlink")
    assert dump_topology(topology).count("launch") == 0   # written as before the curve terms


def test_curve_terms_in_files_and_link_specs() -> None:
    topology = loads_topology(V1_FILE.replace(
        'link = { name = "ib", alpha_s = 4e-06, beta_s_per_byte = 2e-11 }',
        'link = { name = "ib", alpha = "4us", bw = "50GB/s", launch = "30us", '
        'pipeline_s = 2e-6, bus_efficiency = 0.9 }'))
    ib = topology.levels[1].link
    assert (ib.launch_s, ib.pipeline_s, ib.bus_efficiency) == (30e-6, 2e-6, 0.9)
    assert loads_topology(dump_topology(topology)) == topology
    spec = parse_link_spec("alpha:4us,bw:50GB/s,launch:30us,pipeline:2us,bus_efficiency:0.9")
    assert spec == Link(4e-6, 1 / 50e9, launch_s=30e-6, pipeline_s=2e-6, bus_efficiency=0.9)


@pytest.mark.parametrize(("link", "culprit"), [
    ('{alpha = "1us", bw = "1GB/s", bus_efficiency = 1.5}', "must be in (0, 1]"),
    ('{alpha = "1us", bw = "1GB/s", bus_efficiency = "most"}', "'most'"),
    ('{alpha = "1us", bw = "1GB/s", launch = "soon"}', "'soon'"),
    ('{alpha = "1us", bw = "1GB/s", launch = "1us", launch_s = 1e-6}', "only one"),
], ids=["efficiency-range", "efficiency-text", "launch-unit", "launch-twice"])
def test_bad_curve_terms_name_the_key(link, culprit) -> None:
    text = f'base = "dgx-h100"\n[axes]\ndp = {link}\n'
    with pytest.raises(TopologyFileError) as info:
        loads_topology(text, "inline.toml")
    assert info.value.key.startswith("axes.dp") and culprit in str(info.value)
