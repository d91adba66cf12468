"""`autoshard import torch` end to end: factory file → graph JSON → plan → DTensor script that
places the real module's parameters and runs its forward pass on a fake process group."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoshard.cli import main
from tests.support import DATA_DIR

pytestmark = pytest.mark.torch
DATA = DATA_DIR / "torch_models.py"


def _run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def planned(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("import")
    graph, plan_dir, script = tmp / "g.json", tmp / "plan", tmp / "plan_dtensor.py"
    imported = _run("import", "torch", f"{DATA}:make", "--out", str(graph))
    assert imported.exit_code == 0, imported.output
    assert "4 parameters" in imported.output and "0 unmapped" in imported.output
    planned = _run("plan", "--model", str(graph), "--mesh", "dp=2,tp=2", "--training",
                   "--out", str(plan_dir))
    assert planned.exit_code == 0, planned.output
    exported = _run("export", str(plan_dir / "plan.json"), "--format", "dtensor", "--model",
                    str(graph), "--training", "--out", str(script))
    assert exported.exit_code == 0, exported.output
    return {"graph": graph, "plan": plan_dir / "plan.json", "script": script, "tmp": tmp}


def test_import_then_plan_inference_exits_zero(planned) -> None:
    result = _run("plan", "--model", str(planned["graph"]), "--mesh", "dp=2,tp=2")
    assert result.exit_code == 0, result.output
    tensors = json.loads(planned["plan"].read_text())["tensors"]
    assert {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"} <= set(tensors)


def test_import_never_overwrites_without_force(planned) -> None:
    again = _run("import", "torch", f"{DATA}:make", "--out", str(planned["graph"]))
    assert again.exit_code == 2 and "--force" in again.output
    forced = _run("import", "torch", f"{DATA}:make", "--out", str(planned["graph"]), "--force",
                  "--name", "mlp")
    assert forced.exit_code == 0 and "mlp, " in forced.output


@pytest.mark.parametrize(("factory", "expected"), [
    (f"{DATA}:make_unmapped --strict", r"aten.cumsum.default x2"),
    (f"{DATA}:make_broken", "torch.export could not trace"),
    ("no_such_module_xyz:make", "no module named 'no_such_module_xyz'"),
    (f"{DATA}:NOT_CALLABLE", "not a callable factory"),
    (f"{DATA}:missing", 'has no attribute "missing"'),
    ("just_a_name", "is not MODULE:FACTORY"),
], ids=["strict-unmapped", "trace-failure", "no-module", "not-callable", "no-attr", "no-colon"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, factory: str, expected: str) -> None:
    result = _run("import", "torch", *factory.split(), "--out", str(tmp_path / "g.json"))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not (tmp_path / "g.json").exists()


def test_strict_exit_code_of_the_real_process(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", "from autoshard.cli import main; main()",
                             "import", "torch", f"{DATA}:make_unmapped", "--strict",
                             "--out", str(tmp_path / "g.json")],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "cumsum" in result.stderr


def test_unmapped_ops_warn_in_one_line_and_still_write(tmp_path: Path) -> None:
    result = _run("import", "torch", f"{DATA}:make_unmapped", "--out", str(tmp_path / "u.json"))
    assert result.exit_code == 0 and "2 unmapped" in result.output
    assert "warning" in result.output and "aten.cumsum.default x2" in result.output


_HARNESS = textwrap.dedent(
    """
    import importlib.util, json, sys
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    spec = importlib.util.spec_from_file_location("plan_dtensor", sys.argv[1])
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    models = importlib.util.spec_from_file_location("torch_models", sys.argv[2])
    factories = importlib.util.module_from_spec(models)
    models.loader.exec_module(factories)
    torch.manual_seed(0)
    model = factories.MLPWithLoss()
    values = {n: p.detach() for n, p in model.named_parameters()}
    values["x"] = torch.randn(4, 16)
    values["targets"] = torch.randint(0, 8, (4,))
    mesh = script.make_mesh("cpu")
    placed = script.place(mesh, values)
    for name, _ in list(model.named_parameters()):
        owner, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(owner), leaf, torch.nn.Parameter(placed[name]))
    loss = model(placed["x"], placed["targets"])
    print(json.dumps({"type": type(loss).__name__, "shape": list(loss.shape),
                      "params": {n: [str(p) for p in placed[n].placements]
                                 for n, _ in model.named_parameters()}}))
    """
)


def test_dtensor_export_places_the_real_module_and_runs_its_forward(planned) -> None:
    result = subprocess.run([sys.executable, "-c", _HARNESS, str(planned["script"]), str(DATA)],
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    ran = json.loads(result.stdout.strip().splitlines()[-1])
    assert ran["type"] == "DTensor" and ran["shape"] == []
    tensors = json.loads(planned["plan"].read_text())["tensors"]
    for name, placements in ran["params"].items():
        assert placements == tensors[name]["placements"]
