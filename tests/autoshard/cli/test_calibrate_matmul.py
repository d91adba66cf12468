"""``autoshard calibrate --matmul``: the GEMM terms fitted from a matmul table land in the TOML.

Oracles: a table generated from known kernel parameters (the fit must give them back through
the CLI and the written TOML), the shipped OpenXLA H100 table (whose fit the dgx-h100 preset
records to 3 significant digits), and one stderr line per bad input.
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from autoshard.cli import main
from costmodel import Gemm, get_preset, kernel_seconds, load_topology

XLA = str(resources.files("costmodel") / "data" / "gemm" / "xla-sm90-bf16.csv")
OCI = str(resources.files("costmodel") / "data" / "nccl_tests" /
          "oci-bm-gpu4.8-2node-16xA100-40GB-roce-allreduce.txt")


def _run(*args: str):
    return CliRunner().invoke(main, ["calibrate", *args])


def _synthetic_table(path: Path) -> None:
    """Seconds of 60 products on an A100 whose GEMM terms are 0.81 / 90 K / 3.3 µs."""
    a100 = get_preset("dgx-a100").device
    truth = dataclasses.replace(a100, kernels=dataclasses.replace(
        a100.kernels, gemm_efficiency=0.81, gemm_k_overhead=90.0, launch_s=3.3e-6))
    rng = np.random.default_rng(11)
    lines = ["# synthetic: dgx-a100 with gemm_efficiency 0.81, k_overhead 90, launch 3.3us",
             "m,n,k,dtype,seconds"]
    for _ in range(60):
        m, n, k = (int(x) for x in rng.integers(96, 8000, size=3))
        gemm = Gemm(m=m, n=n, k=k)
        nbytes = 2.0 * (m * k + k * n + m * n)
        seconds = kernel_seconds(gemm, float(gemm.flops), nbytes, "bf16", truth)
        lines.append(f"{m},{n},{k},bf16,{seconds:.9e}")
    path.write_text("\n".join(lines) + "\n")


def test_fit_recovers_known_gemm_terms_into_the_toml(tmp_path: Path) -> None:
    table = tmp_path / "a100.csv"
    _synthetic_table(table)
    out = tmp_path / "fitted.toml"
    result = _run("--matmul", str(table), "--base", "dgx-a100", "--out", str(out))
    assert result.exit_code == 0, result.output
    kernels = load_topology(out).device.kernels
    assert kernels.gemm_efficiency == pytest.approx(0.81, rel=0.01)
    assert kernels.gemm_k_overhead == pytest.approx(90.0, rel=0.05)
    assert kernels.launch_s == pytest.approx(3.3e-6, rel=0.05)
    assert kernels.sm_count == 108 and kernels.gemm_tile == (128, 128)   # the base's, kept
    assert load_topology(out).name == "dgx-a100-calibrated"
    csv = (tmp_path / "calibration-gemm.csv").read_text().splitlines()
    assert csv[0] == "table,batch,m,n,k,dtype,measured_us,predicted_us,ratio"
    assert len(csv) == 61
    assert "gemm_efficiency = 0.81" in result.output


def test_the_shipped_h100_table_gives_the_preset_s_terms(tmp_path: Path) -> None:
    out = tmp_path / "h100.toml"
    assert _run("--matmul", XLA, "--out", str(out)).exit_code == 0
    fitted, preset = load_topology(out).device.kernels, get_preset("dgx-h100").device.kernels
    for name in ("gemm_efficiency", "gemm_k_overhead", "launch_s"):
        assert getattr(fitted, name) == pytest.approx(getattr(preset, name), rel=5e-3), name


def test_check_writes_only_the_gemm_report(tmp_path: Path) -> None:
    result = _run("--matmul", XLA, "--check", "dgx-h100", "--report-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["calibration-gemm.csv"]
    assert "GEMM model on 105 measured products: median error 2.7 %" in result.output


def test_collectives_and_matmuls_fit_into_one_file(tmp_path: Path) -> None:
    out = tmp_path / "both.toml"
    result = _run(OCI, "--matmul", XLA, "--base", "dgx-h100", "--out", str(out))
    assert result.exit_code == 0, result.output
    topology = load_topology(out)
    assert not topology.levels[1].link.is_alpha_beta          # collectives fitted
    assert topology.device.kernels.gemm_efficiency == pytest.approx(0.869, rel=5e-3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "both.toml", "calibration-gemm.csv", "calibration.csv", "calibration.png"]


@pytest.mark.parametrize(("args", "culprit"), [
    (["--matmul", "missing.csv"], "missing.csv: cannot read the file"),
    (["--matmul", "BAD"], "bad.csv, line 2: batch, m, n and k must be positive integers"),
    (["--matmul", XLA, "--base", "tpu-v5e"], "no kernel-model parameters"),
    ([], "and/or matmul tables"),
    # H100 SXM's dense bf16 peak is 989 TFLOP/s (NVIDIA H100 datasheet)
    (["--matmul", "FAST"], "measures 5,000 TFLOP/s, above H100-SXM5-80GB's bf16 peak of 989"),
    (["--matmul", "INT4"], "dtype 'int4' is not one of"),
], ids=["missing", "bad-row", "flat-base", "no-tables", "above-peak", "unknown-dtype"])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args, culprit) -> None:
    tables = {"BAD": "m,n,k,dtype,tflops\n0,1,1,bf16,1\n",
              "FAST": "m,n,k,dtype,tflops\n8192,8192,8192,bf16,5000\n",
              "INT4": "m,n,k,dtype,tflops\n8192,8192,8192,int4,400\n"}
    for name, text in tables.items():
        (tmp_path / f"{name.lower()}.csv").write_text(text)
    args = [str(tmp_path / f"{a.lower()}.csv") if a in tables
            else str(tmp_path / a) if a == "missing.csv" else a for a in args]
    result = _run(*args, "--out", str(tmp_path / "out" / "x.toml"))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and culprit in lines[0], result.output
    assert not (tmp_path / "out").exists()
