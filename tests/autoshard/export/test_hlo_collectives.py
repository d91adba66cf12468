"""Reading collectives and their mesh axes out of XLA's HLO text, in every format XLA writes
device groups in (known answers worked out by hand in the module docstring's convention)."""

from __future__ import annotations

from autoshard.export.hlo_collectives import count_collectives, replica_groups


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


def test_tuple_all_to_all_counts_once() -> None:
    """XLA's CPU pipeline writes an all-to-all of one array as an all-to-all of a tuple of its
    pieces (copied from the compiled HLO of a 4-way all-to-all under jax.shard_map)."""
    hlo = ("  %all-to-all = (f32[1,4]{1,0}, f32[1,4]{1,0}, f32[1,4]{1,0}, f32[1,4]{1,0}) "
           "all-to-all(%wrapped_slice, %wrapped_slice.1, %wrapped_slice.2, %wrapped_slice.3), "
           "channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, metadata={op_name=\"x\"}\n"
           "  %get-tuple-element = f32[1,4]{1,0} get-tuple-element(%all-to-all), index=0")
    assert count_collectives(hlo, ["dp", "tp"], [2, 4]) == {("all-to-all", "tp"): 1}
