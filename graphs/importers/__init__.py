"""Importers: operator graphs from framework programs. Each framework is an optional extra,
imported only when its importer is called, so ``import graphs`` never loads jax or torch."""

from __future__ import annotations

from typing import Any


def from_jax(fn: Any, *example_args: Any, name: str | None = None, strict: bool = False,
             param_argnums: tuple[int, ...] = (0,)) -> Any:
    """The OpGraph of a JAX function; see :func:`graphs.importers.jax_jaxpr.from_jax`."""
    from graphs.importers.jax_jaxpr import from_jax as _from_jax

    return _from_jax(fn, *example_args, name=name, strict=strict, param_argnums=param_argnums)


__all__ = ["from_jax"]
