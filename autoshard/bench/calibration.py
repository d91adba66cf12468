"""``autoshard bench calibration``: the collective model against the shipped nccl-tests tables.

Three studies per table (costmodel/data/nccl_tests, measured by AWS, Oracle and Azure):
``preset`` prices the table with the matching preset as shipped (the issue's "presets without
calibration" target: median ratio in 0.67-1.5, worst in 0.33-3); ``textbook`` with the same
preset's links stripped to pure alpha-beta (what the planner priced before the measured-curve
model); ``fit`` calibrates ``dgx-a100`` on that table alone (target: median |ratio − 1| ≤ 10 %,
worst ≤ 35 %; on a two-node table only the network level is fitted, NVLink kept from
``dgx-a100``). ``joint`` refits the presets' own table pairs (Azure + OCI for dgx-a100, Azure +
AWS p4de for aws-p4d). Writes ``calibration.csv`` (every size), ``calibration_summary.csv``
(one row per study and table, with the targets), ``calibration.txt`` (the fitted parameters)
and one plot per study, each stating the command, commit and machine.
"""

from __future__ import annotations

import dataclasses
import logging
from importlib import resources
from pathlib import Path

import pandas as pd

from autoshard.provenance import header_lines, machine_line, write_csv
from costmodel import Link, NcclTable, Topology, get_preset, read_nccl_tests
from costmodel.calibrate import Calibration, calibrate, check
from costmodel.calibration_report import calibration_summary, ratio_stats, write_calibration_plot

logger = logging.getLogger(__name__)

# file, nodes and GPUs per node when the file has no nccl-tests rank header, matching preset.
# OCI BM.GPU4.8 and Azure ND A100 v4 are 8×A100 NVSwitch nodes like a DGX A100 (OCI with RoCE
# at the DGX's 8 × 200 Gb/s); AWS p4de has the aws-p4d preset's network (NVSwitch + 400 Gb/s
# EFA; its GPUs are the 80 GB A100, p4d's the 40 GB one).
TABLES = (
    ("azure-nda100v4-1node-8xA100-busbw-only.txt", (1, 8), "dgx-a100"),
    ("oci-bm-gpu4.8-2node-16xA100-40GB-roce-allreduce.txt", (None, None), "dgx-a100"),
    ("aws-p4de-2node-16xA100-80GB-efa400-allreduce.txt", (2, 8), "aws-p4d"),
)
JOINT = (("dgx-a100", (0, 1)), ("aws-p4d", (0, 2)))
FIT_BASE = "dgx-a100"
PRESET_MEDIAN, PRESET_WORST = (0.67, 1.5), (0.33, 3.0)
FIT_MEDIAN, FIT_WORST = 0.10, 0.35


def shipped_tables() -> list[NcclTable]:
    """The measured tables shipped with costmodel, one per file."""
    folder = resources.files("costmodel") / "data" / "nccl_tests"
    found = []
    for name, (nodes, gpus), _ in TABLES:
        found += read_nccl_tests(str(folder / name), nodes=nodes, gpus_per_node=gpus)
    return found


def alpha_beta(topology: Topology) -> Topology:
    """``topology`` with every level's link reduced to its alpha, beta and name."""
    levels = tuple(dataclasses.replace(level, link=Link(level.link.alpha_s,
                                                        level.link.beta_s_per_byte,
                                                        level.link.name))
                   for level in topology.levels)
    return dataclasses.replace(topology, name=f"{topology.name} (alpha-beta)", levels=levels)


def studies(quick: bool) -> list[tuple[str, Calibration]]:
    """Every (study, calibration) the benchmark reports."""
    tables = shipped_tables()
    out: list[tuple[str, Calibration]] = []
    for table, (_, _, preset) in zip(tables, TABLES, strict=True):
        out.append(("preset", check(get_preset(preset), (table,))))
        out.append(("textbook", check(alpha_beta(get_preset(preset)), (table,))))
        out.append(("fit", calibrate(get_preset(FIT_BASE), (table,))))
    if not quick:
        for preset, picks in JOINT:
            out.append(("joint", calibrate(get_preset(preset), [tables[i] for i in picks],
                                           name=f"{preset}-refit")))
    return out


def _summary_row(study: str, calibration: Calibration, table: NcclTable) -> dict[str, object]:
    stats = ratio_stats(calibration.table_rows(table.name))
    if study == "preset":
        met = (PRESET_MEDIAN[0] <= stats["median_ratio"] <= PRESET_MEDIAN[1]
               and PRESET_WORST[0] <= stats["worst_ratio"] <= PRESET_WORST[1])
    elif study in ("fit", "joint"):
        met = stats["median_error"] <= FIT_MEDIAN and stats["worst_error"] <= FIT_WORST
    else:
        met = None
    return {"study": study, "topology": calibration.topology.name, "table": table.name,
            "collective": table.collective.value, "ranks": table.ranks, "sizes":
            len(table.nbytes), **{k: round(v, 4) for k, v in stats.items()}, "target_met": met}


def run(out_dir: Path, quick: bool = False) -> list[Path]:
    """Write the calibration CSVs, summary text and plots under ``out_dir``."""
    results = studies(quick)
    rows, summary = [], []
    for study, calibration in results:
        rows += [{"study": study, "topology": calibration.topology.name, "table": r.table,
                  "collective": r.collective, "ranks": r.ranks, "bytes": r.nbytes,
                  "measured_us": r.measured_us, "predicted_us": round(r.predicted_us, 4),
                  "ratio": round(r.ratio, 5)} for r in calibration.rows]
        summary += [_summary_row(study, calibration, t) for t in calibration.tables]
    out_dir = Path(out_dir)
    written = [_csv(out_dir / "calibration.csv", rows),
               _csv(out_dir / "calibration_summary.csv", summary)]
    text = out_dir / "calibration.txt"
    text.write_text("\n".join(header_lines()) + "\n\n" + "\n".join(
        f"== {study}\n{calibration_summary(c, fitted=study in ('fit', 'joint'))}"
        for study, c in results))
    written.append(text)
    for study in dict.fromkeys(study for study, _ in results):
        merged = _merged([c for s, c in results if s == study], study)
        path = out_dir / f"calibration_{study}.png"
        write_calibration_plot(merged, path, caption=f"autoshard bench calibration; "
                                                     f"{machine_line()}")
        written.append(path)
    return written


def _csv(path: Path, rows: list[dict[str, object]]) -> Path:
    return write_csv(path, pd.DataFrame(rows))


def _merged(calibrations: list[Calibration], study: str) -> Calibration:
    """One plot for a study: every table's panel, titled by the study."""
    first = calibrations[0]
    topology = dataclasses.replace(first.topology, name=f"{study}")
    return Calibration(topology=topology,
                       tables=tuple(t for c in calibrations for t in c.tables),
                       rows=tuple(r for c in calibrations for r in c.rows), fitted=())
