"""OpGraph building, views, validation errors, and the autoshard.graph/v1 JSON round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphs import (
    AttrError,
    DType,
    Op,
    OpGraph,
    SchemaError,
    ShapeError,
    StructureError,
    Tensor,
    TensorRole,
    UnknownOpError,
    load,
    zoo,
)
from graphs.io import loads


def mlp() -> OpGraph:
    g = OpGraph(name="mlp")
    x = g.input("x", (8, 4, 16), DType.BF16)
    w1 = g.param("w1", (16, 32), DType.BF16)
    h = g.op("einsum", [x, w1], equation="bsh,hf->bsf", name="l0.up", outputs=["l0.h"])
    a = g.op("gelu", [h])
    w2 = g.param("w2", (32, 16), "bf16")
    y = g.op("einsum", [a, w2], equation="bsf,fh->bsh")
    g.mark_output(g.op("add", [y, x], name="residual"))
    return g


def test_builder_shapes_roles_and_names() -> None:
    g = mlp()
    assert g.tensors["l0.h"].shape == (8, 4, 32)
    assert [t.role for t in g.tensors.values()] == [
        TensorRole.INPUT, TensorRole.PARAM, TensorRole.ACTIVATION, TensorRole.ACTIVATION,
        TensorRole.PARAM, TensorRole.ACTIVATION, TensorRole.OUTPUT]
    assert [op.name for op in g.ops] == ["x", "w1", "l0.up", "gelu_3", "w2", "einsum_5",
                                         "residual"]
    assert list(g.tensors)[3] == "gelu_3.out"
    assert g.outputs == ("residual.out",)
    assert g.producer("l0.h").name == "l0.up"
    assert [op.name for op in g.consumers("x")] == ["l0.up", "residual"]
    assert g.op_by_name("x").attrs["shape"] == (8, 4, 16)
    assert g.nx.edges["l0.up", "gelu_3"]["tensor"] == "l0.h"


def test_topological_order_is_stable() -> None:
    g = OpGraph()
    a = g.input("a", (2,), DType.F32)
    late = g.op("exp", [a], name="late")
    b = g.input("b", (2,), DType.F32)
    g.op("add", [late, b], name="sum")
    g.op("neg", [a], name="other")
    assert [op.name for op in g.topo_ops()] == ["a", "late", "b", "sum", "other"]
    # an op added before its producer is placed after it
    g2 = OpGraph()
    g2.add_tensor(Tensor(name="y", shape=(2,), dtype=DType.F32))
    g2.add_op(Op(name="consumer", kind="neg", inputs=("t",), outputs=("y",)))
    g2.input("t", (2,), DType.F32)
    g2.validate()
    assert [op.name for op in g2.topo_ops()] == ["t", "consumer"]


def test_several_outputs_and_specs() -> None:
    g = OpGraph()
    x = g.input("x", (4, 6), DType.F32)
    parts = g.op("split", [x], dim=1, sizes=[2, 4], name="sp")
    assert parts == ("sp.out0", "sp.out1")
    joined = g.op("concat", [parts[1], parts[0]], dim=1)
    assert g.nx.edges["sp", g.producer(joined).name]["tensors"] == ("sp.out1", "sp.out0")
    ins, outs = g.specs(g.op_by_name("sp"))
    assert ins[0].shape == (4, 6) and [o.shape for o in outs] == [(4, 2), (4, 4)]
    assert g.signature(g.op_by_name("x")).factors == ("d0", "d1")


def _expect(error: type[Exception], *needles: str):
    return pytest.raises(error, match=".*".join(needles))


def test_unknown_kind_suggests_close_matches() -> None:
    g = OpGraph()
    x = g.input("x", (2,), DType.F32)
    with _expect(UnknownOpError, '"softmx"', '"s1"', "softmax") as info:
        g.op("softmx", [x], name="s1")
    assert "softmax" in info.value.suggestions


@pytest.mark.parametrize(("attrs", "needles"), [
    ({}, ('"l1"', 'missing attr "equation"')),
    ({"equation": "ij,jk->ik", "alpha": 1}, ('"l1"', 'unknown attr "alpha"')),
    ({"equation": 3}, ('"l1"', 'attr "equation"', "wrong type")),
], ids=["missing", "unknown", "wrong-type"])
def test_bad_attrs_name_op_and_attr(attrs: dict, needles: tuple[str, ...]) -> None:
    g = OpGraph()
    x, w = g.input("x", (2, 3), DType.F32), g.param("w", (3, 4), DType.F32)
    with _expect(AttrError, *needles):
        g.op("einsum", [x, w], name="l1", **attrs)


def test_attr_types_accept_ints_for_floats_but_not_bools_for_ints() -> None:
    g = OpGraph()
    x = g.input("x", (2, 3), DType.F32)
    g.op("scale", [x], factor=2)
    with _expect(AttrError, '"dim"', "wrong type"):
        g.op("softmax", [x], dim=True)
    with _expect(AttrError, '"shape"', "list"):
        g.op("reshape", [x], shape=[3, 2.0])


def test_dangling_tensor() -> None:
    g = OpGraph()
    g.add_op(Op(name="n", kind="neg", inputs=("ghost",), outputs=()))
    with _expect(StructureError, '"ghost"', '"n"', "never produced"):
        g.validate()


def test_two_producers() -> None:
    g = OpGraph()
    x = g.input("x", (2,), DType.F32)
    g.op("exp", [x], name="e", outputs=["y"])
    with _expect(StructureError, '"y"', "two producers", '"e"', '"n"'):
        g.add_op(Op(name="n", kind="neg", inputs=(x,), outputs=("y",)))


def test_cycle() -> None:
    g = OpGraph()
    for name in ("a", "b"):
        g.add_tensor(Tensor(name=name, shape=(2,), dtype=DType.F32))
    g.add_op(Op(name="first", kind="exp", inputs=("b",), outputs=("a",)))
    g.add_op(Op(name="second", kind="neg", inputs=("a",), outputs=("b",)))
    with _expect(StructureError, "cycle", "first"):
        g.validate()


def test_shape_and_dtype_mismatch_against_inference() -> None:
    g = OpGraph()
    x = g.input("x", (2, 3), DType.F32)
    g.add_tensor(Tensor(name="y", shape=(3, 2), dtype=DType.F32))
    g.add_op(Op(name="t", kind="exp", inputs=(x,), outputs=("y",)))
    with _expect(ShapeError, '"t"', '"y"', r"\[2, 3\] f32", r"\[3, 2\] f32"):
        g.validate()
    g2 = OpGraph()
    x = g2.input("x", (2, 3), DType.F32)
    g2.add_tensor(Tensor(name="y", shape=(2, 3), dtype=DType.BF16))
    g2.add_op(Op(name="t", kind="exp", inputs=(x,), outputs=("y",)))
    with _expect(ShapeError, '"y"', "f32", "bf16"):
        g2.validate()


def test_op_validates_inputs_on_construction() -> None:
    g = OpGraph()
    x = g.input("x", (2, 3), DType.F32)
    with _expect(StructureError, '"nothere"', "not defined"):
        g.op("add", [x, "nothere"], name="a")
    with _expect(ShapeError, '"a"', "takes 2 inputs"):
        g.op("add", [x], name="a")
    with _expect(ShapeError, "broadcast"):
        g.op("add", [x, g.input("z", (4,), DType.F32)])
    with _expect(StructureError, '"e"', "already used"):
        g.op("exp", [x], name="e", outputs=["x"])
    assert "e" not in [op.name for op in g.ops]


@pytest.mark.parametrize("build", [mlp, lambda: zoo.build("transformer")], ids=["mlp", "zoo"])
def test_json_round_trip_is_exact(build, tmp_path: Path) -> None:
    g = build()
    document = g.to_dict()
    assert OpGraph.from_dict(document).to_dict() == document
    assert json.loads(json.dumps(document)) == document
    g.save(tmp_path / "a.json")
    loaded = load(tmp_path / "a.json")
    assert loaded == g
    loaded.save(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def _document() -> dict:
    return mlp().to_dict()


def _mutate_input(d: dict) -> None:
    d["ops"][3]["inputs"] = ["l0.h", "h7"]


def _mutate_dtype(d: dict) -> None:
    d["tensors"]["w1"]["dtype"] = "bf17"


def _mutate_role(d: dict) -> None:
    d["tensors"]["x"]["role"] = "weights"


def _mutate_missing(d: dict) -> None:
    del d["ops"][2]["kind"]


def _mutate_shape(d: dict) -> None:
    d["tensors"]["x"]["shape"] = [8, -1]


def _mutate_format(d: dict) -> None:
    d["format"] = "autoshard.graph/v0"


def _mutate_extra(d: dict) -> None:
    d["tensors"]["x"]["strides"] = [1]


def _mutate_producer(d: dict) -> None:
    d["ops"][3]["outputs"] = ["l0.h"]


def _mutate_output(d: dict) -> None:
    d["outputs"] = ["nope"]


@pytest.mark.parametrize(("mutate", "message"), [
    (_mutate_input, 'ops[3].inputs[1]: tensor "h7" is not defined'),
    (_mutate_dtype, 'tensors.w1.dtype: unknown dtype "bf17"'),
    (_mutate_role, 'tensors.x.role: unknown role "weights"'),
    (_mutate_missing, 'ops[2]: missing key "kind"'),
    (_mutate_shape, "tensors.x.shape: expected a list of non-negative ints"),
    (_mutate_format, 'format: unsupported format "autoshard.graph/v0"'),
    (_mutate_extra, "tensors.x.strides: unknown key"),
    (_mutate_output, 'outputs[0]: tensor "nope" is not defined'),
    (_mutate_producer, 'ops[3]: tensor "l0.h" has two producers: ops "l0.up" and "gelu_3"'),
], ids=["undefined-input", "dtype", "role", "missing-key", "shape", "format", "extra-key",
        "output", "two-producers"])
def test_schema_errors_name_the_json_path(mutate, message: str) -> None:
    document = _document()
    mutate(document)
    with pytest.raises(SchemaError) as info:
        OpGraph.from_dict(document)
    assert str(info.value).startswith(message)


def test_loaded_graph_is_validated() -> None:
    document = _document()
    document["tensors"]["l0.h"]["shape"] = [8, 4, 31]
    with _expect(ShapeError, '"l0.up"', '"l0.h"', r"\[8, 4, 32\]", r"\[8, 4, 31\]"):
        OpGraph.from_dict(document)
    document = _document()
    document["ops"][2]["kind"] = "einsun"
    with _expect(UnknownOpError, "einsun", "einsum"):
        OpGraph.from_dict(document)


def test_malformed_json_reports_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n "format": "autoshard.graph/v1",\n "name": oops\n}\n')
    with pytest.raises(SchemaError, match=r"bad.json: \$: malformed JSON at line 3 column 10"):
        load(path)
    with pytest.raises(SchemaError, match="cannot read"):
        load(tmp_path / "missing.json")
    with pytest.raises(SchemaError, match=r"\$: expected an object"):
        loads("[1, 2]")
