"""``autoshard.graph/v1`` documents: the JSON object a graph is exchanged as, checked per field.

Promises: an exact round trip (``to_dict(from_dict(d)) == d`` for every valid document, and
re-saving a loaded file gives the same bytes: insertion order is kept, ``indent=1``, a final
newline); every schema fault names its JSON path (``ops[3].inputs[1]: tensor "h7" is not
defined``); malformed JSON names line and column. Explicit checks, no schema library.

Document layout::

    {"format": "autoshard.graph/v1", "name": "mlp",
     "tensors": {"x": {"shape": [8, 16], "dtype": "f32", "role": "input"}, ...},
     "ops": [{"name": "x", "kind": "input", "inputs": [], "outputs": ["x"],
              "attrs": {"shape": [8, 16], "dtype": "f32"}}, ...],
     "outputs": ["y"]}

A tensor may add ``"grad_of": "<param>"`` (gradients and optimizer state).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphs.errors import SchemaError
from graphs.ir import DType, Op, Tensor, TensorRole

FORMAT = "autoshard.graph/v1"
_TOP_KEYS = ("format", "name", "tensors", "ops", "outputs")
_TENSOR_KEYS = ("shape", "dtype", "role", "grad_of")
_OP_KEYS = ("name", "kind", "inputs", "outputs", "attrs")


@dataclass(frozen=True, slots=True)
class GraphRecords:
    """A document's contents as records: schema-checked, not yet built into a graph."""

    name: str
    tensors: tuple[Tensor, ...]
    ops: tuple[Op, ...]
    outputs: tuple[str, ...]


def _plain(value: Any) -> Any:
    """Frozen attr values (tuples, mapping proxies) → JSON values."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def document_of(name: str, tensors: Sequence[Tensor], ops: Sequence[Op],
                outputs: Sequence[str]) -> dict[str, Any]:
    """The ``autoshard.graph/v1`` document of these records, in their order."""
    entries: dict[str, Any] = {}
    for tensor in tensors:
        entry: dict[str, Any] = {"shape": list(tensor.shape), "dtype": tensor.dtype.value,
                                 "role": tensor.role.value}
        if tensor.grad_of is not None:
            entry["grad_of"] = tensor.grad_of
        entries[tensor.name] = entry
    op_entries = [{"name": op.name, "kind": op.kind, "inputs": list(op.inputs),
                   "outputs": list(op.outputs), "attrs": _plain(op.attrs)} for op in ops]
    return {"format": FORMAT, "name": name, "tensors": entries, "ops": op_entries,
            "outputs": list(outputs)}


def document_text(document: Mapping[str, Any]) -> str:
    """The file bytes of a document: ``indent=1``, insertion order kept, a final newline."""
    return json.dumps(document, indent=1) + "\n"


def records_of(document: Any) -> GraphRecords:
    """Check a document's schema (errors name the JSON path) and read its records."""
    _check_top(document)
    tensors = tuple(_tensor(name, entry) for name, entry in document["tensors"].items())
    names = set(document["tensors"])
    ops = tuple(_op(index, entry, names) for index, entry in enumerate(document["ops"]))
    for index, name in enumerate(document["outputs"]):
        _need(isinstance(name, str) and name in names, f"outputs[{index}]",
              f'tensor "{name}" is not defined')
    return GraphRecords(name=document["name"], tensors=tensors, ops=ops,
                        outputs=tuple(document["outputs"]))


def _need(condition: bool, path: str, message: str) -> None:
    if not condition:
        raise SchemaError(path, message)


def _check_keys(entry: Any, path: str, required: tuple[str, ...],
                allowed: tuple[str, ...]) -> None:
    _need(isinstance(entry, dict), path, f"expected an object, got {type(entry).__name__}")
    for key in required:
        _need(key in entry, path, f'missing key "{key}"')
    for key in entry:
        _need(key in allowed, f"{path}.{key}", f'unknown key; allowed: {", ".join(allowed)}')


def _check_top(document: Any) -> None:
    _check_keys(document, "$", _TOP_KEYS, _TOP_KEYS)
    _need(document["format"] == FORMAT, "format",
          f'unsupported format "{document["format"]}"; expected "{FORMAT}"')
    _need(isinstance(document["name"], str), "name", "expected a string")
    _need(isinstance(document["tensors"], dict), "tensors", "expected an object")
    _need(isinstance(document["ops"], list), "ops", "expected a list")
    _need(isinstance(document["outputs"], list), "outputs", "expected a list")


def _tensor(name: str, entry: Any) -> Tensor:
    path = f"tensors.{name}"
    _check_keys(entry, path, ("shape", "dtype", "role"), _TENSOR_KEYS)
    shape = entry["shape"]
    _need(isinstance(shape, list) and all(_is_int(d) and d >= 0 for d in shape),
          f"{path}.shape", f"expected a list of non-negative ints, got {shape!r}")
    dtype = entry["dtype"]
    _need(isinstance(dtype, str) and dtype in {d.value for d in DType}, f"{path}.dtype",
          f'unknown dtype "{dtype}"; choose one of {", ".join(d.value for d in DType)}')
    role = entry["role"]
    _need(isinstance(role, str) and role in {r.value for r in TensorRole}, f"{path}.role",
          f'unknown role "{role}"; choose one of {", ".join(r.value for r in TensorRole)}')
    grad_of = entry.get("grad_of")
    _need(grad_of is None or isinstance(grad_of, str), f"{path}.grad_of", "expected a string")
    return Tensor(name=name, shape=tuple(shape), dtype=DType(dtype), role=TensorRole(role),
                  grad_of=grad_of)


def _op(index: int, entry: Any, tensor_names: set[str]) -> Op:
    path = f"ops[{index}]"
    _check_keys(entry, path, _OP_KEYS, _OP_KEYS)
    for key in ("name", "kind"):
        _need(isinstance(entry[key], str), f"{path}.{key}", "expected a string")
    for key in ("inputs", "outputs"):
        names = entry[key]
        _need(isinstance(names, list), f"{path}.{key}", "expected a list of tensor names")
        for position, name in enumerate(names):
            _need(isinstance(name, str) and name in tensor_names, f"{path}.{key}[{position}]",
                  f'tensor "{name}" is not defined')
    _need(isinstance(entry["attrs"], dict), f"{path}.attrs", "expected an object")
    return Op(name=entry["name"], kind=entry["kind"], inputs=tuple(entry["inputs"]),
              outputs=tuple(entry["outputs"]), attrs=entry["attrs"])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
