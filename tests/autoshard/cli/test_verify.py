"""``autoshard verify``: verdict, errors and scaled dims on stdout, ``--write`` into the plan
file (and only then), exit 1 with one line naming the culprit on a wrong plan, exit 2 with one
line and no traceback on bad input. Also ``verify_and_attach`` (for ``plan --verify``) and the
``verification`` field's round trip through plan.json."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import autoshard
from autoshard.cli import main
from autoshard.planning.record import Plan
from autoshard.verify.verification import shrink, verify_and_attach

SHAPE = ["--layers", "1", "--batch", "4", "--seq", "8", "--hidden", "32", "--heads", "4",
         "--dtype", "f32"]


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    result = CliRunner().invoke(main, ["plan", "--model", "gpt2", "--mesh", "dp=2,tp=2",
                                       "--out", str(out), "-q", *SHAPE])
    assert result.exit_code == 0, result.output
    return out


def _verify(*args: str):
    return CliRunner().invoke(main, ["verify", *args])


def test_verify_prints_the_verdict_and_leaves_the_file_alone(plan_dir) -> None:
    path = plan_dir / "plan.json"
    before = path.read_bytes()
    result = _verify(str(path), "--model", "gpt2", *SHAPE)
    assert result.exit_code == 0, result.output
    assert "PASSED" in result.output
    assert "vocab 50257->3" in result.output  # 50257 is odd: no mesh axis divides it
    assert path.read_bytes() == before


def test_write_stores_the_verification_in_the_plan(tmp_path, plan_dir) -> None:
    path = tmp_path / "plan.json"
    path.write_bytes((plan_dir / "plan.json").read_bytes())
    result = _verify(str(path), "--model", "gpt2", "--seed", "3", "--write", *SHAPE)
    assert result.exit_code == 0, result.output
    record = Plan.load(path).verification
    assert record["passed"] is True and record["seed"] == 3
    assert record["scaled_dims"]["vocab"] == [50257, 3]
    # the record is this verification's: the same plan, graph and seed through the Python API
    # give the same errors, and a pass means they are float64 round-off, not a wrong layout
    graph = autoshard.zoo.build("gpt2", layers=1, batch=4, seq=8, hidden=32, heads=4,
                                dtype="f32")
    again = autoshard.verify(Plan.load(path), graph, seed=3)
    assert (record["max_abs_err"], record["max_rel_err"]) == (again.max_abs_err,
                                                               again.max_rel_err)
    assert record["max_rel_err"] < 1e-9
    original = json.loads((plan_dir / "plan.json").read_text())
    assert {k: v for k, v in json.loads(path.read_text()).items()
            if k != "verification"} == original


def test_a_wrong_plan_exits_1_naming_the_op(tmp_path, plan_dir) -> None:
    data = json.loads((plan_dir / "plan.json").read_text())
    op = data["ops"]["layers.0.mlp.gelu"]
    op["strategy"] = "R" if op["strategy"] != "R" else "tp:d0"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    result = _verify(str(path), "--model", "gpt2", *SHAPE)
    assert result.exit_code == 1
    assert "FAILED" in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "layers.0.mlp.gelu" in lines[0]


def _edited(tmp_path, plan_dir, edit) -> str:
    data = json.loads((plan_dir / "plan.json").read_text())
    edit(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_tensor_laid_out_otherwise_than_its_op_writes_it_fails(tmp_path, plan_dir) -> None:
    """plan.json's tensor records are what export emits: one that its op's strategy does not
    write fails before any emulation, naming the tensor, both layouts and the op (the
    unedited plan passes: test_verify_prints_the_verdict_and_leaves_the_file_alone)."""
    name = "layers.0.mlp.gelu.out"
    original = json.loads((plan_dir / "plan.json").read_text())["tensors"][name]
    assert original["placements"] != ["S(0)", "R"]

    def relayout(data):
        data["tensors"][name].update(placements=["S(0)", "R"],
                                     partition_spec=[["dp"], None, None], sdy=None)

    result = _verify(_edited(tmp_path, plan_dir, relayout), "--model", "gpt2", *SHAPE)
    assert result.exit_code == 1 and "FAILED" in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output
    assert (f'tensor "{name}" is laid out S(0) R, but op "layers.0.mlp.gelu" (strategy '
            f'"R") writes it as {" ".join(original["placements"])}') in lines[0]
    assert "re-plan" in lines[0]


def test_an_unknown_strategy_fails_naming_the_op_without_a_full_size_run(
        tmp_path, plan_dir) -> None:
    """A label no strategy of the op has used to send verify to the model's full sizes (no
    scaled copy runs it) and end in a misleading "dims differ" error, or hours of emulation
    on a large model; it is one line naming the op and some of its strategies."""
    def bogus(data):
        data["ops"]["layers.0.mlp.gelu"]["strategy"] = "dp:nonsense"

    result = _verify(_edited(tmp_path, plan_dir, bogus), "--model", "gpt2", *SHAPE)
    assert result.exit_code == 1 and "scaled dims" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert ('op "layers.0.mlp.gelu" (gelu) has strategy "dp:nonsense", which is not a strategy '
            "of that op on mesh dp=2,tp=2") in lines[0]


@pytest.mark.parametrize(("args", "culprit"), [
    (["--model", "gpt2", "--layers", "2"], "does not fit"),
    (["--model", "gpt2", *SHAPE[:2], "--batch", "8", *SHAPE[4:]], "fingerprint"),
    (["--model", "nosuchmodel"], "nosuchmodel"),
], ids=["other-ops", "other-dims", "unknown-model"])
def test_bad_input_is_one_line_and_exit_2(plan_dir, args, culprit) -> None:
    result = _verify(str(plan_dir / "plan.json"), *args)
    assert result.exit_code == 2
    assert "Traceback" not in result.output + result.stderr
    assert culprit in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_missing_plan_file_is_one_line(tmp_path) -> None:
    result = _verify(str(tmp_path / "none.json"), "--model", "gpt2")
    assert result.exit_code == 2 and "no such file" in result.stderr


def test_verify_and_attach_round_trips_through_plan_json(tmp_path) -> None:
    graph = autoshard.zoo.build("llama3-8b", layers=1, batch=4, seq=8, hidden=64, heads=4,
                                kv_heads=2, ffn=128, vocab=96, dtype="f32")
    plan = verify_and_attach(autoshard.plan(graph, autoshard.Mesh.parse("tp=2")), graph)
    assert plan.verification["passed"] is True
    plan.save(tmp_path)
    assert Plan.load(tmp_path / "plan.json").verification == plan.verification
    assert Plan.load(tmp_path / "plan.json") == plan


@pytest.mark.parametrize(("size", "devices"), [(4096, 8), (50257, 8), (6, 8), (12, 4),
                                               (7, 2), (16, 16), (24, 8), (1, 4)])
def test_shrink_keeps_which_mesh_axis_products_divide(size: int, devices: int) -> None:
    """Checked against every divisor of the device count, by brute force."""
    for keep_local in (False, True):
        small = shrink(size, devices, keep_local=keep_local)
        assert 1 <= small <= size
        for shards in range(2, devices + 1):
            if devices % shards == 0:
                assert (size % shards == 0) == (small % shards == 0), (size, small, shards)
                if keep_local and size % shards == 0 and size > shards:
                    assert small > shards


def test_scaling_falls_back_when_a_chosen_strategy_needs_larger_dims() -> None:
    """A plan that splits the head dim 4 ways in the q reshape (heads whole on tp=4, head dim
    on dp=4; forced by hand) cannot run with head dims of 2: the scaled copy keeps a head dim
    that 4 divides, and the chosen strategy exists on it. Only the scaling is checked here."""
    from autoshard.strategies.derive import enumerate_strategies
    from autoshard.verify.verification import scaled_graph

    graph = autoshard.zoo.build("llama3-8b", layers=1, batch=8, seq=16, hidden=256, heads=4,
                                kv_heads=4, ffn=512, vocab=128, dtype="f32")
    mesh = autoshard.Mesh.parse("dp=4,tp=4")
    op = graph.op_by_name("layers.0.attn.q_heads")
    ins, outs = graph.specs(op)
    split = [s.label for s in enumerate_strategies(op.kind, ins, outs, graph.attrs(op), mesh)
             if str(s.outputs[0].placements[0]) == "S(3)"]
    assert split
    ops = {o.name: {"kind": o.kind, "strategy": split[0] if o.name == op.name else "R",
                    "compute_s": 0.0, "comm_s": 0.0, "flops": 0.0, "memory_bytes": 0.0,
                    "local_inputs": [], "local_outputs": []} for o in graph.ops}
    document = {"format": "autoshard.plan/v1", "model": graph.name, "fingerprint": "",
                "mesh": {"axes": [{"name": "dp", "size": 4}, {"name": "tp", "size": 4}]},
                "topology": {"name": "dgx-h100", "links": []},
                "objective": {"total_s": 0, "compute_s": 0, "comm_s": 0, "lower_bound_s": 0,
                              "optimal": True, "gap": 0, "status": "optimal", "solve_s": 0},
                "memory": {"peak_bytes_per_device": 0, "limit_bytes": None},
                "tensors": {}, "ops": ops, "reshards": []}
    forced = Plan.from_dict(document)
    small, dims = scaled_graph(forced, graph)
    assert dims["head_dim"][1] % 4 == 0 and dims["head_dim"][1] < 64
    small_op = small.op_by_name(op.name)
    labels = {s.label for s in enumerate_strategies(small_op.kind, *small.specs(small_op),
                                                    small.attrs(small_op), mesh)}
    assert split[0] in labels
    replicated = Plan.from_dict({**document, "ops": {
        name: {**rec, "strategy": "R"} for name, rec in ops.items()}})
    assert scaled_graph(replicated, graph)[1]["head_dim"] == (64, 2)


def test_plan_verify_writes_the_verdict_and_prints_it(tmp_path) -> None:
    from click.testing import CliRunner

    from autoshard.cli import main
    from autoshard.planning.record import Plan

    result = CliRunner().invoke(main, ["plan", "--model", "gpt2", "--layers", "1", "--training",
                                       "--mesh", "dp=2,tp=2", "--verify", "--out",
                                       str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "verified   passed" in result.output
    record = Plan.load(tmp_path / "plan.json").verification
    assert record["passed"] and record["scaled_dims"]["hidden"][0] == 768


def test_plan_verify_failure_exits_1_and_names_the_culprit(tmp_path, monkeypatch) -> None:
    import dataclasses
    import importlib

    from click.testing import CliRunner

    from autoshard.cli import main

    def failing(plan, graph, *, seed=0):
        record = {"passed": False, "first_divergence": "op layers.0.mlp.up",
                  "message": "max rel err 0.5"}
        return dataclasses.replace(plan, verification=record)

    # where the plan command looks the function up
    monkeypatch.setattr(importlib.import_module("autoshard.cli.plan"), "verify_and_attach",
                        failing)
    result = CliRunner().invoke(main, ["plan", "--model", "mlp", "--mesh", "tp=2", "--verify",
                                       "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert "layers.0.mlp.up" in result.output
    assert (tmp_path / "plan.json").exists()        # the verdict is kept for inspection
