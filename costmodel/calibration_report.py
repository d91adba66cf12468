"""What a calibration says, as text: ``calibration.csv``, the one-screen summary, the plot.

Why: ``autoshard calibrate`` and ``autoshard bench calibration`` write the same three things;
formatting them here keeps both byte-identical for the same input (floats with a fixed number
of significant digits, rows in table order, no dates).
"""

from __future__ import annotations

import logging
import math
import os

import numpy as np

from costmodel.calibrate import Calibration, CalibrationRow
from costmodel.calibration_levels import LevelOrigin, LevelSource
from costmodel.link import Link

logger = logging.getLogger(__name__)

CSV_COLUMNS = ("table", "collective", "ranks", "bytes", "measured_us", "predicted_us", "ratio")


def _g(value: float) -> str:
    return format(value, ".6g")


def calibration_csv(calibration: Calibration) -> str:
    """The rows as CSV text, header :data:`CSV_COLUMNS`, one row per measured size.

    Example:
        >>> from costmodel.calibrate import Calibration, CalibrationRow
        >>> from costmodel import get_preset
        >>> row = CalibrationRow("t.txt", "all_reduce", 8, 1024, 40.0, 50.0)
        >>> print(calibration_csv(Calibration(get_preset("generic"), (), (row,), ())), end="")
        table,collective,ranks,bytes,measured_us,predicted_us,ratio
        t.txt,all_reduce,8,1024,40,50,1.25
    """
    lines = [",".join(CSV_COLUMNS)]
    for row in calibration.rows:
        name = row.table if "," not in row.table else f'"{row.table}"'
        lines.append(",".join((name, row.collective, str(row.ranks), str(row.nbytes),
                               _g(row.measured_us), _g(row.predicted_us), _g(row.ratio))))
    return "\n".join(lines) + "\n"


def ratio_stats(rows: tuple[CalibrationRow, ...]) -> dict[str, float]:
    """Median ratio, the ratio farthest from 1 (in log terms), median and worst |ratio − 1|."""
    ratios = np.array([row.ratio for row in rows])
    errors = np.abs(ratios - 1)
    worst = ratios[int(np.argmax(np.abs(np.log(ratios))))]
    return {"median_ratio": float(np.median(ratios)), "worst_ratio": float(worst),
            "median_error": float(np.median(errors)), "worst_error": float(errors.max())}


def _link_line(level: str, devices: int | None, link: Link) -> str:
    rate = link.bw_bytes_per_s
    bus = rate * link.bus_efficiency / 1e9
    size = "∞" if devices is None else str(devices)
    return (f"  {level:<9} {size:>5} {link.name or '-':<8} {rate / 1e9:>8.2f} {bus:>8.2f} "
            f"{link.alpha_s * 1e6:>8.3f} {link.launch_s * 1e6:>8.2f} "
            f"{link.pipeline_s * 1e6:>9.2f}")


_MARKS = {LevelSource.FITTED: "  (fitted)", LevelSource.KEPT: "  (kept from base)",
          LevelSource.UNSPANNED: "  (base)"}


def _origin_line(calibration: Calibration, origin: LevelOrigin) -> str:
    """Which tables a level was fitted on, or why it kept the base's values and how to fit it."""
    levels = calibration.topology.levels
    level = levels[origin.index]
    head = f"  {level.name} ({level.link.name or 'unnamed'}): "
    tables = ", ".join(origin.tables)
    if origin.source is LevelSource.FITTED:
        kept = [levels[o.index].name for o in calibration.origins
                if o.source is LevelSource.KEPT and o.index < origin.index]
        given = f", given {', '.join(map(repr, kept))} as kept" if kept else ""
        return head + f"fitted on {tables}{given}"
    if origin.source is LevelSource.UNSPANNED:
        return head + f"kept from {calibration.base}: no table crosses it"
    outer = levels[origin.index + 1].name
    verb = "crosses" if len(origin.tables) == 1 else "cross"
    return (head + f"kept from {calibration.base}, not fitted: {tables} {verb} it only "
            f"together with {outer!r}, and a curve over both cannot tell them apart; to fit "
            f"it too, add a table run inside one {level.name}")


def calibration_summary(calibration: Calibration, *, fitted: bool) -> str:
    """The one-screen summary: the levels' parameters and, per table, the ratios."""
    topology = calibration.topology
    verb = "fitted" if fitted else "checked"
    lines = [f"{topology.name}: {verb} against {len(calibration.tables)} nccl-tests table(s)",
             "", "  level     ranks link      link GB/s  bus GB/s  alpha µs launch µs "
                 "pipeline µs"]
    marks = {o.index: _MARKS[o.source] for o in calibration.origins}
    lines += [_link_line(level.name, level.devices, level.link) + marks.get(index, "")
              for index, level in enumerate(topology.levels)]
    if calibration.origins:
        lines += ["", *(_origin_line(calibration, origin) for origin in calibration.origins)]
    warnings = [f"  note: {p.level}.{p.name} is at its bound {_g(p.value)}: the base's link "
                "rate or the model may not suit these tables"
                for p in calibration.fitted if p.at_bound]
    warnings += [f"  note: {note}" for note in calibration.notes]
    lines += ["", "  table                                           collective   ranks nodes "
                  "sizes  median  worst   med|r-1| worst|r-1|"]
    columns = []
    for table in calibration.tables:
        stats = ratio_stats(calibration.table_rows(table.name))
        lines.append(f"  {table.name[:47]:<47} {table.collective.value:<12} {table.ranks:>5} "
                     f"{table.nodes:>5} {len(table.nbytes):>5}  {stats['median_ratio']:>6.2f} "
                     f"{stats['worst_ratio']:>6.2f}  {stats['median_error']:>8.1%} "
                     f"{stats['worst_error']:>9.1%}")
        columns.append(f"  {table.name}: {table.column}")
    lines += ["", "  ratio = predicted / measured time; measured time per table:", *columns]
    if fitted:
        lines.append("  fitted per level: launch, alpha, pipeline, bus efficiency (link rates "
                     "kept from the base)")
    lines += warnings
    return "\n".join(lines) + "\n"


def write_calibration_plot(calibration: Calibration, path: str | os.PathLike[str],
                           caption: str | None = None) -> None:
    """Measured and predicted time against bytes, log-log, one panel per table, as a PNG
    whose bytes depend only on the data and ``caption`` (Agg, no metadata)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tables = calibration.tables
    columns = min(3, len(tables))
    rows = math.ceil(len(tables) / columns)
    figure = Figure(figsize=(5.0 * columns, 3.8 * rows), dpi=100)
    FigureCanvasAgg(figure)
    for index, table in enumerate(tables):
        axes = figure.add_subplot(rows, columns, index + 1)
        found = calibration.table_rows(table.name)
        nbytes = [row.nbytes for row in found]
        axes.loglog(nbytes, [row.measured_us for row in found], "o", markersize=3,
                    label="measured")
        axes.loglog(nbytes, [row.predicted_us for row in found], "-", label="predicted")
        stats = ratio_stats(found)
        axes.set_title(f"{table.name[:40]}\n{table.collective.value}, {table.ranks} ranks, "
                       f"median ratio {stats['median_ratio']:.2f}", fontsize=8)
        axes.set_xlabel("bytes")
        axes.set_ylabel("time (µs)")
        axes.grid(True, which="major", alpha=0.3)
        axes.legend(fontsize=7)
    figure.suptitle(f"{calibration.topology.name} against nccl-tests", fontsize=10)
    if caption:
        figure.text(0.01, 0.005, caption, fontsize=6, color="gray")
    figure.tight_layout(rect=(0, 0.03 if caption else 0, 1, 1))
    figure.savefig(os.fspath(path), format="png", metadata={"Software": None})
