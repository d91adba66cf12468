"""``opaque``: an op the importers could not map onto a registered kind.

Importing a real model must not fail on the one op nobody has described yet. Such an op is
kept, with its outputs' shapes and dtypes given in attrs, as an ``opaque`` op: every dim of
every operand is its own BLOCKED factor, so the only strategy the generic derivation can
produce is all-replicate (the op runs unsharded on every device, and the planner prices the
gathers that feed it). Nothing is assumed about what it computes: it has no NumPy reference
(a plan containing one cannot be emulated) and no VJP (autodiff refuses to differentiate
through it, naming it).

Attrs: ``target`` (the framework's name for the op, e.g. ``aten.cumsum.default``),
``out_shapes`` (one shape per output), ``out_dtypes`` (one dtype name per output), optional
``flops`` (the importer's estimate; 0 when unknown).
"""

from __future__ import annotations

from collections.abc import Sequence

from graphs.errors import AttrError, NotExecutableError
from graphs.ir import DType
from graphs.ops._common import signature_text
from graphs.ops.registry import Attrs, OpDef, Specs, TensorSpec, register_op
from graphs.signature import DimSignature, bind_signature


def _infer(ins: Specs, attrs: Attrs) -> Specs:
    shapes, dtypes = attrs["out_shapes"], attrs["out_dtypes"]
    if not isinstance(shapes, list | tuple) or not isinstance(dtypes, list | tuple) or any(
            not isinstance(s, list | tuple) or not all(isinstance(d, int) for d in s)
            for s in shapes):
        raise AttrError(f'opaque op "{attrs.get("target")}": out_shapes must be a list of '
                        "shapes (lists of ints) and out_dtypes a list of dtype names")
    if not shapes or len(shapes) != len(dtypes):
        raise AttrError(f'opaque op "{attrs.get("target")}": out_shapes and out_dtypes must '
                        f"list the same non-zero number of outputs, got {len(shapes)} and "
                        f"{len(dtypes)}")
    outs = []
    for shape, dtype in zip(shapes, dtypes, strict=True):
        try:
            parsed = DType.parse(str(dtype))
        except ValueError as error:
            raise AttrError(f'opaque op "{attrs.get("target")}": {error}') from None
        dims = tuple(int(d) for d in shape)
        if any(d < 0 for d in dims):
            raise AttrError(f'opaque op "{attrs.get("target")}": negative dim in {list(dims)}')
        outs.append(TensorSpec(dims, parsed))
    return tuple(outs)


def _signature(ins: Specs, outs: Specs, attrs: Attrs) -> DimSignature:
    names: list[list[str]] = []
    for i, spec in enumerate((*ins, *outs)):
        names.append([f"o{i}_{d}" for d in range(len(spec.shape))])
    factors = [f for operand in names for f in operand]
    text = signature_text(names[: len(ins)], names[len(ins):])
    return bind_signature(text, [t.shape for t in ins], [t.shape for t in outs],
                          blocked=factors)


def _flops(ins: Specs, outs: Specs, attrs: Attrs) -> float:
    return float(attrs.get("flops", 0.0))


def _no_reference(arrays: Sequence, attrs: Attrs) -> tuple:
    """Running an op nobody described would be a guess: refuse, naming it."""
    raise NotExecutableError(str(attrs.get("target")))


register_op(OpDef(kind="opaque", infer=_infer, signature=_signature, reference=_no_reference,
                  flops=_flops, num_inputs=None, num_outputs=None,
                  # nested lists: checked in _infer (the generic check knows list[int] only)
                  required_attrs={"target": str, "out_shapes": object, "out_dtypes": object},
                  optional_attrs={"flops": 0.0},
                  doc="An unmapped imported op: all-replicate only, no reference, no VJP."))
