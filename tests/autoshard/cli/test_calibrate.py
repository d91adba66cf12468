"""``autoshard calibrate``: fit and --check on the shipped nccl-tests tables, what is written,
what is refused, and one line per bad input."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoshard.cli import main
from autoshard.cli.calibrate import _require_base_for_kept_levels
from costmodel import get_preset, load_topology, read_nccl_tests

DATA = resources.files("costmodel") / "data" / "nccl_tests"
OCI = str(DATA / "oci-bm-gpu4.8-2node-16xA100-40GB-roce-allreduce.txt")
AZURE = str(DATA / "azure-nda100v4-1node-8xA100-busbw-only.txt")
P4DE = str(DATA / "aws-p4de-2node-16xA100-80GB-efa400-allreduce.txt")


def _run(*args: str):
    return CliRunner().invoke(main, ["calibrate", *args])


def test_fit_writes_a_loadable_topology_csv_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "cluster.toml"
    result = _run(OCI, "--base", "dgx-a100", "--name", "oci", "--out", str(out))
    assert result.exit_code == 0, result.output
    topology = load_topology(out)
    assert topology.name == "oci" and not topology.levels[1].link.is_alpha_beta
    csv = (tmp_path / "calibration.csv").read_text().splitlines()
    assert csv[0] == "table,collective,ranks,bytes,measured_us,predicted_us,ratio"
    assert len(csv) == 1 + 31 and csv[1].startswith(
        "oci-bm-gpu4.8-2node-16xA100-40GB-roce-allreduce.txt,all_reduce,16,8,34.74,")
    assert (tmp_path / "calibration.png").read_bytes()[:4] == b"\x89PNG"
    assert "oci: fitted against 1 nccl-tests table(s)" in result.output
    assert "(fitted)" in result.output and "launch µs" in result.output


def test_the_fitted_file_plans_with_topology(tmp_path: Path) -> None:
    out = tmp_path / "a100.toml"
    assert _run(AZURE, "--nodes", "1", "--gpus-per-node", "8", "--base", "dgx-a100",
                "--out", str(out)).exit_code == 0
    planned = CliRunner().invoke(main, ["plan", "--model", "mlp", "--layers", "1", "--hidden",
                                        "64", "--ffn", "256", "--batch", "8", "--seq", "8",
                                        "--mesh", "tp=2", "--topology", str(out), "--out",
                                        str(tmp_path / "plan")])
    assert planned.exit_code == 0, planned.output


def test_check_compares_without_fitting(tmp_path: Path) -> None:
    result = _run("--check", "aws-p4d", P4DE, "--nodes", "2", "--gpus-per-node", "8",
                  "--report-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.csv", "calibration.png"]
    assert "aws-p4d: checked against 1 nccl-tests table(s)" in result.output


def test_outputs_are_never_overwritten_without_force(tmp_path: Path) -> None:
    out = tmp_path / "cluster.toml"
    assert _run(OCI, "--base", "dgx-a100", "--out", str(out)).exit_code == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    refused = _run(OCI, "--base", "dgx-a100", "--name", "other", "--out", str(out))
    assert refused.exit_code == 2 and "--force" in refused.output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    forced = _run(OCI, "--base", "dgx-a100", "--name", "other", "--out", str(out), "--force")
    assert forced.exit_code == 0 and load_topology(out).name == "other"


@pytest.mark.parametrize(("args", "culprit"), [
    ([P4DE], "--nodes N --gpus-per-node G"),
    ([P4DE, "--nodes", "1", "--gpus-per-node", "8"], "bus factor"),
    ([str(DATA / "README.md")], "README.md, line 3: not a line of nccl-tests output"),
    ([OCI, "--base", "dgx-h10"], "dgx-h100"),
    ([OCI, "--base", "generic"], "single level"),
    ([P4DE, "--nodes", "2", "--gpus-per-node", "8"],
     "multi-node tables only, which cannot tell the node level (NVLink) apart from the "
     "network; give a single-node table too, or --base PRESET|FILE.toml"),
], ids=["no-counts", "wrong-counts", "not-a-table", "unknown-base", "level-mismatch",
        "multi-node-without-base"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args, culprit) -> None:
    result = _run(*args, "--out", str(tmp_path / "out" / "cluster.toml"))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autoshard: error: ") and culprit in lines[0]
    assert not (tmp_path / "out").exists()


def test_multi_node_table_with_base_keeps_its_node_level(tmp_path: Path) -> None:
    out = tmp_path / "p4de.toml"
    result = _run(P4DE, "--nodes", "2", "--gpus-per-node", "8", "--base", "dgx-a100",
                  "--out", str(out))
    assert result.exit_code == 0, result.output
    assert load_topology(out).levels[0].link == get_preset("dgx-a100").levels[0].link
    assert ("# level node: kept from dgx-a100 (the tables cannot determine it)\n"
            "# level cluster: fitted\n") in out.read_text()
    assert "node (nvlink): kept from dgx-a100, not fitted" in result.output


def test_tables_that_determine_every_level_they_cross_need_no_base(tmp_path: Path) -> None:
    out = tmp_path / "cluster.toml"
    result = _run(AZURE, "--nodes", "1", "--gpus-per-node", "8", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "dgx-h100-calibrated: fitted" in result.output
    assert ("# level node: fitted\n"
            "# level cluster: kept from dgx-h100 (no table crosses it)\n") in out.read_text()
    # one --nodes applies to every file, so a single- and a two-node file need two runs of
    # the reader; the check itself passes them
    tables = [*read_nccl_tests(AZURE, nodes=1, gpus_per_node=8),
              *read_nccl_tests(P4DE, nodes=2, gpus_per_node=8)]
    _require_base_for_kept_levels(None, tables)


def test_out_or_check_is_required() -> None:
    result = _run(OCI)
    assert result.exit_code == 2 and "--out FILE.toml" in result.output
