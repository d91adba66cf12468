"""Which attention strategies the planner keeps: ring attention only from
:data:`MIN_RING_BLOCK`-token query blocks, measured on uneven (``--allow-uneven``) layouts by
their largest block, as every other uneven shard is priced.

Oracle: the block sizes by hand (``torch.chunk``: ceil(seq / ring) tokens on the first ranks).
"""

from __future__ import annotations

import pytest

from autoshard.planning.node_costs import MIN_RING_BLOCK, op_strategies
from autoshard.sharding.mesh import Mesh
from graphs import OpGraph


def _attention_labels(seq: int, mesh: str) -> list[str]:
    graph = OpGraph()
    q, k, v = (graph.input(name, (1, seq, 4, 64), "bf16") for name in "qkv")
    graph.mark_output(graph.op("attention", [q, k, v], name="core", causal=True))
    strategies = op_strategies(graph, graph.op_by_name("core"), Mesh.parse(mesh),
                               allow_uneven=True)
    return [s.label for s in strategies]


@pytest.mark.parametrize("mesh", ["cp=3", "dp=2,cp=3"])
def test_uneven_ring_blocks_are_measured_by_their_largest_block(mesh: str) -> None:
    shortest_kept = 3 * MIN_RING_BLOCK - 2          # blocks of MIN_RING_BLOCK, … , - 2
    assert "cp:s*" in _attention_labels(shortest_kept, mesh)
    longest_dropped = 3 * (MIN_RING_BLOCK - 1) - 1   # largest block MIN_RING_BLOCK - 1
    assert "cp:s*" not in _attention_labels(longest_dropped, mesh)


def test_a_short_uneven_sequence_plans_without_a_ring() -> None:
    labels = _attention_labels(1024, "cp=3")      # 1024 = 342 + 341 + 341
    assert labels and not any("s*" in label for label in labels)
