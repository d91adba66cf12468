"""The lowering context of the torch importer: fx nodes in, named graph ops out.

It owns the naming rule and the node → tensor map, so the per-aten handlers
(:mod:`graphs.importers.torch_aten`) only say which kinds to emit. Naming rule: an op is
named after the innermost module that ran it (``node.meta["nn_module_stack"]``) plus a short
suffix, ``model.layers.3.self_attn.q_proj/linear``; a second op with the same name in that
module gets ``linear_1``, ``linear_2`` … (never a dotted integer, which the planner reads as a
layer index); ops outside every module fall back to the fx node name. Helper ops one aten op
needs (a bias ``add``, a layout ``transpose``) extend its name: ``…/linear.bias``. Names depend
only on the traced program, so the same model gives the same names.

Static values (computed from buffers and literals only, no input or parameter behind them:
position ids, rotary tables, causal masks) are not lowered where they are computed: the first
time a lowered op reads one, it becomes a graph ``input`` named ``<module>/const_<suffix>``.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from graphs.importers.errors import TraceError
from graphs.ir import DType
from graphs.opgraph import OpGraph

logger = logging.getLogger(__name__)

_DTYPES = {
    "float32": DType.F32, "float64": DType.F64, "bfloat16": DType.BF16, "float16": DType.F16,
    "float8_e4m3fn": DType.F8E4M3, "float8_e5m2": DType.F8E5M2, "int32": DType.INT32,
    "int64": DType.INT64, "bool": DType.BOOL,
}
_SUFFIX = re.compile(r"[^A-Za-z0-9_]+")


class Unmapped(Exception):
    """Raised by a handler: this node cannot be expressed with registered kinds (a
    control-flow signal that makes the node opaque, never seen by users)."""


def dtype_of(torch_dtype: Any, where: str) -> DType:
    """``torch.float32`` → ``DType.F32``; TraceError naming ``where`` for other dtypes."""
    key = str(torch_dtype).removeprefix("torch.")
    if key not in _DTYPES:
        known = ", ".join(sorted(_DTYPES))
        raise TraceError(f'{where}: dtype {key} has no autoshard equivalent (known: {known})')
    return _DTYPES[key]


def short_target(target: Any) -> str:
    """``aten.addmm.default`` → ``addmm``; ``operator.getitem`` → ``getitem``."""
    text = str(target)
    if text.startswith("aten."):
        text = text.split(".")[1]
    else:
        text = getattr(target, "__name__", text)
    return _SUFFIX.sub("_", text).strip("_") or "op"


def module_path(node: Any) -> str:
    """Qualified name of the innermost module that ran ``node`` ("" when none)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return str(path)


class Lowering:
    """State of one import: the graph being built, fx node → graph tensor(s), used names."""

    def __init__(self, graph: OpGraph, static: Any) -> None:
        self.graph = graph
        self.static = static
        self.values: dict[str, Any] = {}
        self._taken: Counter[str] = Counter()
        self._used: set[str] = set()
        self.unmapped: Counter[str] = Counter()

    # ------------------------------------------------------------------ names
    def base_name(self, node: Any, suffix: str | None = None) -> str:
        """A fresh ``<module>/<suffix>`` name for ``node`` (see the module docstring)."""
        path = module_path(node)
        suffix = suffix or short_target(node.target)
        base = f"{path}/{suffix}" if path else node.name
        count = self._taken[base]
        name = base if count == 0 else f"{base}_{count}"
        while name in self._used or name in self.graph.tensors:
            count += 1
            name = f"{base}_{count}"
        self._taken[base] = count + 1
        self._used.add(name)
        return name

    # ----------------------------------------------------------------- values
    def tensor(self, arg: Any) -> str:
        """The graph tensor of an fx node argument, materialising static values as inputs."""
        if arg.name in self.values:
            value = self.values[arg.name]
            if isinstance(value, str):
                return value
            raise TraceError(f'fx node "{arg.name}" has several outputs; expected one tensor')
        if self.static.is_static(arg):
            name = self.base_name(arg, "const_" + short_target(arg.target))
            self.graph.input(name, shape_of(arg), dtype_of(val_of(arg).dtype, arg.name))
            self.static.materialised[name] = arg.name
            self.values[arg.name] = name
            return name
        raise TraceError(f'fx node "{arg.name}" is used before it was lowered')

    def emit(self, kind: str, inputs: Sequence[str], name: str, **attrs: Any) -> Any:
        """Add one op named ``name`` (output ``<name>.out``); returns its output tensor."""
        return self.graph.op(kind, list(inputs), name=name, **attrs)


def val_of(node: Any) -> Any:
    """The fake tensor (or tuple of them) torch.export recorded for ``node``."""
    return node.meta.get("val")


def shape_of(node: Any) -> tuple[int, ...]:
    value = val_of(node)
    try:
        return tuple(int(d) for d in value.shape)
    except (TypeError, AttributeError):
        raise TraceError(f'fx node "{node.name}" has no static tensor shape; export with '
                         "static shapes (no dynamic_shapes)") from None


def arg(node: Any, index: int, name: str, default: Any = None) -> Any:
    """Argument ``name`` of an aten call: keyword first, then position ``index``."""
    if name in node.kwargs:
        return node.kwargs[name]
    return node.args[index] if len(node.args) > index else default
