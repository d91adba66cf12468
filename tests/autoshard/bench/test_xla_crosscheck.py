"""``autoshard bench xla-crosscheck --quick``: XLA's SPMD partitioner, given our plan's
shardings, inserts exactly the collectives the plan predicts for the MLP, and the sharded
programs compute what the one-device program computes. Plus the HLO reader on XLA's formats."""

from __future__ import annotations

import pandas as pd
import pytest

from autoshard.bench.hlo_collectives import count_collectives, replica_groups

pytestmark = pytest.mark.jax


def test_hlo_reader_maps_every_group_format_to_mesh_axes() -> None:
    hlo = "\n".join([
        "  %a = f32[4] all-reduce(f32[4] %x), replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%s",
        "  %b = f32[4] all-reduce(f32[4] %x), replica_groups=[4,2]<=[2,4]T(1,0), to_apply=%s",
        "  %c = f32[8] all-gather(f32[4] %x), replica_groups=[1,8]<=[8], dimensions={0}",
        "  %d = f32[8] all-reduce(%x), channel_id=1, replica_groups=mesh['axis_0'=1,'axis_1'=4,"
        "'axis_2'=2], device_ids=([2,4]T(1,0)) {'axis_1'}, use_global_device_ids=true",
        "  %e = f32[8] collective-permute(f32[8] %x), source_target_pairs={{0,4},{4,0}}",
    ])
    counts = count_collectives(hlo, ["dp", "tp"], [2, 4])
    assert counts == {("all-reduce", "tp"): 2, ("all-reduce", "dp"): 1,
                      ("all-gather", "dp,tp"): 1, ("collective-permute", "dp"): 1}
    assert replica_groups("replica_groups=[2,4]<=[8]") == [frozenset({0, 1, 2, 3}),
                                                           frozenset({4, 5, 6, 7})]


def test_quick_crosscheck_agrees_with_xla(tmp_path) -> None:
    from autoshard.bench.xla_crosscheck import run

    (path,) = run(tmp_path, quick=True)
    table = pd.read_csv(path, comment="#")
    assert set(table["case"]) == {"mlp-fwd-dp2xtp4", "mlp-grad-dp2xtp4", "gpt1-fwd-dp2xtp4"}
    mlp = table[table["model"] == "mlp"]
    assert mlp["match"].all() and (mlp["predicted"] > 0).all()
    assert (mlp["sharded_params"] != "0/4").all()          # tensor parallel, not replication
    assert (table["max_rel_err"] < 1e-5).all()
