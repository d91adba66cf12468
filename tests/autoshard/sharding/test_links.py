"""Mesh axes onto topology links: level splitting, overrides, the node-span check, pricing.

Expected groups are derived by hand from the row-major device numbering (innermost axis
fastest) and the preset's node size; the P→R price is the ring all-reduce formula
2(n−1)α + 2(n−1)/n·m·β written out here (Thakur, Rabenseifner & Gropp 2005).
"""

from __future__ import annotations

import pytest

from autoshard.sharding.links import MeshLinks, MeshLinksError
from autoshard.sharding.mesh import Mesh
from costmodel import Link, Topology, TopologyLevel, get_preset

TOPOLOGY = get_preset("dgx-h100")
NODE = TOPOLOGY.levels[0]
INTER = TOPOLOGY.levels[1]


def mesh(*axes: tuple[str, int]) -> Mesh:
    return Mesh(axes=tuple(axes))


def test_preset_has_a_bounded_node_level() -> None:
    assert NODE.devices == 8


@pytest.mark.parametrize(("axes", "query", "expected"), [
    ((("tp", 8),), ("tp",), ((8, "node"),)),
    ((("dp", 16),), ("dp",), ((8, "node"), (2, "inter"))),
    ((("dp", 4), ("tp", 4)), ("tp",), ((4, "node"),)),
    ((("dp", 4), ("tp", 4)), ("dp",), ((2, "node"), (2, "inter"))),
    ((("dp", 4), ("tp", 4)), ("dp", "tp"), ((8, "node"), (2, "inter"))),
    ((("dp", 2), ("tp", 8)), ("dp",), ((2, "inter"),)),
    ((("dp", 2), ("tp", 8)), ("tp", "dp"), ((8, "node"), (2, "inter"))),
    ((("pp", 2), ("dp", 2), ("tp", 2)), ("pp", "tp"), ((4, "node"),)),
], ids=["tp8", "dp16-straddles", "dp4tp4-tp", "dp4tp4-dp", "dp4tp4-both", "dp2tp8-dp",
        "dp2tp8-both", "pp-and-tp"])
def test_axes_fill_a_node_innermost_first(axes, query, expected) -> None:
    links = MeshLinks.build(mesh(*axes), TOPOLOGY)
    by_name = {"node": NODE.link, "inter": INTER.link}
    assert links.group(query) == tuple((size, by_name[name]) for size, name in expected)


def test_named_override_moves_an_axis_to_that_link() -> None:
    links = MeshLinks.build(mesh(("dp", 2), ("tp", 4)), TOPOLOGY, {"tp": INTER.link.name})
    assert links.group(("tp",)) == ((4, INTER.link),)
    assert links.group(("dp",)) == ((2, NODE.link),)


def test_link_object_override() -> None:
    slow = Link(alpha_s=1e-5, beta_s_per_byte=1e-9, name="slow")
    links = MeshLinks.build(mesh(("dp", 2), ("tp", 4)), TOPOLOGY, {"dp": slow})
    assert links.group(("dp",)) == ((2, slow),)
    assert [row["link"] for row in links.describe()] == ["slow", NODE.link.name]


def test_node_link_on_an_axis_spanning_two_nodes_is_an_error() -> None:
    with pytest.raises(MeshLinksError) as info:
        MeshLinks.build(mesh(("dp", 2), ("tp", 8)), TOPOLOGY, {"dp": NODE.link.name})
    err = info.value
    assert (err.axis, err.span, err.node_size) == ("dp", 16, 8)
    assert '"dp"' in str(err) and "16" in str(err) and "8" in str(err)


def test_node_link_that_fits_is_accepted() -> None:
    links = MeshLinks.build(mesh(("dp", 2), ("tp", 4)), TOPOLOGY, {"dp": NODE.link.name})
    assert links.group(("dp",)) == ((2, NODE.link),)


def test_unknown_axis_lists_the_mesh_axes() -> None:
    with pytest.raises(MeshLinksError, match=r'"pp".*dp, tp'):
        MeshLinks.build(mesh(("dp", 2), ("tp", 4)), TOPOLOGY, {"pp": "nvlink"})


def test_describe_rows() -> None:
    rows = MeshLinks.build(mesh(("dp", 16), ("tp", 8)), TOPOLOGY).describe()
    assert [r["axis"] for r in rows] == ["dp", "tp"]
    assert rows[1] == {"axis": "tp", "size": 8, "link": NODE.link.name,
                       "alpha_s": NODE.link.alpha_s,
                       "bandwidth_bytes_per_s": 1.0 / NODE.link.beta_s_per_byte}
    assert rows[0]["link"] == INTER.link.name


@pytest.mark.parametrize(("axes", "query", "expected"), [
    ((("tp", 6),), ("tp",), ((6, "node"),)),
    ((("dp", 2), ("tp", 6)), ("tp",), ((2, "node"), (3, "inter"))),
], ids=["tp6-whole-mesh-in-a-node", "dp2tp6-groups-straddle-nodes"])
def test_non_power_of_two_axes(axes, query, expected) -> None:
    links = MeshLinks.build(mesh(*axes), TOPOLOGY)
    by_name = {"node": NODE.link, "inter": INTER.link}
    assert links.group(query) == tuple((size, by_name[name]) for size, name in expected)


def test_mesh_larger_than_a_bounded_topology_is_an_error() -> None:
    pod = Topology(name="one-pod", device=get_preset("tpu-v5e").device,
                   levels=(TopologyLevel(name="pod", devices=16,
                                         link=get_preset("tpu-v5e").levels[0].link),))
    MeshLinks.build(Mesh(axes=(("x", 4), ("y", 4))), pod)
    with pytest.raises(MeshLinksError, match="32 devices but topology 'one-pod' holds 16"):
        MeshLinks.build(Mesh(axes=(("x", 8), ("y", 4))), pod)
