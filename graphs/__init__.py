"""graphs: the operator-graph IR (ops, tensors, dimension signatures, JSON I/O, model zoo).

Knows nothing about meshes or sharding; ``autoshard`` derives strategies from the signatures.
"""

from graphs import zoo
from graphs.errors import (
    AttrError,
    GraphError,
    NotExecutableError,
    SchemaError,
    ShapeError,
    StructureError,
    UnknownOpError,
)
from graphs.io import dump, dumps, load, loads
from graphs.ir import DType, Op, Tensor, TensorRole
from graphs.opgraph import OpGraph
from graphs.ops.kernel_shape import AttentionShape, GemmShape
from graphs.ops.registry import OpDef, TensorSpec, get_op, local_attrs, op_kinds, register_op
from graphs.signature import DimSignature, FactorKind, bind_signature, parse_signature

__all__ = [
    "AttentionShape",
    "AttrError",
    "DType",
    "DimSignature",
    "FactorKind",
    "GemmShape",
    "GraphError",
    "NotExecutableError",
    "Op",
    "OpDef",
    "OpGraph",
    "SchemaError",
    "ShapeError",
    "StructureError",
    "Tensor",
    "TensorRole",
    "TensorSpec",
    "UnknownOpError",
    "bind_signature",
    "dump",
    "dumps",
    "get_op",
    "load",
    "loads",
    "local_attrs",
    "op_kinds",
    "parse_signature",
    "register_op",
    "zoo",
]
