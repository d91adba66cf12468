"""Each op kind's NumPy reference against an independent computation (loops, closed forms,
complex numbers, repeated heads), never against the reference itself."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphs import TensorSpec, get_op
from graphs.ir import DType

RNG = np.random.default_rng(0)


def run(kind: str, arrays: list[np.ndarray], **attrs: object) -> tuple[np.ndarray, ...]:
    opdef = get_op(kind)
    return opdef.reference(arrays, {**opdef.optional_attrs, **attrs})


def test_einsum_matches_explicit_loops() -> None:
    x, w = RNG.normal(size=(2, 3, 4)), RNG.normal(size=(4, 5))
    (got,) = run("einsum", [x, w], equation="bsh,hf->bsf")
    want = np.zeros((2, 3, 5))
    for b in range(2):
        for s in range(3):
            for f in range(5):
                want[b, s, f] = sum(x[b, s, h] * w[h, f] for h in range(4))
    np.testing.assert_allclose(got, want)


def test_einsum_batched_matches_matmul() -> None:
    a, b = RNG.normal(size=(3, 2, 4)), RNG.normal(size=(3, 4, 6))
    (got,) = run("einsum", [a, b], equation="bij,bjk->bik")
    np.testing.assert_allclose(got, np.matmul(a, b))


@pytest.mark.parametrize(("kind", "formula"), [
    ("neg", lambda x: -x),
    ("exp", lambda x: np.array([[math.exp(v) for v in row] for row in x])),
    ("tanh", lambda x: np.array([[math.tanh(v) for v in row] for row in x])),
    ("relu", lambda x: np.array([[v if v > 0 else 0.0 for v in row] for row in x])),
    ("sigmoid", lambda x: np.array([[1 / (1 + math.exp(-v)) for v in row] for row in x])),
    ("silu", lambda x: np.array([[v / (1 + math.exp(-v)) for v in row] for row in x])),
    ("gelu", lambda x: np.array([[0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi)
                                                           * (v + 0.044715 * v**3)))
                                  for v in row] for row in x])),
], ids=["neg", "exp", "tanh", "relu", "sigmoid", "silu", "gelu-tanh"])
def test_unary_against_scalar_math(kind: str, formula) -> None:
    x = RNG.normal(size=(3, 4))
    np.testing.assert_allclose(run(kind, [x])[0], formula(x), rtol=1e-12)


def test_gelu_tanh_close_to_erf_gelu() -> None:
    x = np.linspace(-3, 3, 13)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    np.testing.assert_allclose(run("gelu", [x])[0], exact, atol=1e-3)
    np.testing.assert_allclose(run("gelu_erf", [x])[0], exact, rtol=1e-14, atol=1e-15)


def test_gelu_erf_is_x_times_the_normal_cdf() -> None:
    """Φ from the standard library's normal distribution, not from erf."""
    from statistics import NormalDist

    x = RNG.normal(size=(3, 4))
    want = np.array([[v * NormalDist().cdf(v) for v in row] for row in x])
    np.testing.assert_allclose(run("gelu_erf", [x])[0], want, rtol=1e-12)


def test_log_and_binary_broadcasting() -> None:
    x = RNG.uniform(1, 2, size=(2, 1, 3))
    y = RNG.uniform(1, 2, size=(4, 3))
    np.testing.assert_allclose(run("log", [x])[0], np.vectorize(math.log)(x))
    for kind, op in (("add", float.__add__), ("sub", float.__sub__), ("mul", float.__mul__),
                     ("div", float.__truediv__)):
        (got,) = run(kind, [x, y])
        assert got.shape == (2, 4, 3)
        for i, j, k in np.ndindex(2, 4, 3):
            assert got[i, j, k] == pytest.approx(op(float(x[i, 0, k]), float(y[j, k])))


def test_cast_scale_where() -> None:
    x = np.array([1.5, -2.25])
    assert run("cast", [x], dtype="f32")[0].dtype == np.float32
    assert run("cast", [x], dtype="int32")[0].tolist() == [1, -2]
    assert run("scale", [x], factor=2.0)[0].tolist() == [3.0, -4.5]
    cond = np.array([[True], [False]])
    got = run("where", [cond, np.array([1.0, 2.0]), np.array([[5.0, 6.0], [7.0, 8.0]])])[0]
    assert got.tolist() == [[1.0, 2.0], [7.0, 8.0]]


def test_reductions_by_hand() -> None:
    x = np.arange(24, dtype=float).reshape(2, 3, 4)
    assert run("sum", [x], dims=[0, 2])[0].tolist() == [
        sum(x[i, j, k] for i in range(2) for k in range(4)) for j in range(3)]
    assert run("mean", [x], dims=[1], keepdim=True)[0].shape == (2, 1, 4)
    assert run("mean", [x], dims=[1])[0][1, 2] == (x[1, 0, 2] + x[1, 1, 2] + x[1, 2, 2]) / 3
    assert run("max", [x], dims=[-1])[0].tolist() == [[3, 7, 11], [15, 19, 23]]


def test_softmax_rows_sum_to_one_and_match_formula() -> None:
    x = RNG.normal(size=(3, 5)) * 10
    (p,) = run("softmax", [x], dim=0)
    np.testing.assert_allclose(p.sum(axis=0), 1.0)
    for j in range(5):
        column = [math.exp(v) for v in x[:, j]]
        np.testing.assert_allclose(p[:, j], np.array(column) / sum(column))
    (logp,) = run("log_softmax", [x])
    for i in range(3):
        lse = math.log(sum(math.exp(v) for v in x[i]))
        np.testing.assert_allclose(logp[i], x[i] - lse, atol=1e-12)


def test_layer_norm_and_rms_norm_by_formula() -> None:
    x, w, b = RNG.normal(size=(2, 6)), RNG.normal(size=6), RNG.normal(size=6)
    (ln,) = run("layer_norm", [x, w, b], eps=1e-5)
    (ln_no_bias,) = run("layer_norm", [x, w])
    (rms,) = run("rms_norm", [x, w], eps=1e-6)
    for i in range(2):
        row = list(x[i])
        mu = sum(row) / 6
        var = sum((v - mu) ** 2 for v in row) / 6
        want = [(v - mu) / math.sqrt(var + 1e-5) * w[k] + b[k] for k, v in enumerate(row)]
        np.testing.assert_allclose(ln[i], want)
        np.testing.assert_allclose(ln_no_bias[i], np.array(want) - b)
        ms = sum(v * v for v in row) / 6
        np.testing.assert_allclose(rms[i], [v / math.sqrt(ms + 1e-6) * w[k]
                                            for k, v in enumerate(row)])


def test_embedding_is_row_lookup() -> None:
    table = RNG.normal(size=(7, 3))
    ids = np.array([[0, 6], [3, 3]])
    (got,) = run("embedding", [ids, table])
    for i, j in np.ndindex(2, 2):
        np.testing.assert_array_equal(got[i, j], table[ids[i, j]])


def test_cross_entropy_by_log_sum_exp() -> None:
    logits = RNG.normal(size=(2, 3, 5))
    targets = RNG.integers(0, 5, size=(2, 3))
    (loss,) = run("cross_entropy", [logits, targets])
    terms = [math.log(sum(math.exp(v) for v in logits[i, j])) - logits[i, j, targets[i, j]]
             for i, j in np.ndindex(2, 3)]
    assert loss.shape == () and loss.dtype == np.float32
    assert float(loss) == pytest.approx(sum(terms) / 6, rel=1e-6)


def test_shape_ops() -> None:
    x = np.arange(24).reshape(2, 3, 4)
    assert run("reshape", [x], shape=[6, 4])[0].tolist() == x.reshape(6, 4).tolist()
    assert run("transpose", [x], perm=[2, 0, 1])[0][3, 1, 2] == x[1, 2, 3]
    parts = run("split", [x], dim=2, sizes=[1, 3])
    assert [p.shape for p in parts] == [(2, 3, 1), (2, 3, 3)]
    assert run("concat", list(parts), dim=-1)[0].tolist() == x.tolist()
    assert run("slice", [x], dim=1, start=1, stop=3)[0].tolist() == x[:, 1:3].tolist()


def test_rotary_matches_complex_rotation() -> None:
    b, s, n, d = 2, 5, 3, 8
    x = RNG.normal(size=(b, s, n, d))
    theta = RNG.uniform(0, 2 * math.pi, size=(s, d // 2))
    (got,) = run("rotary", [x, np.cos(theta), np.sin(theta)])
    # rotate-half pairs component i with i + d/2: z = x1 + i·x2, rotated by e^{iθ}
    z = (x[..., : d // 2] + 1j * x[..., d // 2:]) * np.exp(1j * theta)[None, :, None, :]
    np.testing.assert_allclose(got, np.concatenate([z.real, z.imag], axis=-1))


def naive_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool,
                    scale: float) -> np.ndarray:
    b, s, h, _ = q.shape
    t = k.shape[1]
    out = np.zeros((b, s, h, v.shape[3]))
    for bi, hi, i in np.ndindex(b, h, s):
        scores = [float(q[bi, i, hi] @ k[bi, j, hi]) * scale for j in range(t)]
        allowed = [j for j in range(t) if not causal or j <= i + t - s]
        m = max(scores[j] for j in allowed)
        weights = {j: math.exp(scores[j] - m) for j in allowed}
        total = sum(weights.values())
        out[bi, i, hi] = sum(weights[j] / total * v[bi, j, hi] for j in allowed)
    return out


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_attention_matches_naive(causal: bool) -> None:
    q, k, v = (RNG.normal(size=(2, 4, 3, 5)) for _ in range(3))
    (got,) = run("attention", [q, k, v], causal=causal)
    np.testing.assert_allclose(got, naive_attention(q, k, v, causal, 1 / math.sqrt(5)))


def test_grouped_query_attention_equals_repeated_heads() -> None:
    q = RNG.normal(size=(1, 4, 6, 4))
    k, v = RNG.normal(size=(1, 6, 2, 4)), RNG.normal(size=(1, 6, 2, 3))
    (got,) = run("attention", [q, k, v], causal=True, scale=0.5)
    repeated_k, repeated_v = np.repeat(k, 3, axis=2), np.repeat(v, 3, axis=2)
    np.testing.assert_allclose(got, naive_attention(q, repeated_k, repeated_v, True, 0.5))


def test_flops_and_bytes_closed_forms() -> None:
    f32 = DType.F32
    x, w = TensorSpec((8, 16, 32), f32), TensorSpec((32, 64), f32)
    einsum = get_op("einsum")
    out = einsum.infer((x, w), {"equation": "bsh,hf->bsf"})
    assert einsum.flops((x, w), out, {"equation": "bsh,hf->bsf"}) == 2 * 8 * 16 * 32 * 64
    vectors = (TensorSpec((3,), f32), TensorSpec((5,), f32))
    outer = einsum.infer(vectors, {"equation": "a,b->ab"})
    assert einsum.flops(vectors, outer, {"equation": "a,b->ab"}) == 15
    assert einsum.bytes_moved((x, w), out, {}) == 4 * (8 * 16 * 32 + 32 * 64 + 8 * 16 * 64)
    q, k = TensorSpec((2, 128, 8, 64), f32), TensorSpec((2, 128, 2, 64), f32)
    attention = get_op("attention")
    out = attention.infer((q, k, k), {"causal": True})
    assert attention.flops((q, k, k), out, {}) == 4 * 2 * 128 * 128 * 8 * 64
    # flash attention: q, k, v and the output only, no 128×128 score tensor
    assert attention.bytes_moved((q, k, k), out, {}) == 4 * (2 * 2 * 128 * 8 * 64
                                                             + 2 * 2 * 128 * 2 * 64)
    assert get_op("param").flops((), (w,), {}) == 0
    with pytest.raises(AssertionError):
        get_op("input").reference([], {})


@pytest.mark.parametrize(("exponent", "formula"), [
    (2.0, lambda v: v * v), (3.0, lambda v: v * v * v), (-0.5, lambda v: 1 / math.sqrt(v)),
    (0.5, math.sqrt), (-1.0, lambda v: 1 / v),
], ids=["square", "cube", "rsqrt", "sqrt", "reciprocal"])
def test_pow_against_scalar_math(exponent: float, formula) -> None:
    x = RNG.uniform(0.5, 2.0, size=(3, 4))
    np.testing.assert_allclose(run("pow", [x], exponent=exponent)[0],
                               np.vectorize(formula)(x), rtol=1e-12)


def test_shift_adds_and_keeps_integer_dtype() -> None:
    assert run("shift", [np.array([1.5, -2.0])], offset=1.0)[0].tolist() == [2.5, -1.0]
    ids = np.array([3, 4], dtype=np.int64)
    got = run("shift", [ids], offset=-1.0)[0]
    assert got.dtype == np.int64 and got.tolist() == [2, 3]


def test_compare_gives_bool_masks_with_broadcasting() -> None:
    from graphs import get_op

    rows, cols = np.arange(3)[:, None], np.arange(3)[None, :]
    (mask,) = get_op("compare").reference([rows, cols], {"op": "ge"})
    assert mask.dtype == np.bool_
    assert mask.tolist() == np.tril(np.ones((3, 3), bool)).tolist()
