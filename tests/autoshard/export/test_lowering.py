"""Explicit reshards lowered to Shardy collectives, against Shardy's own test answers
(tests/data/known-answers.json) and against an independent interpreter of Shardy's collective
semantics (Shardy docs/sdy_dialect.md and reshard_to_collectives.cc), written here from their
definitions, not from the lowering code.

``sdy_reshard_to_collectives``: Shardy's ``CollectiveInserter`` is a fixed greedy order (slice,
permute, all-to-all, gather); ``find_reshard`` is a cheapest path under our alpha-beta prices,
and its states carry whole mesh axes only. Every case is in exactly one table below:
``SAME`` (our lowering prints Shardy's exact ops), ``FUSED`` (the same ops, but Shardy fuses
per-dim slices/gathers into one op), ``CHEAPER`` (a different path that is valid and costs no
more than Shardy's own sequence priced by our model), ``NO_MOVE`` (Shardy uses a step our
search has no move for), ``SUB_AXES`` (endpoints need sub-axes, which our shardings lack),
``TOO_SLOW`` (listed, not run: the search takes ~45 s on that 64-device mesh).

A property test replays the lowering of random reshards (meshes of ≤ 8 devices, Partial
sources and targets) through the same interpreter.
"""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoshard.export.lowering import lower_reshard, sharding_text
from autoshard.reshard.convert import state_of
from autoshard.reshard.find import find_reshard
from autoshard.reshard.search import Pricer
from autoshard.reshard.state import moves_from
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.tensor_sharding import TensorSharding
from graphs import DType, TensorSpec
from tests.support import KNOWN_ANSWERS
from tests.support.alpha_beta import alpha_beta_preset

# the documented differences are argued from alpha-beta prices (Thakur et al. 2005)
TOPOLOGY = alpha_beta_preset("dgx-h100")
HBM_BW = float(TOPOLOGY.device.hbm_bw_bytes_per_s)


def _cases(kind: str) -> dict[str, dict]:
    cases = [c for c in json.loads(KNOWN_ANSWERS.read_text()) if c["kind"] == kind]
    named = {}
    for case in cases:
        match = re.search(r"func @(\w+)", case["source"])
        named[match[1] if match else "docs_example"] = case
    return named


RESHARD_CASES = _cases("sdy_reshard_to_collectives")
INSERT_CASES = _cases("sdy_insert_explicit_reshards")

SAME = (
    "reshard_from_sharded_to_fully_replicated_same_meshes", "all_gather_single_axis",
    "all_gather_multiple_axes", "all_slice_minor_axis", "all_to_all_single_axis",
    "all_to_all_move_partial_axes_from_src_dim_to_non_empty_tgt_dim",
    "two_all_to_alls_same_tgt_dim_reverse_order", "replace_same_size_axes_same_dim",
    "replace_major_most_axis_in_dim", "replace_major_most_axis_then_all_gather",
    "replace_same_size_axes_diff_dims", "docs_example",
)
FUSED = ("all_slice_multiple_axes",)
# Equal after fusing too (slice w,u on dim 2, slice v on dim 3, gather x, gather y,z), but
# find_reshard needs ~45 s for a 4-D tensor on this 64-device 6-axis mesh, too long for the
# suite: the case is listed here and not run.
TOO_SLOW = ("replace_multiple_axes_diff_dims",)
CHEAPER = (
    "all_to_all_multiple_axes", "two_all_to_alls_different_tgt_dims",
    "two_all_to_alls_same_tgt_dim_non_contiguous", "slice_then_all_to_alls",
    "slice_on_src_dim_then_all_to_all_multiple_axes", "cannot_slice_on_src_dim_size_non_divisible",
    "out_unreduced_axes_preserved",
)
NO_MOVE = ("cannot_slice_on_src_dim_output_sharded",)  # a 3-axis rotation in one permute
SUB_AXES = (
    "all_gather_with_subaxis", "all_to_all_subaxis_then_all_gather",
    "slice_on_src_dim_then_all_to_all", "replace_smaller_axis_with_bigger_same_dim",
    "replace_bigger_axis_with_smaller_same_dim",
)


# ---- an interpreter of Shardy's collectives on per-dim axis lists (its op definitions) -----
# An axis is (name, pre, size): a whole axis "x" of size n is (x, 1, n), a sub-axis
# "x":(pre)size is itself. Before an op, axes are cut at every sub-axis boundary the op or its
# declared result names; after it, neighbouring pieces of one axis merge back.
_AXIS = re.compile(r'"(\w+)"(?::\((\d+)\)(\d+))?')
Piece = tuple[str, int, int]


def _axes(text: str, sizes: dict[str, int]) -> list[Piece]:
    return [(m[1], int(m[2]), int(m[3])) if m[2] else (m[1], 1, sizes[m[1]])
            for m in _AXIS.finditer(text)]


def _parse_state(text: str, sizes: dict[str, int]) -> tuple:
    match = re.fullmatch(r"\[(.*)\](?:, unreduced=\{(.*)\})?", text.strip())
    assert match is not None, text
    dims = tuple(tuple(_axes(d, sizes)) for d in re.findall(r"\{([^}]*)\}", match[1]))
    return _merge(dims), frozenset(_axes(match[2] or "", sizes))


def _cut(pieces: list[Piece], cuts: dict[str, set[int]]) -> list[Piece]:
    out = []
    for name, pre, size in pieces:
        bounds = sorted({pre, pre * size} | {c for c in cuts.get(name, ()) if
                                              pre < c < pre * size})
        out.extend((name, a, b // a) for a, b in itertools.pairwise(bounds))
    return out


def _merge(dims: tuple) -> tuple:
    merged = []
    for pieces in dims:
        out: list[Piece] = []
        for piece in pieces:
            if out and out[-1][0] == piece[0] and out[-1][1] * out[-1][2] == piece[1]:
                out[-1] = (piece[0], out[-1][1], out[-1][2] * piece[2])
            else:
                out.append(piece)
        merged.append(tuple(out))
    return tuple(merged)


def _apply(state: tuple, op: str, sizes: dict[str, int]) -> tuple:
    """The sharding Shardy's op `op` leaves, checked against the one the op text declares."""
    match = re.fullmatch(r"sdy\.(\w+)(?: (.*?))? -> (.*)", op)
    assert match is not None, op
    name, params, declared = match[1], match[2] or "", _parse_state(match[3], sizes)
    cuts: dict[str, set[int]] = {}
    for axis, pre, size in _axes(params + match[3], sizes):
        cuts.setdefault(axis, set()).update({pre, pre * size})
    dims = [_cut(list(d), cuts) for d in state[0]]
    unreduced = set(state[1])
    if name in ("all_gather", "all_slice", "reduce_scatter"):
        per_dim = [_axes(d, sizes) for d in re.findall(r"\{([^}]*)\}", params)]
        for d, axes in enumerate(per_dim):
            if name == "all_gather":
                assert dims[d][len(dims[d]) - len(axes):] == axes, (op, state)
                dims[d] = dims[d][: len(dims[d]) - len(axes)]
            else:
                dims[d] += axes
            if name == "reduce_scatter":
                assert set(axes) <= unreduced, (op, state)
                unreduced -= set(axes)
    elif name == "all_to_all":
        for axes_text, s, t in re.findall(r"\{([^}]*)\}: (\d+)->(\d+)", params):
            axes, s, t = _axes(axes_text, sizes), int(s), int(t)
            assert dims[s][len(dims[s]) - len(axes):] == axes, (op, state)
            dims[s] = dims[s][: len(dims[s]) - len(axes)]
            dims[t] += axes
    elif name in ("all_reduce", "replicated_to_unreduced"):
        axes = set(_axes(params, sizes))
        if name == "all_reduce":
            assert axes <= unreduced, (op, state)
            unreduced -= axes
        else:
            assert not axes & ({a for d in dims for a in d} | unreduced), (op, state)
            unreduced |= axes
    elif name == "collective_permute":
        before = [math.prod(p[2] for p in d) for d in dims]
        after = [math.prod(p[2] for p in d) for d in declared[0]]
        assert before == after and declared[1] == unreduced, (op, state)
        dims = [list(d) for d in declared[0]]
    else:
        raise AssertionError(f"unknown Shardy op {op}")
    result = (_merge(tuple(tuple(d) for d in dims)), frozenset(unreduced))
    assert result == declared, (op, state, result)
    return result


def _mesh_sizes(text: str) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(r'"(\w+)"\s*=\s*(\d+)', text)}


def _run(ops: list[str], start: str, sizes: dict[str, int]) -> tuple:
    state = _parse_state(start, sizes)
    for op in ops:
        state = _apply(state, op, sizes)
    return state


# ---- helpers -----------------------------------------------------------------------------
def _setup(case: dict) -> tuple[Mesh, tuple[int, ...], TensorSharding, TensorSharding]:
    inputs = case["input"]
    mesh = Mesh(axes=tuple(_mesh_sizes(inputs["mesh"]).items()))
    shape = tuple(int(n) for n in re.match(r"tensor<([\dx]+)x[a-z]", inputs["tensor"])[1]
                  .split("x"))
    return mesh, shape, _sharding(mesh, inputs["from"]), _sharding(mesh, inputs["to"])


def _sharding(mesh: Mesh, text: str) -> TensorSharding:
    dims, unreduced = _parse_state(text, dict(mesh.axes))
    names = [[name for name, _, _ in pieces] for pieces in dims]
    return TensorSharding.from_dim_axes(mesh, names, [(a, "sum") for a, _, _ in
                                                      sorted(unreduced)])


def _ours(case: dict) -> tuple[list[str], float, Mesh, tuple[int, ...]]:
    mesh, shape, src, dst = _setup(case)
    links = MeshLinks.build(mesh, TOPOLOGY)
    reshard = find_reshard(src, dst, shape, 4, links, HBM_BW)
    return [c.shardy for c in lower_reshard(reshard)], reshard.seconds, mesh, shape


def _fuse(ops: list[str]) -> list[str]:
    """Merge consecutive all_slice (or all_gather) ops on different dims into one op."""
    out: list[str] = []
    for op in ops:
        kind, params, result = re.fullmatch(r"(sdy\.\w+) (\[.*?\]) -> (.*)", op).groups()
        if out and out[-1].startswith(kind) and kind in ("sdy.all_slice", "sdy.all_gather"):
            previous = re.findall(r"\{([^}]*)\}", re.fullmatch(r"\S+ (\[.*?\]) -> .*",
                                                                out[-1])[1])
            mine = re.findall(r"\{([^}]*)\}", params)
            if all(not a or not b for a, b in zip(previous, mine, strict=True)):
                merged = ", ".join("{" + (a or b) + "}" for a, b in zip(previous, mine,
                                                                         strict=True))
                out[-1] = f"{kind} [{merged}] -> {result}"
                continue
        out.append(op)
    return out


def _price_of_shardy(case: dict) -> float:
    """Shardy's expected sequence priced by our model: each op must be one of our moves."""
    mesh, shape, src, _ = _setup(case)
    links = MeshLinks.build(mesh, TOPOLOGY)
    pricer = Pricer(links=links, axis_names=mesh.axis_names, device_hbm_bw=HBM_BW)
    sizes = tuple(mesh.axis_sizes)
    state = state_of(src)
    allowed = state[1]
    total = 0.0
    for op in case["expected"]["collectives"]:
        target = state_of(_sharding(mesh, op.split(" -> ", 1)[1]))
        kind = "collective_permute" if "permute" in op else op.split()[0][4:]
        moves = [m for m in moves_from(state, sizes, shape, allowed)
                 if m.after == target and m.kind == kind]
        assert moves, f"{op}: not a single move of ours"
        total += min(pricer.seconds(m.kind, m.axes, math.prod(shape) * 4 / m.bytes_divisor)
                     for m in moves)
        state = target
    return total


# ---- tests -------------------------------------------------------------------------------
def test_every_case_is_classified_once() -> None:
    tables = (*SAME, *FUSED, *CHEAPER, *NO_MOVE, *SUB_AXES, *TOO_SLOW)
    assert sorted(tables) == sorted(RESHARD_CASES)
    assert len(tables) == len(set(tables)) == 27


@pytest.mark.parametrize("name", sorted(RESHARD_CASES))
def test_interpreter_replays_shardy_answers(name: str) -> None:
    """The oracle itself: every upstream sequence is valid and ends at the target."""
    case = RESHARD_CASES[name]
    sizes = _mesh_sizes(case["input"]["mesh"])
    end = _run(case["expected"]["collectives"], case["input"]["from"], sizes)
    assert end == _parse_state(case["input"]["to"], sizes)


@pytest.mark.parametrize("name", SAME)
def test_lowering_equals_shardy(name: str) -> None:
    case = RESHARD_CASES[name]
    assert _ours(case)[0] == case["expected"]["collectives"]


@pytest.mark.parametrize("name", FUSED)
def test_lowering_equals_shardy_after_fusing_dims(name: str) -> None:
    case = RESHARD_CASES[name]
    ours = _ours(case)[0]
    assert ours != case["expected"]["collectives"]
    assert _fuse(ours) == case["expected"]["collectives"]


@pytest.mark.parametrize("name", CHEAPER + FUSED + NO_MOVE)
def test_different_lowering_is_valid(name: str) -> None:
    case = RESHARD_CASES[name]
    ours = _ours(case)[0]
    sizes = _mesh_sizes(case["input"]["mesh"])
    assert ours != case["expected"]["collectives"]
    assert _run(ours, case["input"]["from"], sizes) == _parse_state(case["input"]["to"], sizes)


@pytest.mark.parametrize("name", CHEAPER)
def test_different_lowering_is_not_dearer_than_shardys(name: str) -> None:
    case = RESHARD_CASES[name]
    assert _ours(case)[1] <= _price_of_shardy(case) * (1 + 1e-12)


@pytest.mark.parametrize("name", NO_MOVE)
def test_shardy_step_outside_our_moves(name: str) -> None:
    with pytest.raises(AssertionError, match="not a single move"):
        _price_of_shardy(RESHARD_CASES[name])


@pytest.mark.parametrize("name", SUB_AXES)
def test_sub_axis_cases_are_outside_our_shardings(name: str) -> None:
    case = RESHARD_CASES[name]
    texts = (case["input"]["from"], case["input"]["to"])
    assert any(re.search(r":\(\d+\)\d+", t) for t in texts) or any(
        ":(" in op for op in case["expected"]["collectives"])


# ---- insert-explicit-reshards: Shardy's chosen dot strategy in our terms ---------------------
# case: ((lhs, rhs, result) of the dot after Shardy's reshards,
#        [(src, dst, shape, the collective our lowering must print)])
LHS, RESULT = (8, 32), (8, 16)
PENDING_X = '[{"x"}, {}], unreduced={"y"}'
INSERT_TABLE = {
    "dot_compatible_contracting_dim_sharded": (
        ('[{"x"}, {"y"}]', '[{"y"}, {}]', PENDING_X),
        [(PENDING_X, '[{"x"}, {}]', RESULT, 'sdy.all_reduce {"y"} -> [{"x"}, {}]')],
    ),
    "dot_contracting_dim_and_result_dim_sharded_same_axis": (
        ('[{"x"}, {"y"}]', '[{"y"}, {}]', PENDING_X),
        # all_reduce + all_slice canonicalize to a reduce_scatter (the case's own note)
        [(PENDING_X, '[{"x"}, {"y"}]', RESULT,
          'sdy.reduce_scatter [{}, {"y"}] -> [{"x"}, {"y"}]')],
    ),
    "dot_incompatible_lhs_contracting_and_rhs_non_contracting_dims": (
        ('[{"x"}, {}]', '[{}, {"y"}]', '[{"x"}, {"y"}]'),
        [('[{"x"}, {"y"}]', '[{"x"}, {}]', LHS, 'sdy.all_gather [{}, {"y"}] -> [{"x"}, {}]')],
    ),
    "dot_incompatible_same_non_contracting_dims_out_empty": (
        ('[{}, {"y"}]', '[{"y"}, {"x"}]', '[{}, {"x"}], unreduced={"y"}'),
        [('[{"x"}, {"y"}]', '[{}, {"y"}]', LHS, 'sdy.all_gather [{"x"}, {}] -> [{}, {"y"}]'),
         ('[{}, {"x"}], unreduced={"y"}', '[{}, {"x"}]', RESULT,
          'sdy.all_reduce {"y"} -> [{}, {"x"}]'),
         ('[{}, {"x"}]', '[{}, {}]', RESULT, 'sdy.all_gather [{}, {"x"}] -> [{}, {}]')],
    ),
    "dot_compatible_contracting_dim_empty": (
        ('[{"x"}, {}]', '[{}, {"y"}]', '[{"x"}, {"y"}]'),
        [],
    ),
    "docs_example": (
        ('[{"x"}, {"y"}]', '[{"y"}, {}]', PENDING_X),
        [('[{"y"}, {"x"}]', '[{"y"}, {}]', (32, 16),
          'sdy.all_gather [{}, {"x"}] -> [{"y"}, {}]'),
         (PENDING_X, '[{"x"}, {}]', RESULT, 'sdy.all_reduce {"y"} -> [{"x"}, {}]')],
    ),
}


def _dot_strategies(mesh: Mesh) -> set[tuple[str, ...]]:
    """Our einsum strategies of ``bsi,io->bso`` with the unit batch dim unsharded, written
    as the 2-D dot's Shardy texts."""
    from autoshard.strategies.derive import enumerate_strategies

    specs = [TensorSpec((1, 8, 32), DType.F32), TensorSpec((32, 16), DType.F32)]
    out = [TensorSpec((1, 8, 16), DType.F32)]
    found = set()
    for strat in enumerate_strategies("einsum", specs, out, {"equation": "bsi,io->bso"}, mesh):
        lhs, rhs, res = (*strat.inputs, strat.outputs[0])
        if lhs.dim_axes[0] or res.dim_axes[0]:
            continue
        found.add(tuple(sharding_text(t).replace("[{}, ", "[", 1) if t.ndim == 3
                        else sharding_text(t) for t in (lhs, rhs, res)))
    return found


@pytest.mark.parametrize("name", sorted(INSERT_TABLE))
def test_insert_explicit_reshards_cases(name: str) -> None:
    """Shardy's chosen dot strategy is one of ours, and each explicit reshard (and the
    reduction of the sharded contraction) lowers to the collective Shardy inserts."""
    case = INSERT_CASES[name]
    (lhs, rhs, result), reshards = INSERT_TABLE[name]
    mesh = Mesh(axes=tuple(_mesh_sizes(case["input"]["mesh"]).items()))
    links = MeshLinks.build(mesh, TOPOLOGY)
    assert (lhs, rhs, result) in _dot_strategies(mesh)
    given = (case["input"]["lhs"], case["input"]["rhs"], case["input"]["result"])
    expected = " ".join(case["expected"])
    assert result.split(", unreduced")[0] in expected
    for src, dst, shape, collective in reshards:
        assert src in given or src in (result, result.split(", unreduced")[0])
        assert dst in given or dst in expected
        if "all_reduce" in collective:  # the docs example says it in words
            assert collective in case["expected"] or 'all_reduce over "y"' in expected
        reshard = find_reshard(_sharding(mesh, src), _sharding(mesh, dst), shape, 4, links,
                               HBM_BW)
        assert [c.shardy for c in lower_reshard(reshard)] == [collective]


# ---- property: every lowered reshard replays under Shardy's semantics -------------------------
@st.composite
def reshard_cases(draw: st.DrawFn) -> tuple[Mesh, tuple[int, ...], TensorSharding,
                                              TensorSharding]:
    """A mesh (1–3 axes, ≤ 8 devices), a shape divisible by every axis, two shardings."""
    count = draw(st.integers(1, 3))
    sizes = [draw(st.sampled_from((2, 4) if count == 1 else (2,))) for _ in range(count)]
    mesh = Mesh(axes=tuple(zip("xyz", sizes, strict=False)))
    ndim = draw(st.integers(1, 3))
    shape = tuple(16 for _ in range(ndim))
    return mesh, shape, draw(_layouts(mesh, ndim)), draw(_layouts(mesh, ndim))


@st.composite
def _layouts(draw: st.DrawFn, mesh: Mesh, ndim: int) -> TensorSharding:
    order = draw(st.permutations(mesh.axis_names))
    slots = [draw(st.integers(-2, ndim - 1)) for _ in order]  # -1 replicated, -2 pending sum
    dims = [[a for a, s in zip(order, slots, strict=True) if s == d] for d in range(ndim)]
    partial = [(a, "sum") for a, s in zip(order, slots, strict=True) if s == -2]
    return TensorSharding.from_dim_axes(mesh, dims, sorted(partial))


@settings(max_examples=150, deadline=None)
@given(reshard_cases())
def test_lowered_reshards_replay_in_shardy_semantics(case: tuple) -> None:
    mesh, shape, src, dst = case
    links = MeshLinks.build(mesh, TOPOLOGY)
    reshard = find_reshard(src, dst, shape, 4, links, HBM_BW)
    lowered = lower_reshard(reshard)
    assert [(c.kind, c.axes) for c in lowered] == [
        (c.kind, c.axes) for c in reshard.collectives]
    sizes = dict(mesh.axes)
    end = _run([c.shardy for c in lowered], sharding_text(src), sizes)
    assert end == _parse_state(sharding_text(dst), sizes)
