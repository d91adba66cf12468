"""Random small graphs (hypothesis): whatever the planner chooses for them, on 1-D and 2-D
meshes and under memory limits that force sharding, runs on the emulated mesh and computes
the unsharded graph's values. Also the emulator's own invariants (deterministic, seed-driven
inputs, valid integer ids)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import autoshard
from autoshard.errors import MemoryTooSmallError
from autoshard.verify.emulator import emulate
from autoshard.verify.reference import id_bound, source_value
from graphs import DType, OpGraph, zoo

F64 = DType.F64


@st.composite
def graphs(draw) -> OpGraph:
    """A chain over x [b, s, h] of matmuls, activations, norms, softmax, residual adds,
    products and reshapes [b, s, h] <-> [b, s, n, h/n]; one output."""
    b, s = draw(st.sampled_from((2, 4, 8))), draw(st.sampled_from((4, 6, 8)))
    h = draw(st.sampled_from((8, 16)))
    g = OpGraph(name="random")
    x = g.input("x", (b, s, h), F64)
    seen = [x]
    for index in range(draw(st.integers(2, 6))):
        kind = draw(st.sampled_from(("linear", "gelu", "silu", "add", "mul", "layer_norm",
                                     "rms_norm", "softmax", "heads")))
        name = f"op{index}"
        if kind == "linear":
            w = g.param(f"w{index}", (h, h), F64)
            x = g.op("einsum", [x, w], name=name, equation="bsi,io->bso")
        elif kind in ("add", "mul"):
            x = g.op(kind, [x, draw(st.sampled_from(seen))], name=name)
        elif kind == "layer_norm":
            weight, bias = g.param(f"g{index}", (h,), F64), g.param(f"b{index}", (h,), F64)
            x = g.op("layer_norm", [x, weight, bias], name=name)
        elif kind == "rms_norm":
            x = g.op("rms_norm", [x, g.param(f"g{index}", (h,), F64)], name=name)
        elif kind == "softmax":
            x = g.op("softmax", [x], name=name)
        elif kind == "heads":
            split = g.op("reshape", [x], name=name, shape=[b, s, 2, h // 2])
            act = g.op("gelu", [split], name=f"{name}.act")
            x = g.op("reshape", [act], name=f"{name}.merge", shape=[b, s, h])
        else:
            x = g.op(kind, [x], name=name)
        seen.append(x)
    g.mark_output(x)
    return g


def tightest_plan(graph: OpGraph, mesh: autoshard.Mesh) -> autoshard.Plan:
    """The plan under the smallest memory limit any plan meets: it shards as much as it can,
    parameters included (tensor parallelism), so it reshards."""
    try:
        return autoshard.plan(graph, mesh, memory_limit=1.0)
    except MemoryTooSmallError as exc:
        return autoshard.plan(graph, mesh, memory_limit=exc.needed_bytes * (1 + 1e-9),
                              time_limit=3)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(graph=graphs(), mesh_text=st.sampled_from(("x=2", "x=4", "x=2,y=2")),
       tight=st.booleans(), seed=st.integers(0, 2**16))
def test_random_graph_plans_compute_the_unsharded_values(graph, mesh_text, tight, seed):
    mesh = autoshard.Mesh.parse(mesh_text)
    plan = tightest_plan(graph, mesh) if tight else autoshard.plan(graph, mesh)
    result = emulate(plan, graph, seed=seed)
    event(f"sharded ops: {sum(r.strategy != 'R' for r in plan.ops.values()) > 0}")
    event(f"reshards: {min(len(plan.reshards), 3)}")
    assert result.passed, result.summary()
    assert result.reshards_run == len(plan.reshards)


def test_emulation_is_deterministic_and_seeded():
    graph = zoo.build("mlp", layers=2, batch=4, seq=4, hidden=8, ffn=16, dtype="f32")
    plan = autoshard.plan(graph, autoshard.Mesh.parse("x=2"))
    first, again = emulate(plan, graph, seed=5), emulate(plan, graph, seed=5)
    assert first.outputs == again.outputs
    op = graph.op_by_name("x")
    assert np.array_equal(source_value(graph, op, 5), source_value(graph, op, 5))
    assert not np.array_equal(source_value(graph, op, 5), source_value(graph, op, 6))


def test_integer_inputs_are_valid_ids_for_every_reader():
    graph = zoo.build("gpt2", layers=1, batch=2, seq=4, hidden=8, heads=2, vocab=10,
                      dtype="f32")
    assert id_bound(graph, "tokens") == 10 and id_bound(graph, "targets") == 10
    assert id_bound(graph, "positions") == graph.tensors["embed.positions"].shape[0]
    tokens = source_value(graph, graph.op_by_name("tokens"), 0)
    assert tokens.dtype == np.int64 and tokens.min() >= 0 and tokens.max() < 10


def test_uneven_shards_run_as_the_placements_define_them() -> None:
    """batch 6 and seq 5 on 4 devices: torch.chunk sizes, some devices short of rows."""
    graph = zoo.build("mlp", layers=2, batch=6, seq=5, hidden=12, ffn=18, dtype="f32")
    mesh = autoshard.Mesh.parse("tp=4")
    try:
        plan = autoshard.plan(graph, mesh, allow_uneven=True, memory_limit=1.0)
    except MemoryTooSmallError as exc:
        plan = autoshard.plan(graph, mesh, allow_uneven=True,
                              memory_limit=exc.needed_bytes * (1 + 1e-9))
    global_shapes = {name: graph.specs(graph.op_by_name(name))[1] for name in plan.ops}
    assert any(local != n and n % 4
               for name, rec in plan.ops.items()
               for shape, spec in zip(rec.local_outputs, global_shapes[name], strict=True)
               for local, n in zip(shape, spec.shape, strict=True))
    result = emulate(plan, graph, seed=7)
    assert result.passed, result.summary()
