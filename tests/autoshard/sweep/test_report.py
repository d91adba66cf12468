"""Sweep reports from hand-written rows: best mesh, the "why" sentence, stable plots, the CSV."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoshard.sweep.plots import best_per_devices, draw_memory, frame, write_plots
from autoshard.sweep.summary import summary_markdown, why
from autoshard.sweep.table import COLUMNS, RowAppender, read_rows, sort_key, write_sorted


def row(mesh: str, devices: int, compute_ms: float, comm_ms: float, *, feasible: bool = True,
        collective: tuple[str, str, float] = ("all_reduce", "dp", 0.0)) -> dict[str, str]:
    total = (compute_ms + comm_ms) / 1e3
    values = dict.fromkeys(COLUMNS, "")
    values.update(point=f"m_{mesh}", model="m", mode="infer", devices=str(devices),
                  axes=str(mesh.count(",") + 1), mesh=mesh, topology="dgx-h100",
                  links="default", batch="4", seq="100", training="False",
                  feasible=str(feasible), limit_bytes=repr(8.0 * 2**30),
                  peak_bytes_per_device=repr(2.0 * 2**30))
    if feasible:
        values.update(total_s=repr(total), compute_s=repr(compute_ms / 1e3),
                      comm_s=repr(comm_ms / 1e3), comm_share=repr(comm_ms / (compute_ms + comm_ms)),
                      tokens_per_s=repr(400 / total), optimal="True", gap="0.0",
                      top_collective=collective[0], top_collective_axes=collective[1],
                      top_collective_s=repr(collective[2] / 1e3))
    else:
        values.update(error_kind="MemoryTooSmallError", error="too big",
                      peak_bytes_per_device=repr(9.0 * 2**30))
    return values


ROWS = [
    row("dp=4", 4, 2.0, 3.0, collective=("all_reduce", "dp", 3.0)),           # 5 ms
    row("dp=2,tp=2", 4, 2.0, 1.0, collective=("all_gather", "tp", 0.75)),     # 3 ms: best
    row("dp=8", 8, 1.0, 0.5, collective=("all_reduce", "dp", 0.5)),           # 1.5 ms: best
    row("dp=2,tp=4", 8, 1.0, 0.5, collective=("all_reduce", "tp", 0.5)),      # tie: more axes
    row("dp=4,tp=2", 8, 0.0, 0.0, feasible=False),
]


def test_best_mesh_is_the_fastest_feasible_and_ties_go_to_fewer_axes() -> None:
    best = best_per_devices(frame(ROWS))
    assert list(best["mesh"]) == ["dp=2,tp=2", "dp=8"]


def test_why_names_the_dominant_part_the_collective_and_the_runner_up() -> None:
    table = frame(ROWS)
    best, runner = table.iloc[1], table.iloc[0]
    text = why(best, runner)
    assert text.startswith("compute dominates (67% compute, 33% communication")
    assert "all_gather over tp 0.750 ms" in text
    assert "runner-up dp=4 is 1.67x slower with 3.000 ms of communication" in text
    assert "all_reduce over dp 3.000 ms" in text
    assert why(runner, None).startswith("communication dominates (40% compute, 60%")


def test_summary_lists_best_meshes_command_and_infeasible_points() -> None:
    text = summary_markdown(frame(ROWS), command="autoshard sweep --model m", machine="here",
                            plots=["step_time.png"])
    assert "| 4 | `dp=2,tp=2` | 3.000 ms | 133,333 |" in text
    assert "| 8 | `dp=8` | 1.500 ms | 266,667 |" in text
    assert "runner-up dp=2,tp=4 is within 0.00% with 0.500 ms" in text
    assert "autoshard sweep --model m" in text
    assert "`m_dp=4,tp=2` | MemoryTooSmallError: too big" in text
    assert "![step_time.png](step_time.png)" in text
    assert "stopped at the time limit" not in text
    unproven = [dict(ROWS[0], optimal="False", gap="0.5", status="time_limit"),
                dict(ROWS[1], optimal="False", gap="0.001", status="feasible"), *ROWS[2:]]
    text = summary_markdown(frame(unproven), command="c", machine="m", plots=[])
    assert "**1 point stopped at the time limit before proving the plan optimal** " \
           "(`dp=4`)" in text
    assert "**1 point planned with the search restricted to repeating the layers" in text
    assert "(`dp=2,tp=2`)" in text


def test_plots_are_byte_stable(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    paths_a = write_plots(frame(ROWS), first, caption="same command")
    paths_b = write_plots(frame(ROWS), second, caption="same command")
    assert [p.name for p in paths_a] == ["step_time.png", "memory.png", "throughput.png",
                                         "frontier.png"]
    for a, b in zip(paths_a, paths_b, strict=True):
        assert a.read_bytes() == b.read_bytes()
        assert b"Software" not in a.read_bytes()


@pytest.mark.parametrize(("limit_gib", "scale"), [(74.5, "log"), (8.0, "linear")])
def test_memory_plot_reads_at_any_limit(limit_gib: float, scale: str) -> None:
    """Peaks of 2 GiB under a 74.5 GiB limit (an 80 GB device) were flat bars under a label
    drawn on the limit line; now the axis turns logarithmic and the limit is in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    infeasible = repr((limit_gib + 15.0) * 2**30)  # the smallest peak that does not fit
    rows = frame([{**r, "limit_bytes": repr(limit_gib * 2**30)} | (
        {} if r["feasible"] == "True" else {"peak_bytes_per_device": infeasible}) for r in ROWS])
    fig, ax = plt.subplots()
    draw_memory(ax, rows)
    low, high = ax.get_ylim()
    assert ax.get_yscale() == scale
    assert low <= 2.0 and high > limit_gib + 15.0  # every bar and the line are shown
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert f"limit {limit_gib:.1f} GiB per device" in legend
    assert "smallest peak (does not fit)" in legend
    assert not [t for t in ax.texts if "limit" in t.get_text()]  # no label on the line
    plt.close(fig)


def test_csv_appends_dedupes_and_sorts(tmp_path: Path) -> None:
    path = tmp_path / "sweep.csv"
    with RowAppender(path) as appender:
        for values in reversed(ROWS):
            appender.append(values)
        appender.append({**ROWS[0], "error": "second copy wins"})
    with path.open("a") as handle:
        handle.write("m_cut,m,infer,4")  # a torn last line
    rows = read_rows(path)
    assert len(rows) == len(ROWS) and rows["m_dp=4"]["error"] == "second copy wins"
    ordered = write_sorted(path, rows.values())
    assert [r["mesh"] for r in ordered] == ["dp=4", "dp=2,tp=2", "dp=8", "dp=2,tp=4",
                                            "dp=4,tp=2"]
    assert path.read_text().count("\n") == len(ROWS) + 1
    assert sorted(ordered, key=sort_key) == ordered


@pytest.mark.parametrize("header", ["point,model\n", ""], ids=["foreign", "empty"])
def test_foreign_or_empty_csv_reads_as_no_rows(tmp_path: Path, header: str) -> None:
    path = tmp_path / "sweep.csv"
    path.write_text(header)
    assert read_rows(path) == {}


def test_a_sweep_without_any_plan_still_reports(tmp_path: Path) -> None:
    table = frame([row("dp=4,tp=2", 8, 0.0, 0.0, feasible=False)])
    assert len(write_plots(table, tmp_path, caption="c")) == 4
    text = summary_markdown(table, command="c", machine="m", plots=[])
    assert "| 8 | none feasible |" in text and "1 of 1 points have no plan" in text


def test_a_sweep_without_a_batch_reports_it_as_unknown(tmp_path: Path) -> None:
    """A graph file (or a config swept without --batch) has no batch, hence no tokens per
    second: the report says so instead of failing on the empty cells or guessing a number."""
    rows = [dict(r, batch="", seq=seq, tokens_per_s="")
            for r, seq in ((ROWS[0], ""), (ROWS[1], ""), (ROWS[2], "512"))]
    table = frame(rows)
    assert len(write_plots(table, tmp_path, caption="c")) == 4
    text = summary_markdown(table, command="c", machine="m", plots=[])
    assert "## m inference, batch unknown, seq unknown, dgx-h100" in text
    assert "## m inference, batch unknown, seq 512, dgx-h100" in text
    assert "| 4 | `dp=2,tp=2` | 3.000 ms | unknown |" in text
