"""``autoshard.plan(graph, mesh)`` from Python: a mesh may be given as its text; a graph or
mesh of the wrong type is a TypeError naming the argument, the type given and what to pass
(not an AttributeError from deep inside the planner)."""

from __future__ import annotations

import pytest

import autoshard
from autoshard.errors import MeshError
from graphs import zoo


@pytest.fixture(scope="module")
def graph():
    return zoo.build("mlp", layers=2, batch=8, seq=16, hidden=64, ffn=256)


def test_a_mesh_string_is_parsed(graph) -> None:
    by_text = autoshard.plan(graph, "dp=2,tp=2")
    by_mesh = autoshard.plan(graph, autoshard.Mesh.parse("dp=2,tp=2"))
    assert by_text.mesh == (("dp", 2), ("tp", 2))
    assert by_text.to_dict()["tensors"] == by_mesh.to_dict()["tensors"]


def test_a_bad_mesh_string_names_the_part(graph) -> None:
    with pytest.raises(MeshError, match='"dp=x"'):
        autoshard.plan(graph, "dp=x")


@pytest.mark.parametrize("mesh", [{"dp": 2}, 8, None])
def test_a_mesh_of_another_type_is_a_type_error(graph, mesh) -> None:
    with pytest.raises(TypeError, match=rf"plan\(\): mesh must be a Mesh or its text like "
                                        rf'"dp=2,tp=4", not {type(mesh).__name__}'):
        autoshard.plan(graph, mesh)


def test_a_model_name_is_a_type_error_saying_how_to_build_it() -> None:
    with pytest.raises(TypeError, match=r"plan\(\): graph must be an OpGraph .* not str "
                                        r"'gpt2'; build it, e.g. graphs.zoo.build\(\"gpt2\""):
        autoshard.plan("gpt2", "dp=2,tp=4")


def test_a_graph_file_name_is_a_type_error_saying_how_to_load_it() -> None:
    with pytest.raises(TypeError, match=r'graphs.load\("g.json"\)'):
        autoshard.plan("g.json", autoshard.Mesh.parse("dp=2"))
