"""The ``kernel`` hook names the GEMM or flash-attention call an op runs.

Oracles: the op's own FLOP count (an independent function: ``2·batch·m·n·k`` of the named
GEMM must equal it for every contracting two-operand einsum of the zoo models), hand-derived
(batch, m, n, k) for the layouts a transformer uses, and the q/k/v shapes of attention.
"""

from __future__ import annotations

import pytest

from graphs import AttentionShape, DType, GemmShape, TensorSpec, get_op, zoo
from graphs.ops.kernel_shape import einsum_gemm
from graphs.training import training_graph


@pytest.mark.parametrize("model", ["gpt2", "llama3-8b"])
def test_every_zoo_gemm_has_the_op_s_flops(model: str) -> None:
    graph = training_graph(zoo.build(model, layers=1, batch=2, seq=64))   # fwd + bwd GEMMs
    seen = 0
    for op in graph.ops:
        opdef = get_op(op.kind)
        if opdef.kernel is None:
            continue
        ins, outs = graph.specs(op)
        shape = opdef.kernel(ins, outs, {**opdef.optional_attrs, **op.attrs})
        if isinstance(shape, GemmShape):
            seen += 1
            assert 2 * shape.batch * shape.m * shape.n * shape.k == \
                opdef.flops(ins, outs, op.attrs), op.name
    assert seen >= 12   # forward, input-gradient and weight-gradient products


@pytest.mark.parametrize(("equation", "sizes", "expected"), [
    # x [b, s, h] @ w [h, f]: rows b·s, cols f, contraction h
    ("bsh,hf->bsf", {"b": 2, "s": 8, "h": 16, "f": 32}, GemmShape(m=16, n=32, k=16)),
    # the weight gradient x^T @ dy: rows h, cols f, contraction b·s
    ("bsh,bsf->hf", {"b": 2, "s": 8, "h": 16, "f": 32}, GemmShape(m=16, n=32, k=16)),
    # batched scores q @ k^T over (b, h)
    ("bhsd,bhtd->bhst", {"b": 2, "h": 4, "s": 8, "t": 6, "d": 16},
     GemmShape(m=8, n=6, k=16, batch=8)),
])
def test_einsum_gemm_matches_hand_derived_shapes(equation: str, sizes: dict[str, int],
                                                 expected: GemmShape) -> None:
    left, out = equation.split("->")
    assert einsum_gemm(tuple(left.split(",")), out, sizes) == expected


@pytest.mark.parametrize(("operands", "output"), [
    (("bsh",), "bs"),              # one operand: a reduction, not a GEMM
    (("i", "j"), "ij"),            # outer product: nothing contracted
    (("ik", "kj"), "j"),           # i summed away inside one operand
])
def test_einsums_that_are_not_one_gemm_name_none(operands, output) -> None:
    sizes = dict.fromkeys("ijkbsh", 3)
    assert einsum_gemm(operands, output, sizes) is None


def test_attention_hook_reads_q_k_v_and_marks_the_backward() -> None:
    q = TensorSpec((2, 128, 8, 64), DType.parse("bf16"))
    k = TensorSpec((2, 256, 2, 64), DType.parse("bf16"))
    v = TensorSpec((2, 256, 2, 32), DType.parse("bf16"))
    fwd = get_op("attention")
    outs = fwd.infer((q, k, v), {"causal": False})
    assert fwd.kernel((q, k, v), outs, {"causal": False}) == AttentionShape(
        batch=2, heads=8, seq_q=128, seq_k=256, head_dim=64, head_dim_v=32, causal=False)
    bwd = get_op("attention_bwd")
    dout = TensorSpec((2, 128, 8, 32), DType.parse("bf16"))
    shape = bwd.kernel((q, k, v, dout), (q, k, v), {"causal": True})
    assert shape.backward and shape.causal and shape.heads == 8 and shape.seq_k == 256
