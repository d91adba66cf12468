"""The backward-only op kinds keep the registry's local-shard promise.

Same two oracles as for the forward kinds, applied to the kinds autodiff added: (1) for every
non-blocked factor of each signature, references run on pieces reassemble (parallel) or
combine with the factor's reduction (contracted) to the unsharded result
(``test_graphs_shards._check_factor``); (2) every strategy ``autoshard`` derives is executed
on emulated 1-D and 2-D meshes, Partial inputs split into random shares
(``test_autoshard_strategy_proofs._run``). Inputs with a meaning (the max for ``max_bwd``,
ids below the vocab size) are generated consistently.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from autoshard.sharding.mesh import Mesh
from autoshard.strategies.derive import enumerate_strategies
from graphs import DType, TensorSpec, get_op
from tests.autoshard.strategies.test_proofs import _run
from tests.graphs.ops.test_local_shards import _check_factor

Z = {"a": 4, "b": 4, "c": 4, "d": 2, "e": 4}
F, INT = DType.F64, DType.INT64
Sizes = dict[str, int]


@dataclass(frozen=True)
class Case:
    """``ints[i]`` is the exclusive bound of int input i; ``fix`` rewrites generated arrays
    that must be consistent (the forward max fed to ``max_bwd``)."""

    kind: str
    specs: Callable[[Sizes], list[tuple[tuple[int, ...], DType]]]
    attrs: Callable[[Sizes], dict[str, Any]] = lambda z: {}
    ints: Callable[[Sizes], dict[int, int]] = lambda z: {}
    fix: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None
    id: str = field(default="")


def _pair(z: Sizes) -> list[tuple[tuple[int, ...], DType]]:
    return [((z["a"], z["b"]), F), ((z["a"], z["b"]), F)]


def _max_inputs(arrays: list[np.ndarray]) -> list[np.ndarray]:
    x, _, dy = arrays
    return [x, x.max(axis=1), dy]


def _attention(z: Sizes, t: str) -> list[tuple[tuple[int, ...], DType]]:
    q = (z["a"], z["b"], z["c"] * z["d"], 4)
    out = (z["a"], z["b"], z["c"] * z["d"], 3)
    return [(q, F), ((z["a"], z[t], z["c"], 4), F), ((z["a"], z[t], z["c"], 3), F),
            (out, F)]


CASES = [
    *[Case(kind, _pair) for kind in ("gelu_bwd", "gelu_erf_bwd", "silu_bwd", "relu_bwd",
                                     "sigmoid_bwd", "tanh_bwd")],
    Case("pad", lambda z: [((z["a"], z["b"]), F)], lambda z: {"dim": 1, "before": 1, "after": 2}),
    Case("broadcast_to", lambda z: [((z["a"], z["c"]), F)],
         lambda z: {"shape": [z["a"], z["b"], z["c"]], "dims": [1]}, id="insert"),
    Case("broadcast_to", lambda z: [((z["a"], 1), F)],
         lambda z: {"shape": [z["a"], z["b"]], "dims": [1]}, id="keepdim"),
    Case("max_bwd", lambda z: [((z["a"], z["b"]), F), ((z["a"],), F), ((z["a"],), F)],
         lambda z: {"dims": [1]}, fix=_max_inputs),
    Case("softmax_bwd", lambda z: [((z["a"], z["b"], z["c"]), F)] * 2, lambda z: {"dim": 1}),
    Case("log_softmax_bwd", _pair),
    *[Case(f"{norm}_bwd_x", lambda z: [((z["a"], z["b"], z["c"]), F), ((z["c"],), F),
                                       ((z["a"], z["b"], z["c"]), F)])
      for norm in ("layer_norm", "rms_norm")],
    *[Case(f"{norm}_bwd_w", lambda z: [((z["a"], z["b"], z["c"]), F)] * 2)
      for norm in ("layer_norm", "rms_norm")],
    Case("cross_entropy_bwd",
         lambda z: [((z["a"], z["b"], z["c"]), F), ((z["a"], z["b"]), INT), ((), F)],
         lambda z: {"count": z["a"] * z["b"]}, ints=lambda z: {1: z["c"]}),
    Case("embedding_bwd", lambda z: [((z["a"], z["b"]), INT), ((z["a"], z["b"], z["d"]), F)],
         lambda z: {"vocab": z["c"]}, ints=lambda z: {0: z["c"]}),
    Case("attention_bwd", lambda z: _attention(z, "e"), lambda z: {"causal": False},
         id="cross"),
    Case("attention_bwd", lambda z: _attention(z, "b"), lambda z: {"causal": True, "scale": 0.3},
         id="causal"),
]
_IDS = [f"{c.kind}-{c.id or i}" for i, c in enumerate(CASES)]
BACKWARD_KINDS = {
    "gelu_bwd", "gelu_erf_bwd", "silu_bwd", "relu_bwd", "sigmoid_bwd", "tanh_bwd", "pad",
    "broadcast_to",
    "max_bwd", "softmax_bwd", "log_softmax_bwd", "layer_norm_bwd_x", "layer_norm_bwd_w",
    "rms_norm_bwd_x", "rms_norm_bwd_w", "cross_entropy_bwd", "embedding_bwd", "attention_bwd",
}


def _setup(case: Case, z: Sizes, seed: int) -> tuple:
    opdef = get_op(case.kind)
    attrs = {**opdef.optional_attrs, **case.attrs(z)}
    specs = tuple(TensorSpec(shape, dtype) for shape, dtype in case.specs(z))
    outs = opdef.infer(specs, attrs)
    rng, bounds = np.random.default_rng(seed), case.ints(z)
    arrays = [rng.integers(0, bounds[i], size=s.shape) if s.dtype is INT
              else rng.normal(size=s.shape) for i, s in enumerate(specs)]
    if case.fix is not None:
        arrays = case.fix(arrays)
    return opdef, attrs, specs, outs, arrays


def test_cases_cover_every_backward_kind() -> None:
    assert {case.kind for case in CASES} == BACKWARD_KINDS


@pytest.mark.parametrize("z", [Z, {"a": 6, "b": 3, "c": 6, "d": 3, "e": 2}], ids=["even", "odd"])
@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_reference_agrees_with_signature_on_local_shards(case: Case, z: Sizes) -> None:
    opdef, attrs, specs, outs, arrays = _setup(case, z, 3)
    sig = opdef.signature(specs, outs, attrs)
    outputs = opdef.reference(arrays, attrs)
    assert [o.shape for o in outputs] == [o.shape for o in outs]
    checked = 0
    for factor in sig.shardable:
        for pieces in (2, 3):
            if sig.size(factor) % pieces == 0:
                _check_factor(opdef, sig, list(arrays), outputs, attrs, factor, pieces)
                checked += 1
    assert checked > 0


@pytest.mark.parametrize("mesh_text", ["x=2", "x=2,y=2"])
@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_every_strategy_computes_the_unsharded_result(case: Case, mesh_text: str) -> None:
    mesh = Mesh.parse(mesh_text)
    opdef, attrs, specs, outs, arrays = _setup(case, Z, 7)
    want = opdef.reference(arrays, attrs)
    strategies = enumerate_strategies(case.kind, specs, outs, attrs, mesh,
                                      include_strided=mesh.ndim == 1)
    assert len(strategies) > 1, case.kind
    for strategy in strategies:
        got = _run(case.kind, opdef, attrs, specs, outs, arrays, strategy, mesh)
        for j, (g, w) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12,
                                       err_msg=f"{case.kind} on {mesh_text}: {strategy.label}, "
                                               f"output {j}")


def test_weight_gradients_come_out_partial_under_data_parallel() -> None:
    """The norm weight and embedding table gradients contract the batch factors: sharding
    the batch on an axis leaves them Partial(sum), the data-parallel gradient layout."""
    for case in CASES:
        if case.kind not in ("layer_norm_bwd_w", "rms_norm_bwd_w", "embedding_bwd"):
            continue
        _, attrs, specs, outs, _ = _setup(case, Z, 0)
        labels = {s.label: str(s.outputs[0].placements[0])
                  for s in enumerate_strategies(case.kind, specs, outs, attrs,
                                                Mesh.parse("dp=2"))}
        assert labels["dp:d0"] == "P(sum)"
