"""Walk a jaxpr with call-like primitives inlined: the one traversal the JAX importer and the
XLA cross-check share, so that both name every equation by the same *site*.

Why shared: the importer maps each jaxpr variable to a graph tensor, and the cross-check later
re-runs the same jaxpr under ``jax.jit`` placing ``with_sharding_constraint`` on exactly those
variables. Both walk ``jit``/``pjit``, ``custom_jvp_call``, ``custom_vjp_call``, ``remat`` and
``closed_call`` by descending into their inner jaxpr, so a site — the tuple of equation
indices from the top-level jaxpr down, plus the output index — names the same value in both.
A :class:`Context` carries what the inlined calls contribute to names: the scopes of
``jax.named_scope`` and the ``jit`` function names, and whether the equation belongs to the
backward pass (a ``transpose`` transform in its name stack, as ``jax.grad`` leaves it).
jax is never imported here: the caller hands in jaxpr objects.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# Call-like primitives whose body is inlined; the value is the params key holding the body.
INLINE_BODY = {
    "pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr", "core_call": "call_jaxpr",
    "remat2": "jaxpr", "checkpoint": "jaxpr", "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr", "custom_vjp_call_jaxpr": "fun_jaxpr",
}
NAMED_CALLS = ("pjit", "jit")   # their ``name`` param (the Python function) becomes a scope

Site = tuple[int, ...]
_SCOPE = re.compile(r"^[A-Za-z0-9_.\-]+$")


@dataclass(frozen=True, slots=True)
class Context:
    """Where an equation sits: enclosing scopes, backward or not, and its site prefix."""

    scopes: tuple[str, ...] = ()
    backward: bool = False
    path: tuple[int, ...] = ()


def inline_body(eqn: Any) -> tuple[Any, Sequence[Any]] | None:
    """(inner jaxpr, its consts) when ``eqn`` is a call to inline, else None."""
    key = INLINE_BODY.get(eqn.primitive.name)
    if key is None or key not in eqn.params:
        return None
    body = eqn.params[key]
    if hasattr(body, "jaxpr"):          # a ClosedJaxpr
        return body.jaxpr, list(body.consts)
    return body, []


def eqn_context(outer: Context, eqn: Any, index: int) -> Context:
    """The context of equation ``index`` of a jaxpr walked under ``outer``."""
    scopes, backward = list(outer.scopes), outer.backward
    for item in getattr(eqn.source_info.name_stack, "stack", ()):
        kind = type(item).__name__
        if kind == "Scope" and _SCOPE.match(str(item.name)):  # not jnp.einsum's "ab,bc->ac"
            scopes.append(str(item.name))
        elif kind == "Transform" and str(item.name) == "transpose":
            backward = True
    return Context(tuple(scopes), backward, (*outer.path, index))


def walk(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any], context: Context,
         apply: Callable[[Any, list[Any], Context], list[Any]],
         literal: Callable[[Any], Any]) -> list[Any]:
    """Evaluate ``jaxpr`` abstractly: ``apply(eqn, inputs, context)`` gives the outputs of each
    non-inlined equation (``context.path`` is its site), ``literal(lit)`` turns a literal into
    a value. Returns the values of ``jaxpr.outvars``."""
    env: dict[Any, Any] = {}
    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))

    def read(var: Any) -> Any:
        return literal(var) if type(var).__name__ == "Literal" else env[var]

    for index, eqn in enumerate(jaxpr.eqns):
        inputs = [read(v) for v in eqn.invars]
        inner_context = eqn_context(context, eqn, index)
        body = inline_body(eqn)
        if body is None:
            outputs = apply(eqn, inputs, inner_context)
        else:
            call_name = str(eqn.params.get("name", ""))
            if eqn.primitive.name in NAMED_CALLS and call_name.isidentifier() \
                    and not call_name.startswith("_"):   # not jnp.einsum's "ab,bc->ac"
                inner_context = Context((*inner_context.scopes, call_name),
                                        inner_context.backward, inner_context.path)
            outputs = walk(body[0], body[1], inputs, inner_context, apply, literal)
        env.update(zip(eqn.outvars, outputs, strict=True))
    return [read(v) for v in jaxpr.outvars]
