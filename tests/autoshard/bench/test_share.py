"""``autoshard bench share``: the quick run plans the job with and without shared reshards in
fresh processes and compares them."""

from __future__ import annotations

import pandas as pd

from autoshard.bench import share
from autoshard.bench.runner import BENCHMARKS


def test_quick_run_writes_both_pricings_and_their_ratio(tmp_path) -> None:
    (path,) = share.run(tmp_path, quick=True)
    frame = pd.read_csv(path, comment="#")
    assert list(frame["share_reshards"]) == [False, True, True]
    assert list(frame["time_limit_s"]) == [share.TIME_LIMIT_S, share.TIME_LIMIT_S, 2.0]
    assert frame["optimal"][:2].all()
    off, on, limited = frame.to_dict("records")
    # under a short time limit the rounds end on a plan at its truth: the proven shared
    # optimum is a floor for its step and a ceiling for its bound
    assert limited["step_s"] >= on["step_s"] - 1e-12
    assert limited["step_s"] * (1 - limited["gap"]) <= on["step_s"] + 1e-12
    # one reshard per (tensor, layout) only drops the duplicates the per-edge pricing
    # charges: never a dearer step, and sharing found something to price
    assert on["step_s"] <= off["step_s"] + 1e-12
    assert on["shares"] > 0 and off["shares"] == 0
    assert on["on_over_off"] == on["wall_s"] / off["wall_s"]
    assert on["cpu_on_over_off"] == on["median_cpu_s"] / off["median_cpu_s"]
    assert on["step_saved_s"] == off["step_s"] - on["step_s"]
    assert BENCHMARKS["share"] == "autoshard.bench.share"
