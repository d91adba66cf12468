"""Import a PyTorch ``nn.Module`` as an :class:`~graphs.OpGraph`, through ``torch.export``.

Why: the zoo only knows the models we wrote; engineers want to plan the model they have. The
module is traced by ``torch.export.export`` (fake tensors: no weight is read and no compute
runs, so build big models under ``torch.device("meta")`` and pass meta example inputs), and
each aten op of the exported program is mapped onto a registered kind
(:mod:`graphs.importers.torch_table`). What cannot be mapped becomes an ``opaque`` op
(all-replicate, priced, never executed or differentiated) and is reported by a warning, or
raises :class:`UnmappedOpsError` with ``strict=True``.

What the graph promises:

* parameters are ``param`` tensors named exactly as ``module.named_parameters()`` names them
  (tied weights appear once, under their first name);
* the tensors passed in ``example_inputs`` are ``input`` tensors named after ``forward``'s
  arguments (``input_ids``, ``labels``; ``x`` …);
* buffers and everything computed from buffers and literals alone (position ids, rotary
  tables) are ``input`` tensors too, named ``<module>/const_<op>``: data the step is fed, never
  trained (:mod:`graphs.importers.torch_static`); attention masks are recognised instead;
* ops are named ``<module path>/<op>`` (:mod:`graphs.importers.torch_lower`);
* outputs: when ``forward`` returns a scalar floating-point loss, it is the graph's only
  output, so ``autoshard plan --training`` differentiates it (the backward pass and optimizer
  step are built by OUR autodiff, :mod:`graphs.autodiff`, from the forward graph: torch's own
  autograd is not traced); otherwise every returned tensor is an output;
* ops that feed no output are dropped; the same module gives the same graph, byte for byte.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphs.importers.errors import FrameworkMissingError, TraceError, UnmappedOpsError
from graphs.importers.torch_lower import Lowering, Unmapped, dtype_of, shape_of, short_target
from graphs.importers.torch_static import StaticValues
from graphs.importers.unmapped import unmapped_ops, warn_unmapped
from graphs.ir import Tensor
from graphs.opgraph import OpGraph

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchImport:
    """An import's graph plus what tooling needs to run it: the exported program and, for
    each graph input holding a static value, the fx node that computes it."""

    graph: OpGraph
    unmapped: Mapping[str, int]
    constants: Mapping[str, str]
    program: Any


def from_torch(module: Any, example_inputs: Any, *, name: str | None = None,
               strict: bool = False) -> OpGraph:
    """Trace ``module`` with ``torch.export`` and map it onto registered op kinds.

    Args:
        module: a ``torch.nn.Module`` (parameters may live on the meta device).
        example_inputs: a tuple of positional inputs, or a dict of keyword inputs (tensors on
            the module's device; their shapes are the graph's shapes).
        name: the graph's name (default: the module's class name).
        strict: raise instead of importing unmapped ops as ``opaque``.

    Returns:
        The forward graph (see the module docstring for names, roles and outputs).

    Raises:
        FrameworkMissingError: torch is not installed.
        TraceError: torch.export failed, or a tensor has a dtype or shape we cannot represent.
        UnmappedOpsError: ``strict`` and some aten ops have no mapping (names each, counted).

    Example:
        >>> import torch
        >>> with torch.device("meta"):
        ...     net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
        >>> g = from_torch(net, (torch.empty(2, 8, device="meta"),), name="tiny")
        >>> [op.name for op in g.ops if op.kind not in ("param", "input")]
        ['0/linear', '0/linear.bias', '1/relu']
    """
    return import_torch(module, example_inputs, name=name, strict=strict).graph


def import_torch(module: Any, example_inputs: Any, *, name: str | None = None,
                 strict: bool = False) -> TorchImport:
    """:func:`from_torch`, also returning the program and the static inputs' fx nodes."""
    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise TraceError(f"expected a torch.nn.Module, got {type(module).__name__}")
    model = name or type(module).__name__
    args, kwargs = _split_inputs(example_inputs, model)
    noisy = logging.getLogger("torch._subclasses.fake_tensor")
    level = noisy.level
    noisy.setLevel(logging.CRITICAL)      # torch logs the traceback we turn into one line
    try:
        program = torch.export.export(module, args, kwargs, strict=False)
    except Exception as error:
        first = (str(error).strip().splitlines() or [""])[0][:300]
        raise TraceError(f"torch.export could not trace {model}: {type(error).__name__}: "
                         f"{first}", model=model) from None
    finally:
        noisy.setLevel(level)
    graph, static = _lower(program, model, _canonical_names(module))
    graph = _prune(graph)
    graph.validate()
    counts = unmapped_ops(graph)
    if strict and counts:
        raise UnmappedOpsError(counts, model=model)
    warn_unmapped(counts, model)
    constants = {k: v for k, v in static.materialised.items() if k in graph.tensors}
    return TorchImport(graph=graph, unmapped=counts, constants=constants, program=program)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise FrameworkMissingError("torch", "torch") from None
    return torch


def _split_inputs(example_inputs: Any, model: str) -> tuple[tuple, dict]:
    if isinstance(example_inputs, Mapping):
        return (), dict(example_inputs)
    if isinstance(example_inputs, list | tuple):
        return tuple(example_inputs), {}
    raise TraceError(f"{model}: example_inputs must be a tuple of positional inputs or a dict "
                     f"of keyword inputs, got {type(example_inputs).__name__}", model=model)


def _canonical_names(module: Any) -> dict[str, str]:
    """Every parameter path (tied ones too) → the name ``named_parameters()`` gives it (the
    first path that reaches it): torch.export may pick either name of a tied weight."""
    first: dict[int, str] = {}
    names = {}
    for path, param in module.named_parameters(remove_duplicate=False):
        names[path] = first.setdefault(id(param), path)
    return names


def _lower(program: Any, model: str, canonical: dict[str, str]) -> tuple[OpGraph, StaticValues]:
    from torch.export.graph_signature import InputKind

    graph = OpGraph(name=model)
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs
             if hasattr(spec.arg, "name")}
    dynamic = {n for n, s in specs.items() if s.kind in (InputKind.PARAMETER, InputKind.USER_INPUT)}
    static = StaticValues(program, dynamic, _buffer_values(program, specs))
    ctx = Lowering(graph, static)
    from graphs.importers.torch_table import HANDLERS, IGNORED

    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in dynamic:
            _source(ctx, node, specs[node.name], canonical)
        elif node.op == "call_function" and not static.is_static(node):
            key = "getitem" if node.target is operator.getitem else str(node.target)
            if key in IGNORED:
                continue
            handler = HANDLERS.get(key)
            try:
                if handler is None:
                    raise Unmapped("no handler")
                ctx.values[node.name] = handler(ctx, node)
            except Unmapped as why:
                logger.info("%s (%s) is opaque: %s", node.name, key, why)
                ctx.values[node.name] = _opaque(ctx, node, key)
        elif node.op == "output":
            _outputs(ctx, node, program)
    return graph, static


def _buffer_values(program: Any, specs: Mapping[str, Any]) -> dict[str, Any]:
    """Real (non-meta) buffers and constants by placeholder name, for static evaluation."""
    values = {}
    for node_name, spec in specs.items():
        target = spec.target
        value = program.state_dict.get(target, program.constants.get(target))
        if value is not None and hasattr(value, "is_meta") and not value.is_meta:
            values[node_name] = value.detach().cpu()
    return values


def _source(ctx: Lowering, node: Any, spec: Any, canonical: dict[str, str]) -> None:
    from torch.export.graph_signature import InputKind

    value = node.meta.get("val")
    if not hasattr(value, "shape"):
        return          # a Python value (use_cache=False): nothing to plan
    dtype = dtype_of(value.dtype, node.name)
    if spec.kind == InputKind.PARAMETER:
        name = canonical.get(spec.target, spec.target)
        ctx.values[node.name] = (name if name in ctx.graph.tensors   # a tied weight, again
                                 else ctx.graph.param(name, shape_of(node), dtype))
    else:
        ctx.values[node.name] = ctx.graph.input(node.name, shape_of(node), dtype)


def _opaque(ctx: Lowering, node: Any, target: str) -> Any:
    values = node.meta.get("val")
    many = isinstance(values, list | tuple)
    outs = list(values) if many else [values]
    if not outs or not all(hasattr(v, "shape") for v in outs):
        raise TraceError(f'{target} (fx node "{node.name}") has outputs that are not tensors; '
                         "it cannot be imported, even as an opaque op")
    inputs = [ctx.tensor(n) for n in node.all_input_nodes if hasattr(n.meta.get("val"), "shape")]
    name = ctx.base_name(node, short_target(node.target))
    result = ctx.graph.op(
        "opaque", inputs, name=name, target=target,
        out_shapes=[[int(d) for d in v.shape] for v in outs],
        out_dtypes=[dtype_of(v.dtype, node.name).value for v in outs],
        outputs=[f"{name}.out{i}" for i in range(len(outs))] if many else [f"{name}.out"])
    return tuple(result) if many else result[0] if isinstance(result, tuple) else result


def _outputs(ctx: Lowering, node: Any, program: Any) -> None:
    from torch.export.graph_signature import OutputKind

    user = {spec.arg.name for spec in program.graph_signature.output_specs
            if spec.kind == OutputKind.USER_OUTPUT and hasattr(spec.arg, "name")}
    nodes = [n for n in node.args[0] if hasattr(n, "name") and n.name in user
             and hasattr(n.meta.get("val"), "shape")]
    tensors = list(dict.fromkeys(ctx.tensor(n) for n in nodes))
    losses = [t for t in tensors if ctx.graph.tensors[t].shape == ()
              and ctx.graph.tensors[t].dtype.is_float]
    for tensor in losses[:1] or tensors:
        ctx.graph.mark_output(tensor)


def _prune(graph: OpGraph) -> OpGraph:
    """A copy without the ops that feed no output (parameters and user inputs always stay)."""
    live = set(graph.outputs)
    keep: set[str] = set()
    for op in reversed(graph.topo_ops()):
        source = op.kind in ("param", "input") and "/const_" not in op.name
        if source or any(t in live for t in op.outputs):
            keep.add(op.name)
            live.update(op.inputs)
    pruned = OpGraph(name=graph.name)
    for op in graph.ops:
        if op.name in keep:
            for out in op.outputs:
                t = graph.tensors[out]
                pruned.add_tensor(Tensor(name=t.name, shape=t.shape, dtype=t.dtype, role=t.role,
                                         grad_of=t.grad_of))
            pruned.add_op(op)
    for tensor in graph.outputs:
        pruned.mark_output(tensor)
    return pruned


def constant_feeds(imported: TorchImport, module: Any, example_inputs: Any
                   ) -> dict[str, np.ndarray]:
    """Values of the graph inputs that hold static values (rotary tables, position ids),
    computed by torch: the exported program runs on ``module``'s real weights and buffers.

    Use it to evaluate an imported graph (with :func:`graphs.autodiff_eval.evaluate`)."""
    torch = _torch()
    from torch.export.graph_signature import InputKind

    args, kwargs = _split_inputs(example_inputs, imported.graph.name)
    user = iter(torch.utils._pytree.tree_leaves((args, kwargs)))
    flat = []
    for spec in imported.program.graph_signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            flat.append(next(user))
        elif spec.kind == InputKind.PARAMETER:
            flat.append(module.get_parameter(spec.target))
        elif spec.kind == InputKind.BUFFER:
            flat.append(module.get_buffer(spec.target))
        else:
            flat.append(imported.program.constants[spec.target])
    seen: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            seen[n.name] = super().run_node(n)
            return seen[n.name]

    with torch.no_grad():
        Recorder(imported.program.graph_module).run(*flat)
    return {name: seen[node].detach().cpu().numpy()
            for name, node in imported.constants.items()}
