"""``autoshard bench xla-crosscheck --quick``: XLA's SPMD partitioner, given our plan's
shardings, inserts exactly the collectives the plan predicts for the MLP, and the sharded
programs compute what the one-device program computes (the HLO reader's own test is
tests/autoshard/export/test_hlo_collectives.py)."""

from __future__ import annotations

import pandas as pd
import pytest

pytestmark = pytest.mark.jax


def test_quick_crosscheck_agrees_with_xla(tmp_path) -> None:
    from autoshard.bench.xla_crosscheck import run

    (path,) = run(tmp_path, quick=True)
    table = pd.read_csv(path, comment="#")
    assert set(table["case"]) == {"mlp-fwd-dp2xtp4", "mlp-grad-dp2xtp4", "gpt1-fwd-dp2xtp4"}
    mlp = table[table["model"] == "mlp"]
    assert mlp["match"].all() and (mlp["predicted"] > 0).all()
    assert (mlp["sharded_params"] != "0/4").all()          # tensor parallel, not replication
    assert (table["max_rel_err"] < 1e-5).all()
