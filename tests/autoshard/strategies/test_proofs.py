"""Every strategy of every op kind, executed: shard, run locally, reassemble, compare.

The oracle is the unsharded NumPy reference plus DTensor's layout semantics
(:mod:`autoshard.sharding.layout`, itself checked against DTensor's worked answers). Partial inputs
are split into random shares, so a strategy that treats a Partial as complete fails. Hand-written
rules (vocab-parallel embedding and loss, ring attention) run through
:func:`autoshard.strategies.hand_rules.run_local`, which makes their all-reduces explicit. Also:
the DTensor ``mm`` strategy list, its 2-D expansion, and the ``_StridedShard`` a flatten produces.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoshard.sharding.layout import shard_array, unshard_arrays
from autoshard.sharding.mesh import Mesh
from autoshard.strategies import hand_rules
from autoshard.strategies.derive import enumerate_strategies
from autoshard.verify.blocks import local_shape as held_shape
from graphs import DType, GraphError, TensorSpec, get_op, local_attrs
from tests.graphs.ops.test_local_shards import _IDS, CASES, Case, _arrays

MESHES = ("x=2", "x=2,y=2", "x=2,y=1,z=2", "x=2,y=2,z=2")
PER_CASE_3D = 48   # strategies executed per case on 3-D meshes (every k-th, deterministic)
Z = {"a": 4, "b": 4, "c": 4, "d": 2, "e": 4}


def _setup(case: Case) -> tuple:
    opdef = get_op(case.kind)
    attrs = {**opdef.optional_attrs, **case.attrs(Z)}
    specs = tuple(TensorSpec(shape, dtype) for shape, dtype in case.specs(Z))
    outs = opdef.infer(specs, attrs)
    arrays = _arrays(case, list(specs), np.random.default_rng(7), attrs, Z)
    return opdef, attrs, specs, outs, arrays


def _run(kind, opdef, attrs, specs, outs, arrays, strategy, mesh) -> list[np.ndarray]:
    """The reassembled outputs of one strategy on the emulated mesh."""
    coords = mesh.all_coords()
    local = {c: [shard_array(a, s, c, seed=i)
                 for i, (a, s) in enumerate(zip(arrays, strategy.inputs, strict=True))]
             for c in coords}
    hand_axes = [a for a, name in enumerate(strategy.per_axis) if name.endswith("*")]
    if hand_axes:
        factor = strategy.per_axis[hand_axes[0]].removesuffix("*")
        results = hand_rules.run_local(kind, factor, hand_axes, mesh.axis_sizes, specs, attrs,
                                       local)
    else:
        results = {}
        for c in coords:
            local_in = tuple(TensorSpec(x.shape, spec.dtype)
                             for x, spec in zip(local[c], specs, strict=True))
            local_out = tuple(TensorSpec(held_shape(s, o.shape, c), o.dtype)
                              for s, o in zip(strategy.outputs, outs, strict=True))
            results[c] = opdef.reference(local[c], local_attrs(opdef, attrs, local_in,
                                                               local_out))
    return [unshard_arrays({c: results[c][j] for c in coords}, sharding, out.shape)
            for j, (sharding, out) in enumerate(zip(strategy.outputs, outs, strict=True))]


@pytest.mark.parametrize("mesh_text", MESHES)
@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_every_strategy_computes_the_unsharded_result(case: Case, mesh_text: str) -> None:
    mesh = Mesh.parse(mesh_text)
    opdef, attrs, specs, outs, arrays = _setup(case)
    want = opdef.reference(arrays, attrs)
    strategies = enumerate_strategies(case.kind, specs, outs, attrs, mesh,
                                      include_strided=mesh.ndim == 1)
    assert strategies, case.kind
    if mesh.ndim == 3 and len(strategies) > PER_CASE_3D:
        step = -(-len(strategies) // PER_CASE_3D)
        strategies = strategies[::step]
    for strategy in strategies:
        got = _run(case.kind, opdef, attrs, specs, outs, arrays, strategy, mesh)
        for j, (g, w) in enumerate(zip(got, want, strict=True)):
            # f32 outputs (cast, the loss) round each Partial share separately.
            tol = 1e-6 if outs[j].dtype is DType.F64 else 2e-5
            np.testing.assert_allclose(
                g, np.asarray(w, dtype=np.float64), rtol=tol, atol=tol * 1e-3,
                err_msg=f"{case.kind} on {mesh_text}: strategy {strategy.label}, output {j}")


def _short(strategy) -> tuple[str, str]:
    def one(shardings) -> str:
        return ", ".join("".join(str(p) for p in s.placements) for s in shardings)
    return one(strategy.inputs), one(strategy.outputs)


F32 = DType.F32
MM = ((TensorSpec((8, 8), F32), TensorSpec((8, 8), F32)), (TensorSpec((8, 8), F32),),
      {"equation": "ij,jk->ik"})


def test_mm_on_one_axis_is_dtensors_list() -> None:
    """DTensor's mm rule (reference 000): S(0),R→S(0); R,S(1)→S(1); S(1),S(0)→P(sum);
    R,R→R; plus Partial pass-through P,R→P and R,P→P (mm is linear in each operand)."""
    ins, outs, attrs = MM
    got = {_short(s) for s in enumerate_strategies("einsum", ins, outs, attrs, Mesh.parse("x=4"))}
    assert got == {("R, R", "R"), ("S(0), R", "S(0)"), ("R, S(1)", "S(1)"),
                   ("S(1), S(0)", "P(sum)"), ("P(sum), R", "P(sum)"), ("R, P(sum)", "P(sum)")}


def test_mm_on_two_axes_is_the_full_expansion() -> None:
    """Counted by hand: each of the two axes independently takes one of the 6 single-axis
    choices (R, i, j, k, P{0}, P{1}); 8 divides by 2·2 so no combination is dropped, and any
    two different choice pairs differ in some placement: 6 × 6 = 36 distinct strategies.
    (Mixed Partial choices are sound: Σx Σy A_x B_y = (Σ A_x)(Σ B_y).)"""
    ins, outs, attrs = MM
    strategies = enumerate_strategies("einsum", ins, outs, attrs, Mesh.parse("x=2,y=2"))
    assert len(strategies) == 36
    assert len({(s.inputs, s.outputs) for s in strategies}) == 36
    assert _short(strategies[0]) == ("RR, RR", "RR")


def test_indivisible_factor_is_dropped_and_size_one_axes_add_nothing() -> None:
    ins = (TensorSpec((6, 8), F32), TensorSpec((8, 8), F32))
    outs = (TensorSpec((6, 8), F32),)
    labels = {s.label for s in enumerate_strategies("einsum", ins, outs, MM[2],
                                                    Mesh.parse("x=4"))}
    assert "x:i" not in labels and "x:j" in labels      # 6 rows do not split in 4
    one = enumerate_strategies("einsum", *MM[:2], MM[2], Mesh.parse("x=4"))
    padded = enumerate_strategies("einsum", *MM[:2], MM[2], Mesh.parse("x=4,y=1"))
    assert len(one) == len(padded)


def test_softmax_dim_is_never_sharded() -> None:
    spec = TensorSpec((4, 8), F32)
    for s in enumerate_strategies("softmax", (spec,), (spec,), {"dim": 1}, Mesh.parse("x=2,y=2")):
        assert all("S(1)" not in str(p) for p in s.outputs[0].placements)


@pytest.mark.parametrize(("b", "s", "n"), [(4, 6, 2), (3, 8, 4), (2, 4, 2)])
def test_flatten_of_sharded_minor_dim_is_strided_shard(b: int, s: int, n: int) -> None:
    """DTensor's view rule (DTensor _ops/_view_ops.py, upstream test_view_ops): flattening (b, s)
    with s sharded gives _StridedShard(0, split_factor=b); with b sharded it stays Shard(0)."""
    ins, outs = (TensorSpec((b, s), F32),), (TensorSpec((b * s,), F32),)
    strategies = enumerate_strategies("reshape", ins, outs, {"shape": [b * s]},
                                      Mesh.parse(f"x={n}"), include_strided=True)
    by_input = {str(st.inputs[0].placements[0]): str(st.outputs[0].placements[0])
                for st in strategies}
    assert by_input["S(1)"] == f"_S(0,{b})"
    if b % n == 0:
        assert by_input["S(0)"] == "S(0)"
    planner = enumerate_strategies("reshape", ins, outs, {"shape": [b * s]}, Mesh.parse(f"x={n}"))
    assert all(not st.outputs[0].is_view_strided for st in planner)


def test_unflatten_round_trips_the_strided_layout() -> None:
    """(b·s) → (b, s): the _StridedShard(0, b) input lands back on S(1)."""
    b, s = 4, 6
    ins, outs = (TensorSpec((b * s,), F32),), (TensorSpec((b, s), F32),)
    strategies = enumerate_strategies("reshape", ins, outs, {"shape": [b, s]},
                                      Mesh.parse("x=2"), include_strided=True)
    pairs = {(str(st.inputs[0].placements[0]), str(st.outputs[0].placements[0]))
             for st in strategies}
    assert (f"_S(0,{b})", "S(1)") in pairs and ("S(0)", "S(0)") in pairs


def test_transpose_moves_the_shard_dim() -> None:
    ins, outs = (TensorSpec((4, 6, 8), F32),), (TensorSpec((8, 4, 6), F32),)
    strategies = enumerate_strategies("transpose", ins, outs, {"perm": [2, 0, 1]},
                                      Mesh.parse("x=2"))
    moved = {str(s.inputs[0].placements[0]): str(s.outputs[0].placements[0])
             for s in strategies}
    assert moved["S(0)"] == "S(1)" and moved["S(1)"] == "S(2)" and moved["S(2)"] == "S(0)"


def test_enumeration_is_deterministic_and_cache_independent() -> None:
    ins, outs, attrs = MM
    mesh = Mesh.parse("x=2,y=2,z=2")
    first = enumerate_strategies("einsum", ins, outs, attrs, mesh)
    enumerate_strategies.cache_clear()
    again = enumerate_strategies("einsum", ins, outs, attrs, mesh)
    assert first == again
    assert [s.label for s in first] == [s.label for s in again]
    assert list(itertools.islice((s.label for s in first), 1)) == ["R"]


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(CASES) - 1),
       sizes=st.fixed_dictionaries({k: st.sampled_from((1, 2, 3, 4, 6)) for k in "abcde"}),
       mesh_text=st.sampled_from(("x=2", "x=3", "x=4", "x=2,y=2", "x=2,y=3", "x=2,y=2,z=2")),
       pick=st.integers(0, 2**16))
def test_random_shapes_and_meshes(index: int, sizes: dict, mesh_text: str, pick: int) -> None:
    """The same proof over random factor sizes (divisible or not) and meshes, on a few
    strategies per example chosen by hypothesis."""
    case, mesh = CASES[index], Mesh.parse(mesh_text)
    typed = _typed(case, sizes)
    if typed is None:
        return  # a size the op rejects (e.g. an empty slice); not a sharding question
    opdef, attrs, specs, outs = typed
    arrays = _arrays(case, list(specs), np.random.default_rng(pick), attrs, sizes)
    want = opdef.reference(arrays, attrs)
    strategies = enumerate_strategies(case.kind, specs, outs, attrs, mesh,
                                      include_strided=mesh.ndim == 1)
    for k in range(3):
        strategy = strategies[(pick + 7919 * k) % len(strategies)]
        got = _run(case.kind, opdef, attrs, specs, outs, arrays, strategy, mesh)
        _assert_unsharded(got, want, outs, f"{case.kind} {sizes} on {mesh_text}: "
                                           f"{strategy.label}")


def _typed(case: Case, sizes: dict[str, int]):
    """The op, its attrs, input specs and inferred outputs at ``sizes``; ``None`` when the op
    rejects those sizes."""
    opdef = get_op(case.kind)
    attrs = {**opdef.optional_attrs, **case.attrs(sizes)}
    specs = tuple(TensorSpec(shape, dtype) for shape, dtype in case.specs(sizes))
    try:
        return opdef, attrs, specs, opdef.infer(specs, attrs)
    except GraphError:
        return None


def _assert_unsharded(got, want, outs, where: str) -> None:
    """Each sharded output equals the unsharded reference (f64 to 1e-6, else 2e-5)."""
    for j, (g, w) in enumerate(zip(got, want, strict=True)):
        tol = 1e-6 if outs[j].dtype is DType.F64 else 2e-5
        np.testing.assert_allclose(g, np.asarray(w, dtype=np.float64), rtol=tol,
                                   atol=tol * 1e-3, err_msg=f"{where}, output {j}")


UNEVEN = {"a": 5, "b": 7, "c": 3, "d": 2, "e": 5}   # no size but d divides by 3 or 4
UNEVEN_WIDE = {**UNEVEN, "c": 11}
"""c (the vocab of embedding and cross_entropy) 11: torch.chunk splits it unevenly but with no
empty piece over 2 or 3 devices and over the 2-D meshes in either axis order (11 → 6, 5 → 3,
3 and 3, 2 on x=2,y=2; 11 → 4, 4, 3 → 2, 2 | 2, 2 | 2, 1 on x=3,y=2), so the vocab-parallel
rules are run on pieces whose offsets are not a multiple of one piece size."""


@pytest.mark.parametrize("sizes", (UNEVEN, UNEVEN_WIDE), ids=("c3", "c11"))
@pytest.mark.parametrize("mesh_text", ("x=3", "x=4", "x=2,y=3", "x=3,y=2", "x=2,y=2"))
@pytest.mark.parametrize("case", CASES, ids=_IDS)
def test_uneven_strategies_compute_the_unsharded_result(case: Case, mesh_text: str,
                                                        sizes: dict[str, int]) -> None:
    """``allow_uneven`` strategies (``torch.chunk`` pieces, the last short) are proven like
    the even ones: ring attention on unequal blocks, vocab-parallel rules on unequal vocab
    pieces (split by one axis or by two in turn), and no mean over unequal pieces."""
    mesh = Mesh.parse(mesh_text)
    typed = _typed(case, sizes)
    if typed is None:
        return  # a size the op rejects; not a sharding question
    opdef, attrs, specs, outs = typed
    arrays = _arrays(case, list(specs), np.random.default_rng(11), attrs, sizes)
    want = opdef.reference(arrays, attrs)
    uneven = [s for s in enumerate_strategies(case.kind, specs, outs, attrs, mesh,
                                              allow_uneven=True)
              if not all(t.is_divisible(spec.shape)
                         for t, spec in zip((*s.inputs, *s.outputs), (*specs, *outs),
                                            strict=True))]
    for strategy in uneven:
        got = _run(case.kind, opdef, attrs, specs, outs, arrays, strategy, mesh)
        _assert_unsharded(got, want, outs, f"{case.kind} on {mesh_text}: {strategy.label}")
