"""Import a JAX function as an :class:`~graphs.OpGraph` by tracing it with ``jax.make_jaxpr``.

Why from a jaxpr: it is JAX's own small, stable program representation — no MLIR parsing —
and ``jax.grad``/``jax.value_and_grad`` inside the traced function put the backward pass in the
same jaxpr, so training steps import like any other program. What the import promises:

* the leaves of the arguments in ``param_argnums`` become ``param`` tensors named by their
  pytree key paths (``params['layers'][0]['wq']`` → ``layers.0.wq``); other leaves become
  ``input`` tensors named after the argument (``x``, ``batch.tokens``);
* every equation maps onto registered kinds (:mod:`graphs.importers.jax_rules`), calls
  (``jit``, ``custom_jvp_call``, ``custom_vjp_call``, ``remat``) are inlined, constants are
  folded, dead code is dropped; op names follow :mod:`graphs.importers.jax_names`;
* outputs are marked; when the function returns parameter gradients (``jax.grad`` or the
  second half of ``jax.value_and_grad``) those are named ``grad/<param>`` with ``grad_of`` set;
* primitives without a mapping become ``opaque`` ops and a :class:`~graphs.errors.
  UnmappedOpsWarning` lists them with counts; ``strict=True`` raises
  :class:`~graphs.importers.UnmappedOpsError` instead.

jax is imported inside the functions only (an optional extra).
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphs.importers.errors import UnmappedOpsError
from graphs.importers.jax_build import Builder, Const, Value, dtype_of
from graphs.importers.jax_names import dotted, layer_of
from graphs.importers.jax_rules import RULES, opaque
from graphs.importers.jaxpr_walk import Context, walk
from graphs.importers.unmapped import warn_unmapped
from graphs.opgraph import OpGraph

Site = tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class JaxImport:
    """Everything an import produced.

    ``graph``: the OpGraph. ``constants``: values of the ``const*`` inputs (folded constants),
    to feed when evaluating the graph. ``arg_tensors``/``out_tensors``: the graph tensor of
    each flattened argument / output leaf. ``sites``: graph tensor → the jaxpr site whose value
    it is (see :mod:`graphs.importers.jaxpr_walk`). ``unmapped``: primitive → count kept as
    ``opaque``. ``jaxpr``: the traced ``ClosedJaxpr`` (for re-running it with shardings).
    """

    graph: OpGraph
    constants: Mapping[str, np.ndarray]
    arg_tensors: tuple[str, ...]
    out_tensors: tuple[str, ...]
    sites: Mapping[str, Site]
    unmapped: Mapping[str, int]
    jaxpr: Any


def from_jax(fn: Callable[..., Any], *example_args: Any, name: str | None = None,
             strict: bool = False, param_argnums: Sequence[int] = (0,)) -> OpGraph:
    """The operator graph of ``fn(*example_args)``.

    Args:
        fn: a JAX-traceable function (may call ``jax.value_and_grad`` inside).
        *example_args: arrays or ``jax.ShapeDtypeStruct`` pytrees fixing shapes and dtypes.
        name: the graph's name (default ``fn.__name__``).
        strict: raise instead of keeping unmapped primitives as ``opaque`` ops.
        param_argnums: which positional arguments hold parameters.

    Returns:
        The graph; see :func:`import_jax` for the side information.

    Raises:
        graphs.importers.UnmappedOpsError: ``strict`` and some primitive has no mapping.

    Example:
        >>> import jax.numpy as jnp
        >>> def layer(params, x):
        ...     return jnp.tanh(x @ params["w"])
        >>> g = from_jax(layer, {"w": jnp.ones((4, 2))}, jnp.ones((3, 4)))
        >>> [(op.name, op.kind) for op in g.topo_ops()]
        [('w', 'param'), ('x', 'input'), ('dot_general', 'einsum'), ('tanh', 'tanh')]
    """
    return import_jax(fn, *example_args, name=name, strict=strict,
                      param_argnums=param_argnums).graph


def import_jax(fn: Callable[..., Any], *example_args: Any, name: str | None = None,
               strict: bool = False, param_argnums: Sequence[int] = (0,)) -> JaxImport:
    """Like :func:`from_jax`, returning the :class:`JaxImport` record."""
    import jax

    closed, out_shapes = jax.make_jaxpr(fn, return_shape=True)(*example_args)
    builder = Builder()
    sources, params = _sources(builder, fn, example_args, tuple(param_argnums))
    consts = [Const(np.asarray(c)) for c in closed.consts]
    counts: Counter[str] = Counter()

    def apply(eqn: Any, inputs: list[Any], context: Context) -> list[Any]:
        return _apply(builder, eqn, inputs, context)

    results = walk(closed.jaxpr, consts, sources, Context(), apply, _literal)
    outputs = _outputs(builder, results, out_shapes, example_args, tuple(param_argnums), params)
    for op in builder.live_ops(outputs):
        if op.kind == "opaque":
            counts[str(op.attrs["target"])] += 1
    graph_name = name or getattr(fn, "__name__", "jax_function")
    if counts and strict:
        raise UnmappedOpsError(dict(counts), model=graph_name)
    warn_unmapped(dict(counts), graph_name)
    graph = builder.assemble(graph_name, sources, outputs)
    sites = {}
    for value_id, site in builder.sites.items():
        value = builder.values[value_id]
        if value.name is not None and value.name in graph.tensors:
            sites.setdefault(value.name, site)
    constants = {v.name: builder.constants[v.id] for v in builder.values
                 if v.source == "const" and v.name is not None}
    return JaxImport(graph=graph, constants=constants,
                     arg_tensors=tuple(v.name for v in sources),
                     out_tensors=tuple(v.name for v in outputs), sites=sites,
                     unmapped=dict(sorted(counts.items())), jaxpr=closed)


def _literal(literal: Any) -> Const:
    return Const(np.asarray(literal.val, dtype=literal.aval.dtype))


def _apply(builder: Builder, eqn: Any, inputs: list[Any], context: Context) -> list[Any]:
    """Fold an all-constant equation, else map it through its rule (or ``opaque``)."""
    if all(isinstance(x, Const) for x in inputs) and not eqn.effects:
        folded = eqn.primitive.bind(*[x.value for x in inputs], **eqn.params)
        folded = folded if eqn.primitive.multiple_results else [folded]
        return [Const(np.asarray(v)) for v in folded]
    builder.begin(eqn.primitive.name, context, inputs)
    rule = RULES.get(eqn.primitive.name, opaque)
    outputs = rule(builder, eqn, inputs)
    for index, (value, var) in enumerate(zip(outputs, eqn.outvars, strict=True)):
        if isinstance(value, Value):
            builder.check(value, var.aval, eqn)
            builder.sites.setdefault(value.id, (*context.path, index))
    return outputs


def _arg_names(fn: Callable[..., Any], count: int) -> list[str]:
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    return [names[i] if i < len(names) else f"arg{i}" for i in range(count)]


def _sources(builder: Builder, fn: Callable[..., Any], args: tuple[Any, ...],
             param_argnums: tuple[int, ...]) -> tuple[list[Value], list[str]]:
    """One source value per flattened argument leaf, in jaxpr invar order."""
    import jax

    leaves, _ = jax.tree_util.tree_flatten_with_path(args)
    arg_names = _arg_names(fn, len(args))
    layers: dict[str, int] = {}
    sources, params, seen = [], [], set()
    for path, leaf in leaves:
        index, rest = int(path[0].idx), path[1:]
        is_param = index in param_argnums
        prefix = arg_names[index] if (not is_param or len(param_argnums) > 1 or not rest) \
            else ""
        name = ".".join(p for p in (prefix, dotted(rest)) if p)
        while name in seen:
            name += "_"
        seen.add(name)
        shape = tuple(int(d) for d in np.shape(leaf))
        dtype = dtype_of(getattr(leaf, "dtype", np.asarray(leaf).dtype))
        layer = layer_of(name) if is_param else None
        if layer is not None:
            layers.setdefault(layer, len(layers))
        sources.append(builder.source("param" if is_param else "input", name, shape, dtype,
                                      layer, layers.get(layer, -1) if layer else -1))
        if is_param:
            params.append(name)
    return sources, params


def _outputs(builder: Builder, results: list[Any], out_shapes: Any, args: tuple[Any, ...],
             param_argnums: tuple[int, ...], params: list[str]) -> list[Value]:
    """Output values (constants materialised), renamed ``grad/<param>`` / ``out.<path>``."""
    import jax

    tree = jax.tree_util
    grads_at: tuple[int, ...] | None = None
    if len(param_argnums) == 1:
        param_tree = tree.tree_structure(args[param_argnums[0]])
        if tree.tree_structure(out_shapes) == param_tree:
            grads_at = ()
        elif isinstance(out_shapes, tuple) and len(out_shapes) == 2 \
                and tree.tree_structure(out_shapes[1]) == param_tree:
            grads_at = (1,)
    leaves, _ = tree.tree_flatten_with_path(out_shapes)
    outputs, named = [], set()
    for k, ((path, _leaf), item) in enumerate(zip(leaves, results, strict=True)):
        value = builder.operand(item)
        outputs.append(value)
        if value.source in ("param", "input") or value.id in named:
            continue
        named.add(value.id)
        if grads_at is not None and len(path) >= len(grads_at) and \
                tuple(int(p.idx) for p in path[: len(grads_at)]) == grads_at:
            param = params[k - (len(leaves) - len(params))]
            value.name, value.grad_of = f"grad/{param}", param
        else:
            value.name = "out" if len(leaves) == 1 else f"out.{dotted(path)}"
    return outputs
