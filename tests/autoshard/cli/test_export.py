"""``autoshard export``: formats, stable order, --out/--force, bad files, the fingerprint and
link checks, and priced-vs-emitted reshards.

Exact strings come from a hand-written plan on mesh ``dp=2, tp=2`` whose expected shardings
are worked out by hand in the comments; CLI behaviour runs on a real plan of the ``mlp`` zoo
model made by ``autoshard plan``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoshard.cli import main
from autoshard.export import hlo_shardings_equal, shardy_to_hlo_sharding
from autoshard.export.lowering import ReshardMismatchError, lower_plan_reshards
from autoshard.export.plan_export import export_plan
from autoshard.export.plan_view import PlanMismatchError, plan_links, plan_shardings
from autoshard.planning.record import Plan
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from costmodel import get_preset

MLP = ["--model", "mlp", "--layers", "2", "--hidden", "64", "--ffn", "256", "--batch", "16",
       "--seq", "8"]
MESH = Mesh(axes=(("dp", 2), ("tp", 2)))


def _hand_plan() -> Plan:
    links = MeshLinks.build(MESH, get_preset("dgx-h100")).describe()
    zero = {"total_s": 0.0, "compute_s": 0.0, "comm_s": 0.0, "lower_bound_s": 0.0,
            "optimal": True, "gap": 0.0, "status": "optimal", "solve_s": 0.0}

    def tensor(shape: list[int], placements: list[str], spec: list | None) -> dict:
        return {"shape": shape, "dtype": "f32", "role": "param", "placements": placements,
                "partition_spec": spec, "sdy": None}

    def collective(kind: str, axes: list[str]) -> dict:
        return {"kind": kind, "axes": axes, "group_size": 2, "bytes": 32.0, "seconds": 1e-6}

    return Plan.from_dict({
        "format": "autoshard.plan/v1", "model": "m", "fingerprint": "f",
        "mesh": {"axes": [{"name": "dp", "size": 2}, {"name": "tp", "size": 2}]},
        "topology": {"name": "dgx-h100", "links": [dict(r) for r in links]},
        "objective": zero, "memory": {"peak_bytes_per_device": 0.0, "limit_bytes": None},
        "tensors": {
            "w": tensor([8, 4], ["S(1)", "S(0)"], ["tp", "dp"]),
            "h": tensor([8, 4], ["S(0)", "S(0)"], [["tp", "dp"], None]),
            "p": tensor([8], ["P(sum)", "S(0)"], ["tp"]),
            "r": tensor([8], ["R", "R"], [None]),
        },
        "ops": {},
        "reshards": [{"tensor": "p", "producer": "a", "consumer": "b", "src": ["P(sum)", "S(0)"],
                      "dst": ["R", "S(0)"], "collectives": [collective("all_reduce", ["dp"])]}],
    })


def _export(plan: Plan, fmt: str) -> str:
    view = plan_shardings(plan)
    topology, links = plan_links(plan, view.mesh)
    reshards = lower_plan_reshards(plan, view, links, topology.device.hbm_bw_bytes_per_s)
    return export_plan(plan, view, reshards, fmt)


HEADER = "mesh dp=2,tp=2, topology dgx-h100, fingerprint f"
RESHARD_LINES = [
    "# 1 explicit reshards, collectives in order (Shardy syntax):",
    '# p: a -> b: [{"tp"}], unreduced={"dp"} -> [{"tp"}]',
    '#   sdy.all_reduce {"dp"} -> [{"tp"}]',
]
# Device d sits at (dp, tp) = divmod(d, 2). w: dim 0 by tp, dim 1 by dp, so tile (i, j) is
# device 2j + i: [[0, 2], [1, 3]] = iota [2,2] transposed. h: dim 0 by tp then dp, tile k is
# device 2(k % 2) + k // 2: 0, 2, 1, 3. p: dim 0 by tp, a pending sum over dp.
EXPECTED = {
    "hlo": [
        "w = {devices=[2,2]<=[2,2]T(1,0)}",
        "h = {devices=[4,1]<=[2,2]T(1,0)}",
        "p = {devices=[2,2]<=[2,2]T(1,0) last_tile_dims={unreduced}}",
        "r = {replicated}",
    ],
    "hlo-v1": [
        "w = {devices=[2,2]0,2,1,3}",
        "h = {devices=[4,1]0,2,1,3}",
        "p = {devices=[2,2]0,2,1,3 last_tile_dims={unreduced}}",
        "r = {replicated}",
    ],
    "shardy": [
        'sdy.mesh @mesh = <["dp"=2, "tp"=2]>',
        'w = #sdy.sharding<@mesh, [{"tp"}, {"dp"}]>',
        'h = #sdy.sharding<@mesh, [{"tp", "dp"}, {}]>',
        'p = #sdy.sharding<@mesh, [{"tp"}], unreduced={"dp"}>',
        'r = #sdy.sharding<@mesh, [{}]>',
    ],
}


@pytest.mark.parametrize("fmt", sorted(EXPECTED))
def test_text_formats_by_hand(fmt: str) -> None:
    lines = _export(_hand_plan(), fmt).splitlines()
    assert lines[0] == f"# autoshard export --format {fmt}: model m, {HEADER}"
    assert lines[1:] == [*EXPECTED[fmt], *RESHARD_LINES]


def test_json_format_by_hand() -> None:
    data = json.loads(_export(_hand_plan(), "json"))
    assert data["format"] == "autoshard.export/v1"
    assert list(data["tensors"]) == ["w", "h", "p", "r"]
    h = data["tensors"]["h"]
    assert h["partition_spec"] == [["tp", "dp"], None]
    assert h["dtensor"] == "(_StridedShard(0, split_factor=2), Shard(0))"
    assert h["hlo"] == "{devices=[4,1]<=[2,2]T(1,0)}"
    assert h["hlo_v1"] == "{devices=[4,1]0,2,1,3}"
    assert data["tensors"]["p"]["unreduced"] == ["dp"]
    assert data["tensors"]["p"]["partition_spec"] == ["tp"]
    assert data["refused"] == {}
    assert data["mesh"]["shardy"] == 'sdy.mesh @mesh = <["dp"=2, "tp"=2]>'
    assert data["reshards"] == [{
        "tensor": "p", "producer": "a", "consumer": "b", "src": '[{"tp"}], unreduced={"dp"}',
        "dst": '[{"tp"}]', "collectives": [
            {"kind": "all_reduce", "axes": ["dp"], "shardy": 'sdy.all_reduce {"dp"} -> [{"tp"}]'}
        ]}]


def test_priced_but_not_emitted_is_refused() -> None:
    data = _hand_plan().to_dict()
    data["reshards"][0]["collectives"][0]["kind"] = "all_gather"
    plan = Plan.from_dict(data)
    view = plan_shardings(plan)
    topology, links = plan_links(plan, view.mesh)
    with pytest.raises(ReshardMismatchError, match='tensor "p"') as info:
        lower_plan_reshards(plan, view, links, topology.device.hbm_bw_bytes_per_s)
    assert info.value.priced == (("all_gather", ("dp",)),)
    assert info.value.emitted == (("all_reduce", ("dp",)),)


def test_links_other_than_the_plans_are_refused() -> None:
    plan = _hand_plan()
    with pytest.raises(PlanMismatchError, match="--topology and --link"):
        plan_links(plan, MESH, None, {"dp": "alpha:1ms,bw:1GB/s"})


# ---- the CLI on a real plan -------------------------------------------------------------
@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plan")
    result = CliRunner().invoke(main, ["plan", *MLP, "--mesh", "dp=2,tp=2", "--memory", "100KiB",
                                       "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    return out / "plan.json"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["export", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("fmt", ["hlo", "hlo-v1", "shardy"])
def test_cli_lists_every_tensor_in_plan_order(plan_file: Path, fmt: str) -> None:
    code, out, _ = _run(str(plan_file), "--format", fmt)
    assert code == 0
    plan = json.loads(plan_file.read_text())
    names = [line.split(" = ")[0] for line in out.splitlines()
             if " = " in line and not line.startswith(("#", "sdy.mesh"))]
    assert names == list(plan["tensors"])
    emitted = [line.split()[1] for line in out.splitlines() if line.startswith("#   sdy.")]
    priced = [c["kind"].replace("replicated_to_partial", "replicated_to_unreduced")
              for r in plan["reshards"] for c in r["collectives"]]
    assert [e.removeprefix("sdy.") for e in emitted] == priced


def test_cli_json_formats_agree(plan_file: Path) -> None:
    code, out, _ = _run(str(plan_file))
    assert code == 0
    data = json.loads(out)
    plan = json.loads(plan_file.read_text())
    assert list(data["tensors"]) == list(plan["tensors"])
    assert len(data["reshards"]) == len(plan["reshards"])
    for name, entry in data["tensors"].items():
        # Shardy → HloSharding (XLA's exporter, re-done) meets the direct V2 export, and
        # V1 lists the same devices as V2.
        assert shardy_to_hlo_sharding(entry["shardy"], data["mesh"]["shardy"]) == entry["hlo"]
        assert hlo_shardings_equal(entry["hlo"], entry["hlo_v1"]), name
        partial = [i for i, p in enumerate(plan["tensors"][name]["placements"])
                   if p.startswith("P")]
        assert entry["unreduced"] == [data["mesh"]["axes"][i]["name"] for i in partial]
    for ours, theirs in zip(data["reshards"], plan["reshards"], strict=True):
        assert [(c["kind"], c["axes"]) for c in ours["collectives"]] == [
            (c["kind"], c["axes"]) for c in theirs["collectives"]]


def test_cli_out_and_force(plan_file: Path, tmp_path: Path) -> None:
    target = tmp_path / "shardings.txt"
    code, _, err = _run(str(plan_file), "--format", "hlo", "--out", str(target))
    assert code == 0 and "wrote" in err
    written = target.read_text()
    assert written == _run(str(plan_file), "--format", "hlo")[1]
    code, _, err = _run(str(plan_file), "--format", "shardy", "--out", str(target))
    assert code == 2 and f"{target} already exists" in err and "--force" in err
    assert target.read_text() == written
    code, _, _ = _run(str(plan_file), "--format", "shardy", "--out", str(target), "--force")
    assert code == 0 and target.read_text().splitlines()[1].startswith("sdy.mesh")


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such file"),
    ("{not json", "not JSON"),
    ('{"format": "other/v9"}', "expected \"autoshard.plan/v1\""),
    ('{"format": "autoshard.plan/v1"}', 'field "model" is missing'),
], ids=["missing", "not-json", "wrong-format", "missing-fields"])
def test_cli_bad_plan_file(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "plan.json"
    if content is not None:
        path.write_text(content)
    code, out, err = _run(str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("autoshard: error: plan file")
    assert message in err


def test_cli_bad_placement_in_plan(plan_file: Path, tmp_path: Path) -> None:
    data = json.loads(plan_file.read_text())
    first = next(iter(data["tensors"]))
    data["tensors"][first]["placements"][0] = "S(9)"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    code, _, err = _run(str(path))
    assert code == 2 and f'tensor "{first}"' in err and err.count("\n") == 1


def test_cli_fingerprint_matches_its_model(plan_file: Path) -> None:
    code, _, err = _run(str(plan_file), "--format", "hlo", *MLP)
    assert code == 0, err


def test_cli_fingerprint_mismatch_names_both(plan_file: Path) -> None:
    args = [a if a != "64" else "128" for a in MLP]  # --hidden 128: another graph
    code, out, err = _run(str(plan_file), *args)
    plan = json.loads(plan_file.read_text())
    assert code == 2 and out == ""
    assert plan["fingerprint"] in err
    assert err.count("sha256:") == 2 and err.count("\n") == 1


def test_cli_shape_options_need_model(plan_file: Path) -> None:
    code, _, err = _run(str(plan_file), "--hidden", "64")
    assert code == 2 and "--hidden" in err and "--model" in err
    code, _, err = _run(str(plan_file), "--top-k", "2")
    assert code == 2 and "--top-k describe" in err  # the option as typed, not --top_k


def test_cli_edited_reshard_is_refused(plan_file: Path, tmp_path: Path) -> None:
    data = json.loads(plan_file.read_text())
    assert data["reshards"], "the 100 KiB plan needs reshards for this test"
    data["reshards"][0]["collectives"] = data["reshards"][0]["collectives"][:-1]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    code, _, err = _run(str(path), "--format", "shardy")
    assert code == 2 and "priced" in err and data["reshards"][0]["tensor"] in err


def _edit_tensor(plan_file: Path, tmp_path: Path, name: str, placements: list[str],
                 spec: list | None) -> str:
    data = json.loads(plan_file.read_text())
    data["tensors"][name].update(placements=placements, partition_spec=spec, sdy=None)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_cli_tensor_layout_other_than_its_ops_is_refused(plan_file: Path,
                                                        tmp_path: Path) -> None:
    """With --model, a tensor record its op's strategy does not write is refused: the export
    would otherwise lay the tensor out otherwise than it was priced (the unedited plan passes:
    test_cli_fingerprint_matches_its_model)."""
    name = "layers.0.mlp.up.out"
    original = json.loads(plan_file.read_text())["tensors"][name]["placements"]
    assert original != ["S(0)", "R"]
    path = _edit_tensor(plan_file, tmp_path, name, ["S(0)", "R"], [["dp"], None, None])
    for fmt in ("json", "dtensor"):
        code, out, err = _run(path, "--format", fmt, *MLP)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert f'tensor "{name}" is laid out S(0) R, but op "layers.0.mlp.up"' in err
        assert f'writes it as {" ".join(original)}' in err


def test_cli_without_model_a_reshard_must_start_from_its_tensor(plan_file: Path,
                                                               tmp_path: Path) -> None:
    """No --model: what the file says about itself still holds (a reshard starts from the
    layout its tensor is recorded in)."""
    reshard = json.loads(plan_file.read_text())["reshards"][0]
    assert reshard["src"] != ["R", "R"]
    ndim = len(json.loads(plan_file.read_text())["tensors"][reshard["tensor"]]["shape"])
    path = _edit_tensor(plan_file, tmp_path, reshard["tensor"], ["R", "R"], [None] * ndim)
    code, out, err = _run(path, "--format", "hlo")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert (f'tensor "{reshard["tensor"]}" is laid out R R, but its reshard '
            f'{reshard["producer"]} -> {reshard["consumer"]} starts from '
            f'{" ".join(reshard["src"])}') in err


@pytest.mark.parametrize(("mesh", "memory"), [("x=8", 60e3), ("dp=4,tp=2", 60e3)],
                         ids=["1d", "2d"])
def test_every_priced_reshard_is_emitted(mesh: str, memory: float) -> None:
    """Planned reshards lower to exactly the collectives the plan priced, on more meshes."""
    import autoshard
    from graphs import zoo

    graph = zoo.build("mlp", layers=2, hidden=64, ffn=256, batch=16, seq=8)
    plan = Plan.from_dict(autoshard.plan(graph, Mesh.parse(mesh), memory_limit=memory).to_dict())
    assert plan.reshards
    view = plan_shardings(plan)
    topology, links = plan_links(plan, view.mesh)
    lowered = lower_plan_reshards(plan, view, links, topology.device.hbm_bw_bytes_per_s)
    for record, item in zip(plan.reshards, lowered, strict=True):
        assert [(c.kind, c.axes) for c in record.collectives] == [
            (c.kind, c.axes) for c in item.collectives]
        assert len(item.collectives) == len(record.collectives) > 0


def test_uneven_tensor_notes_and_refusals() -> None:
    """6 rows over dp and tp (4 shards): XLA tiles ceil(6/4) = 2 rows per device where DTensor
    nests chunks (3 | 3 → 2, 1 | 2, 1), so HloSharding gets a note; JAX refuses."""
    from autoshard.export import NotDivisibleExportError

    data = _hand_plan().to_dict()
    data["tensors"]["u"] = {"shape": [6], "dtype": "f32", "role": "param",
                            "placements": ["S(0)", "S(0)"], "partition_spec": [["dp", "tp"]],
                            "sdy": None}
    plan = Plan.from_dict(data)
    lines = _export(plan, "hlo").splitlines()
    at = lines.index("u = {devices=[4]<=[4]}")
    assert lines[at - 1].startswith('# note: tensor "u" dim 0 (size 6) is not divisible')
    exported = json.loads(_export(plan, "json"))
    assert exported["tensors"]["u"]["partition_spec"] is None
    assert "JAX NamedSharding requires even division" in exported["refused"]["u"]["partition_spec"]
    assert exported["tensors"]["u"]["dtensor"] == "(Shard(0), Shard(0))"
    assert list(exported["notes"]) == ["u"]
    with pytest.raises(NotDivisibleExportError, match='tensor "u" dim 0'):
        _export(plan, "jax")


@pytest.mark.parametrize("fmt", ["dtensor", "jax"])
def test_cli_scripts_are_python_with_every_tensor(plan_file: Path, fmt: str) -> None:
    """The scripts run in tests/autoshard/export/; here: the CLI writes them, complete."""
    code, out, _ = _run(str(plan_file), "--format", fmt)
    assert code == 0
    compile(out, f"plan_{fmt}.py", "exec")
    plan = json.loads(plan_file.read_text())
    table = out[out.index("TENSORS = {"):out.index("\n}\n")]
    assert [line.split('"')[1] for line in table.splitlines()[1:]] == list(plan["tensors"])
    row = '\n    {"tensor": ' if fmt == "jax" else '\n    ("'
    assert out.count(row) == len(plan["reshards"])
    assert plan["fingerprint"] in out


def test_topology_from_a_file_must_be_given(tmp_path: Path) -> None:
    data = _hand_plan().to_dict()
    data["topology"]["name"] = "my-cluster"
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    code, _, err = _run(str(path), "--format", "hlo")
    assert code == 2 and "'my-cluster'" in err and "--topology FILE" in err
    code, out, _ = _run(str(path), "--format", "hlo", "--topology", "dgx-h100")
    assert code == 0 and out.splitlines()[1] == EXPECTED["hlo"][0]


def test_training_is_read_off_the_plan_as_verify_does(tmp_path: Path) -> None:
    """export and verify take the same step options: read off the plan, checked when given."""
    shape = ["--model", "mlp", "--layers", "1", "--hidden", "64", "--ffn", "256", "--batch",
             "16", "--seq", "8"]
    result = CliRunner().invoke(main, ["plan", *shape, "--mesh", "dp=2,tp=2", "--training",
                                       "--memory", "230KiB", "--out", str(tmp_path), "-q"])
    assert result.exit_code == 0, result.output
    plan_path = str(tmp_path / "plan.json")
    roles = {t["role"] for t in json.loads((tmp_path / "plan.json").read_text())["tensors"]
             .values()}
    assert {"grad", "optimizer_state"} <= roles
    for given in ([], ["--training"], ["--training", "--optimizer", "adamw"]):
        code, out, err = _run(plan_path, "--format", "json", *shape, *given)
        assert code == 0, err
        assert list(json.loads(out)["tensors"]) == list(
            json.loads((tmp_path / "plan.json").read_text())["tensors"])
    for command in (["export", plan_path, "--format", "json"], ["verify", plan_path]):
        for wrong, culprit in ((["--inference"], "drop --inference"),
                               (["--optimizer", "sgd"], "made with --optimizer adamw, not sgd"),
                               (["--recompute", "full"], "made with --recompute none, not full")):
            result = CliRunner().invoke(main, [*command, *shape, *wrong])
            lines = result.stderr.strip().splitlines()
            assert result.exit_code == 2 and len(lines) == 1 and culprit in lines[0], (
                command, wrong, result.stderr)
