"""Which levels a calibration fits: a multi-node table alone keeps the node level from the base;
a single-node table with it fits both (costmodel.calibration_levels).

Oracles: the dgx-a100 preset's NVLink constants (costmodel/presets.py, fitted on the Azure
single-node table), the measured AWS p4de table (issue 26's targets: median |pred/meas − 1|
≤ 10 %, worst ≤ 35 %), and tables generated from known link parameters.
"""

from __future__ import annotations

import dataclasses
from importlib import resources

import numpy as np
import pytest

from costmodel import (
    CollectiveKind,
    Link,
    NcclTable,
    Topology,
    TopologyLevel,
    collective_seconds,
    get_preset,
    read_nccl_tests,
)
from costmodel.calibrate import calibrate, group_for
from costmodel.calibration_levels import LevelSource, level_origins
from costmodel.calibration_report import calibration_summary

DATA = resources.files("costmodel") / "data" / "nccl_tests"
P4DE = read_nccl_tests(str(DATA / "aws-p4de-2node-16xA100-80GB-efa400-allreduce.txt"),
                       nodes=2, gpus_per_node=8)
SIZES = tuple(2**k for k in range(3, 34))

# the dgx-a100 NVLink level as costmodel/presets.py writes it (A100_NVLINK_CURVE,
# A100_NVLINK_ALPHA_S, 300 GB/s from the A100 datasheet), typed here, not read from a fit
DGX_A100_NVLINK = {"alpha_s": 8.90e-7, "launch_s": 6.80e-6, "pipeline_s": 1.74e-5,
                   "bus_efficiency": 0.775, "beta_s_per_byte": 1 / 300e9}


def _errors(calibration, table) -> np.ndarray:
    return np.array([abs(row.ratio - 1) for row in calibration.table_rows(table.name)])


def test_p4de_alone_keeps_the_nvlink_level_of_the_base_and_meets_the_targets() -> None:
    result = calibrate(get_preset("dgx-a100"), P4DE)
    node, cluster = result.topology.levels
    for field, value in DGX_A100_NVLINK.items():
        assert getattr(node.link, field) == pytest.approx(value, rel=1e-12), field
    assert node.link == get_preset("dgx-a100").levels[0].link
    assert [o.source for o in result.origins] == [LevelSource.KEPT, LevelSource.FITTED]
    assert {p.level for p in result.fitted} == {"cluster"}
    errors = _errors(result, P4DE[0])
    assert len(errors) == len(P4DE[0].nbytes)
    assert np.median(errors) <= 0.10 and errors.max() <= 0.35
    # the network, not NVLink, carries the two-node curve's bandwidth: EFA's 400 Gb/s per
    # node is 6.25 GB/s per GPU, and the fitted bus rate may not exceed it
    assert cluster.link.bw_bytes_per_s * cluster.link.bus_efficiency <= 6.25e9


def test_the_summary_says_which_level_was_kept_and_how_to_fit_it() -> None:
    summary = calibration_summary(calibrate(get_preset("dgx-a100"), P4DE), fitted=True)
    assert "(kept from base)" in summary and "(fitted)" in summary
    assert "node (nvlink): kept from dgx-a100, not fitted" in summary
    assert "add a table run inside one node" in summary
    assert "cluster (ib): fitted on aws-p4de" in summary and "given 'node' as kept" in summary


def _truth() -> Topology:
    device = get_preset("dgx-a100").device
    nv = Link(1.2e-6, 1 / 300e9, "nvlink", launch_s=5e-6, pipeline_s=8e-6, bus_efficiency=0.75)
    # 6.25 GB/s per GPU: the network bounds the two-node all-reduce's bandwidth, so the
    # two-node table determines its efficiency; its launch above NVLink's, so its floor shows
    net = Link(3e-6, 1 / 6.25e9, "efa", launch_s=20e-6, pipeline_s=60e-6, bus_efficiency=0.9)
    return Topology(name="truth", device=device, levels=(
        TopologyLevel(name="node", devices=8, link=nv),
        TopologyLevel(name="cluster", devices=None, link=net)))


def _table(truth: Topology, nodes: int) -> NcclTable:
    table = NcclTable(name=f"{nodes}node.txt", source="synthetic", line=1,
                      collective=CollectiveKind.ALL_REDUCE, ranks=8 * nodes, nodes=nodes,
                      nbytes=SIZES, time_us=SIZES, column="synthetic")
    seconds = collective_seconds("all_reduce", np.array(SIZES, dtype=float),
                                 group_for(table, truth))
    return dataclasses.replace(table, time_us=tuple(seconds * 1e6))


def _strip(link: Link) -> Link:
    """The link rate and hop latency only: what a datasheet gives (a single table cannot
    separate the launch floor from the hops, so the base supplies the hop latency)."""
    return Link(link.alpha_s, link.beta_s_per_byte, link.name)


def test_single_node_and_two_node_tables_recover_both_levels() -> None:
    truth = _truth()
    tables = [_table(truth, 1), _table(truth, 2)]
    base = dataclasses.replace(truth, levels=tuple(
        dataclasses.replace(level, link=_strip(level.link)) for level in truth.levels))
    result = calibrate(base, tables)
    assert [o.source for o in result.origins] == [LevelSource.FITTED, LevelSource.FITTED]
    for table in tables:
        assert np.max(_errors(result, table)) < 0.01
    for fitted, known in zip(result.topology.levels, truth.levels, strict=True):
        for field in ("launch_s", "pipeline_s", "bus_efficiency"):
            assert getattr(fitted.link, field) == pytest.approx(getattr(known.link, field),
                                                                rel=0.05), (fitted.name, field)


def test_two_node_table_alone_recovers_the_network_given_the_node_level() -> None:
    """The base knows the node level (as a single-node run would give it) and only the
    network's rate and hop latency: the network's overheads come back, the node's stay."""
    truth = _truth()
    node, cluster = truth.levels
    base = dataclasses.replace(truth, levels=(
        node, dataclasses.replace(cluster, link=_strip(cluster.link))))
    result = calibrate(base, [_table(truth, 2)])
    assert result.topology.levels[0].link == node.link
    for field in ("launch_s", "pipeline_s", "bus_efficiency"):
        assert getattr(result.topology.levels[1].link, field) == pytest.approx(
            getattr(cluster.link, field), rel=0.05), field


def test_level_origins_name_the_tables_behind_each_level() -> None:
    truth = _truth()
    one, two = _table(truth, 1), _table(truth, 2)
    kept, fitted = level_origins([two], 2)
    assert (kept.source, kept.tables) == (LevelSource.KEPT, ("2node.txt",))
    assert (fitted.source, fitted.tables) == (LevelSource.FITTED, ("2node.txt",))
    node, cluster = level_origins([one], 2)
    assert (node.source, cluster.source) == (LevelSource.FITTED, LevelSource.UNSPANNED)
    node, cluster = level_origins([two, one], 2)
    assert node.tables == ("1node.txt",) and cluster.tables == ("2node.txt",)
