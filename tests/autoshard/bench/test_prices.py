"""``autoshard bench prices``: the quick run plans both pricings in fresh processes and says
how they compare; the alpha-beta override really removes the curve terms."""

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


def test_quick_run_writes_both_pricings(tmp_path) -> None:
    (path,) = prices.run(tmp_path, quick=True)
    frame = pd.read_csv(path, comment="#")
    assert list(frame["pricing"]) == list(prices.PRICINGS)
    assert (frame["status"] == "optimal").all()
    assert frame["wall_s"].gt(0).all()
    curves, alpha_beta = frame["wall_s"]
    assert frame["ratio_to_alpha_beta"].iloc[0] == curves / alpha_beta
    # different prices, so (in general) different step times: the override took effect
    assert frame["objective_s"].iloc[0] != frame["objective_s"].iloc[1]
    assert BENCHMARKS["prices"] == "autoshard.bench.prices"
