"""``autoshard bench prices``: the quick run plans every pricing in fresh processes and says
how they compare; both alpha-beta baselines really remove the curve terms, and the per-level one
keeps the preset's levels (NVLink inside a node, InfiniBand across) at the pre-curve rates."""

from __future__ import annotations

import pandas as pd

from autoshard.bench import prices
from autoshard.bench.runner import BENCHMARKS
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from costmodel import get_preset


def test_alpha_beta_override_is_a_textbook_link() -> None:
    """Sanity of the comparison: the preset's links carry curve terms, the override none."""
    mesh = Mesh.parse("dp=2,tp=4")
    topology = get_preset("dgx-h100")
    shipped = MeshLinks.build(mesh, topology)
    forced = MeshLinks.build(mesh, topology, dict.fromkeys(mesh.axis_names, prices.ALPHA_BETA))

    def links(mesh_links: MeshLinks) -> list:
        return [link for axis in mesh_links.axes for _, link in axis.levels]

    assert not all(link.is_alpha_beta for link in links(shipped))
    assert all(link.is_alpha_beta for link in links(forced))


def test_per_level_baseline_keeps_the_levels_at_the_pre_curve_rates() -> None:
    """dp=8,tp=8: tp inside a node on NVLink, dp across nodes on InfiniBand, as before the
    curve model (f0eaec6: NVLink 1.9 us and 450 GB/s, NDR IB 4.0 us and 50 GB/s per GPU)."""
    mesh = Mesh.parse("dp=8,tp=8")
    shipped = MeshLinks.build(mesh, get_preset("dgx-h100"))
    before = MeshLinks.build(mesh, prices.topology_for("alpha-beta-per-level"))
    for axis, name, alpha_s, bw in (("tp", "nvlink", 1.9e-6, 450e9), ("dp", "ib", 4.0e-6, 50e9)):
        ((size, link),) = before.axis(axis).levels
        ((_, curve_link),) = shipped.axis(axis).levels
        assert (size, link.name, curve_link.name) == (8, name, name)
        assert link.is_alpha_beta and not curve_link.is_alpha_beta
        assert (link.alpha_s, link.bw_bytes_per_s) == (alpha_s, bw)
    assert prices.topology_for("curves") is get_preset("dgx-h100")


def test_quick_run_writes_both_pricings(tmp_path) -> None:
    (path,) = prices.run(tmp_path, quick=True)
    frame = pd.read_csv(path, comment="#")
    assert list(frame["pricing"]) == list(prices.PRICINGS)
    assert (frame["status"] == "optimal").all()
    assert frame["wall_s"].gt(0).all()
    curves, per_level, all_nvlink = frame["wall_s"]
    assert frame["curves_over_per_level"].iloc[0] == curves / per_level
    assert frame["curves_over_all_nvlink"].iloc[0] == curves / all_nvlink
    cpu_curves, cpu_per_level, _ = frame["median_cpu_s"]
    assert frame["cpu_s"].gt(0).all()
    assert frame["cpu_curves_over_per_level"].iloc[0] == cpu_curves / cpu_per_level
    # different prices, so (in general) different step times: each baseline took effect
    assert frame["objective_s"].nunique() == len(prices.PRICINGS)
    assert BENCHMARKS["prices"] == "autoshard.bench.prices"
