"""The ``opaque`` kind: an unmapped imported op runs unsharded, is priced, and is never
executed or differentiated by accident."""

from __future__ import annotations

import pytest

import autoshard
from autoshard.planning.node_costs import op_strategies
from graphs import GraphError
from graphs.io import graph_from_dict


def _graph(out_shapes=((8, 4),), out_dtypes=("f32",)) -> dict:
    outs = [f"y{i}" for i in range(len(out_shapes))]
    return {
        "format": "autoshard.graph/v1", "name": "opaque-test", "outputs": outs,
        "tensors": {"x": {"shape": [8, 16], "dtype": "bf16", "role": "input"},
                    **{o: {"shape": list(s), "dtype": d, "role": "output"}
                       for o, s, d in zip(outs, out_shapes, out_dtypes, strict=True)}},
        "ops": [{"name": "x", "kind": "input", "inputs": [], "outputs": ["x"],
                 "attrs": {"shape": [8, 16], "dtype": "bf16"}},
                {"name": "weird", "kind": "opaque", "inputs": ["x"], "outputs": outs,
                 "attrs": {"target": "aten.cumsum.default",
                           "out_shapes": [list(s) for s in out_shapes],
                           "out_dtypes": list(out_dtypes), "flops": 128.0}}],
    }


def test_only_strategy_is_all_replicate_on_every_mesh():
    graph = graph_from_dict(_graph(out_shapes=((8, 4), (16,)), out_dtypes=("f32", "bf16")))
    op = next(op for op in graph.topo_ops() if op.kind == "opaque")
    for mesh in ("x=8", "dp=2,tp=4", "a=2,b=2,c=2"):
        strategies = op_strategies(graph, op, autoshard.Mesh.parse(mesh), False)
        assert len(strategies) == 1
        (only,) = strategies
        for sharding in (*only.inputs, *only.outputs):
            assert all(str(p) == "R" for p in sharding.placements)


def test_plan_gathers_the_input_and_prices_the_flops():
    graph = graph_from_dict(_graph())
    plan = autoshard.plan(graph, autoshard.Mesh.parse("dp=2,tp=4"))
    assert plan.tensors["x"].placements == ("R", "R")
    assert plan.ops["weird"].compute_s > 0.0


def test_bad_out_shapes_name_the_op():
    document = _graph()
    document["ops"][1]["attrs"]["out_shapes"] = [[8, "four"]]
    with pytest.raises(GraphError, match=r"aten\.cumsum\.default"):
        graph_from_dict(document)


def test_opaque_has_no_reference():
    from graphs import NotExecutableError
    from graphs.ops.registry import get_op

    with pytest.raises(NotExecutableError, match=r"aten\.cumsum\.default"):
        get_op("opaque").reference([], {"target": "aten.cumsum.default"})


def test_verify_refuses_an_opaque_graph_in_one_line(tmp_path):
    import json

    from click.testing import CliRunner

    from autoshard.cli import main

    graph_file = tmp_path / "g.json"
    graph_file.write_text(json.dumps(_graph()))
    runner = CliRunner()
    planned = runner.invoke(main, ["plan", "--model", str(graph_file), "--mesh", "dp=2,tp=4",
                                   "--out", str(tmp_path / "p")])
    assert planned.exit_code == 0, planned.output
    result = runner.invoke(main, ["verify", str(tmp_path / "p" / "plan.json"), "--model",
                                  str(graph_file)])
    assert result.exit_code != 0
    assert "aten.cumsum.default" in result.output and "opaque" in result.output
    assert "Traceback" not in result.output and result.output.strip().count("\n") == 0
