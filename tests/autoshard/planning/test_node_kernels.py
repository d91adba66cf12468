"""Node costs price each strategy's *local* GEMM with the device's kernel model.

Oracles: the local (m, n, k) of ``x [b, s, h] @ w [h, f]`` derived by hand from each
strategy's local shapes (rows b·s, cols f, contraction h), priced by the costmodel on its own;
a device without kernel parameters gives exactly the flat roofline of ``compute_seconds``; and
the guide's tile quantisation seen through the planner: a tensor-parallel split that leaves a
local width below one tile costs more per FLOP than one that does not.
"""

from __future__ import annotations

import dataclasses

import pytest

from autoshard.planning.node_costs import local_specs, node_terms, op_strategies
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from costmodel import Gemm, KernelParams, compute_seconds, get_preset, kernel_seconds
from graphs import OpGraph

H100 = get_preset("dgx-h100")


def _projection(b: int, s: int, h: int, f: int) -> tuple[OpGraph, object]:
    graph = OpGraph()
    x = graph.input("x", (b, s, h), "bf16")
    w = graph.param("w", (h, f), "bf16")
    graph.mark_output(graph.op("einsum", [x, w], name="proj", equation="bsh,hf->bsf"))
    return graph, graph.op_by_name("proj")


def _terms(graph: OpGraph, op, mesh: Mesh, topology):
    strategies = op_strategies(graph, op, mesh, allow_uneven=False)
    return strategies, node_terms(graph, op, strategies, mesh, topology,
                                  MeshLinks.build(mesh, topology))


def test_every_strategy_is_priced_as_its_local_gemm() -> None:
    graph, op = _projection(b=4, s=512, h=1024, f=4096)
    mesh = Mesh.parse("dp=2,tp=4")
    strategies, terms = _terms(graph, op, mesh, H100)
    ins, outs = graph.specs(op)
    assert len(strategies) > 3
    for k, strat in enumerate(strategies):
        (x, w), (y,) = local_specs(ins, strat.inputs), local_specs(outs, strat.outputs)
        b, s, h = x.shape
        gemm = Gemm(m=b * s, n=w.shape[1], k=h)
        assert y.shape == (b, s, w.shape[1])
        nbytes = float(x.nbytes + w.nbytes + y.nbytes)    # bf16 operands and result
        assert terms.compute[k] == pytest.approx(
            kernel_seconds(gemm, float(gemm.flops), nbytes, "bf16", H100.device), rel=1e-12)


def test_a_device_without_kernel_parameters_prices_the_flat_roofline() -> None:
    graph, op = _projection(b=2, s=256, h=512, f=2048)
    flat = dataclasses.replace(H100, device=dataclasses.replace(H100.device, kernels=None))
    _, terms = _terms(graph, op, Mesh.parse("tp=4"), flat)
    flops = terms.flops
    nbytes = [float(sum(v[k] for v in (*terms.in_bytes, *terms.out_bytes)))
              for k in range(len(flops))]
    for k in range(len(flops)):
        assert terms.compute[k] == compute_seconds(flops[k], nbytes[k], "bf16", flat.device)


def test_a_local_width_below_the_tile_costs_more_per_flop() -> None:
    """f = 512 over tp = 8 leaves 64 columns per device, half a 128-wide tile (the guide's
    tile quantisation): splitting f costs more per FLOP than splitting the rows."""
    params = KernelParams(sm_count=132, gemm_tile=(128, 128), gemm_efficiency=0.8)
    device = dataclasses.replace(H100.device, kernels=params, hbm_bw_bytes_per_s=1e18)
    topology = dataclasses.replace(H100, device=device)
    graph, op = _projection(b=8, s=4096, h=4096, f=512)
    strategies, terms = _terms(graph, op, Mesh.parse("tp=8"), topology)
    rate = {s.label: terms.flops[k] / terms.compute[k] for k, s in enumerate(strategies)}
    by_rows = next(v for label, v in rate.items() if label in ("tp:b", "tp:s"))
    by_cols = rate["tp:f"]
    assert by_cols == pytest.approx(by_rows / 2, rel=0.02)
