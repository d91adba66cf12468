"""What ``autoshard plan`` prints about the mesh: each axis's links with their measured-curve
terms, throughput per device and for all devices, and the real mesh in a pipelined plan's
memory refusal.

Expected link terms are the dgx-h100 preset's cited constants (NCCL ``src/graph/tuning.cc``
at 5067397c2676d5aed50042fc39e5c8ee96eb0027: base latency ``baseLatencies[Tree][LL] = 6.8``
µs; the NVLink fit's 17.4 µs fill and 370 of 450 GB/s bus bandwidth, 0.822; IB NDR 3.83 µs
fill and 47 of 50 GB/s, 0.94), written out here, not read from the presets.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run

NVLINK = "nvlink 450 GB/s, alpha 0.89 us, launch 6.8 us, fill 17.4 us, bus eff 0.822"
IB = "ib 50 GB/s, alpha 0.479 us, launch 6.8 us, fill 3.83 us, bus eff 0.94"
SMALL = ("--model", "mlp", "--layers", "2", "--hidden", "64", "--ffn", "256", "--batch", "8",
         "--seq", "16")


def test_every_axis_shows_its_links_curve_terms(tmp_path: Path) -> None:
    result = run("plan", *SMALL, "--mesh", "dp=4,tp=4", "--link", "tp=alpha:50us,bw:100GB/s")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # dp=4 at stride 4 on nodes of 8: 2 ranks per node on NVLink, 2 nodes over IB
    assert f"  dp (4): {NVLINK.replace('nvlink', 'nvlink x2')} + " \
           f"{IB.replace('ib', 'ib x2', 1)}" in lines
    assert "  tp (4): written 100 GB/s, alpha 50 us" in lines  # textbook: no curve terms


def test_throughput_is_per_device_and_for_all_devices(tmp_path: Path) -> None:
    result = run("plan", *SMALL, "--mesh", "dp=2,tp=2", "--out", str(tmp_path / "p"))
    assert result.exit_code == 0, result.output
    step_s = json.loads((tmp_path / "p" / "plan.json").read_text())["objective"]["total_s"]
    whole = 8 * 16 / step_s  # batch x seq tokens per step, the sweep's tokens_per_s
    line = next(x for x in result.output.splitlines() if x.startswith("throughput"))
    assert line.startswith(f"throughput {whole / 4:,.0f} tokens/s per device ({whole:,.0f} "
                           "tokens/s on all 4 devices; "), line


def test_a_pipelined_plan_that_does_not_fit_names_its_mesh() -> None:
    result = run("plan", "--model", "mlp", "--mesh", "dp=2,pp=2", "--training", "--memory",
                 "50MiB")
    assert result.exit_code == 1
    line = result.output.strip()
    assert line.startswith("autoshard: error: no plan fits in 50 MiB per device on mesh "
                           "dp=2,pp=2: "), line
