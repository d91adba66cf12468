"""The runnable JAX script of a plan (``autoshard export --format jax``).

The script builds the plan's ``jax.sharding.Mesh``, ``place(mesh)`` puts every parameter,
optimizer state and input on it with its planned ``NamedSharding``, and ``reshard(mesh, index,
x)`` runs planned reshard ``index`` as exactly its priced collectives inside ``jax.shard_map``
(:mod:`autoshard.export.jax_runtime`), so a pending sum (Partial) is really reduced where the
plan reduces it. Partial values cross the ``shard_map`` boundary stacked over their Partial
axes (one extra leading dim; ``TENSORS`` and ``RESHARDS`` list the Partial axes beside the
spec of the other dims). Run as a script (e.g. on 8 host devices with
``XLA_FLAGS=--xla_force_host_platform_device_count=8``) it compiles every reshard, counts the
collectives in the compiled HLO per kind and mesh axes, runs it on its tensor (from
``--values FILE.npz`` or deterministic random values), prints one line per reshard and exits 1
when XLA runs other collectives than the plan priced.

Raises ExportError for a tensor a PartitionSpec cannot state (a sub-axis layout) or a dim its
shard count does not divide.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from autoshard.export import hlo_collectives, jax_runtime
from autoshard.export.check import check_exportable
from autoshard.export.jax_spec import partition_spec_entries
from autoshard.export.lowering import LoweredReshard
from autoshard.export.plan_view import PlanShardings
from autoshard.export.snippets import (
    MAIN_GUARD,
    REPORT_SOURCE,
    framework_block,
    header,
    names_tuple,
    placed,
    quoted,
    runtime_source,
    shape_literal,
    steps_literal,
)
from autoshard.sharding.placements import Partial, Replicate
from autoshard.sharding.tensor_sharding import TensorSharding

logger = logging.getLogger(__name__)

JAX_DTYPES = {
    "bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64",
    "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2", "int32": "int32", "int64": "int64",
    "bool": "bool",
}

USAGE = """
Import it and call make_mesh(), place(mesh) and reshard(mesh, index, x) from your training
step (reshard works under jax.jit), or run it to compile and apply every planned reshard and
check that XLA runs exactly the priced collectives.
"""


def jax_script(plan: Any, view: PlanShardings, reshards: tuple[LoweredReshard, ...]) -> str:
    """The JAX script; see the module docstring.

    Raises:
        ExportError: a tensor JAX cannot express (a sub-axis, a non-divisible dim).
    """
    tensors = "".join(
        f"    {quoted(name)}: ({shape_literal(view.shapes[name])}, "
        f"{quoted(JAX_DTYPES[view.dtypes[name]])}, {_spec(ts, view.shapes[name], name)}, "
        f"{_partial(ts)}),\n"
        for name, ts in view.shardings.items()
    )
    table = "".join(
        f"    {{\"tensor\": {quoted(r.tensor)}, \"producer\": {quoted(r.producer)}, "
        f"\"consumer\": {quoted(r.consumer)},\n"
        f"     \"src\": {_spec(r.src, view.shapes[r.tensor], r.tensor)}, "
        f"\"src_partial\": {_partial(r.src)},\n"
        f"     \"dst\": {_spec(r.dst, view.shapes[r.tensor], r.tensor)}, "
        f"\"dst_partial\": {_partial(r.dst)},\n"
        f"     \"steps\": {steps_literal(r)}}},\n"
        for r in reshards
    )
    return (
        header(plan, view, "jax", USAGE)
        + framework_block(plan)
        + _IMPORTS
        + f"MESH_SHAPE = {shape_literal(view.mesh.axis_sizes)}\n"
        + f"MESH_AXES = {shape_literal(tuple(repr(n) for n in view.mesh.axis_names))}\n"
        + f"NUM_DEVICES = {math.prod(view.mesh.axis_sizes)}\n"
        + "# tensor: (global shape, dtype, PartitionSpec of its dims, Partial (axis, reduce op)\n"
        + "# pairs: a Partial value is stacked over those axes), in graph order\n"
        + "TENSORS = {\n" + tensors + "}\n"
        + "# parameters, optimizer states and inputs: created by place()\n"
        + f"PLACED = {names_tuple(placed(view))}\n"
        + "# every planned reshard with its priced steps: (kind, mesh axes, src dim, dst dim,\n"
        + "# reduce op), in order\n"
        + "RESHARDS = (\n" + table + ")\n"
        + runtime_source(jax_runtime)
        + runtime_source(hlo_collectives)
        + _BODY
        + REPORT_SOURCE
        + MAIN_GUARD
    )


def _spec(ts: TensorSharding, shape: tuple[int, ...], name: str) -> str:
    """``P(...)`` of the non-Partial dims (Partial axes are listed apart)."""
    placements = tuple(Replicate() if isinstance(p, Partial) else p for p in ts.placements)
    plain = TensorSharding(ts.mesh, placements, ts.ndim, ts.shard_order)
    check_exportable(plain, shape, "jax", name)
    parts = []
    for entry in partition_spec_entries(plain, name):
        if entry is None:
            parts.append("None")
        elif isinstance(entry, str):
            parts.append(repr(entry))
        else:
            parts.append("(" + ", ".join(repr(a) for a in entry) + ")")
    return "P(" + ", ".join(parts) + ")"


def _partial(ts: TensorSharding) -> str:
    """The Partial ``(axis, reduce op)`` pairs in mesh order, e.g. ``(('dp', 'sum'),)``."""
    pairs = tuple((axis, op) for axis, op in ts.partial_axes)
    return repr(pairs)


_IMPORTS = """
import argparse
import itertools
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

"""

_BODY = '''

# ---- the plan's entry points --------------------------------------------------------------
def make_mesh(devices=None):
    """The plan's Mesh over the first NUM_DEVICES devices (row-major, as planned)."""
    devices = jax.devices() if devices is None else devices
    if len(devices) < NUM_DEVICES:
        raise SystemExit(
            f"this plan's mesh needs {NUM_DEVICES} devices and JAX sees {len(devices)}; on "
            f"a CPU run with XLA_FLAGS=--xla_force_host_platform_device_count={NUM_DEVICES}")
    return Mesh(np.asarray(devices[:NUM_DEVICES]).reshape(MESH_SHAPE), MESH_AXES)


def example(name):
    """A deterministic full array of the right shape and dtype."""
    shape, dtype, _, _ = TENSORS[name]
    rng = np.random.default_rng(0)
    dtype = jax.numpy.dtype(dtype)
    if not jax.numpy.issubdtype(dtype, jax.numpy.floating):
        return rng.integers(0, 2, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def full_value(name, values=None):
    """`values[name]` (any array) in the tensor's dtype, else example(name)."""
    if values is not None and name in values:
        return np.asarray(values[name]).astype(jax.numpy.dtype(TENSORS[name][1]))
    return example(name)


def sharding(mesh, name):
    """The NamedSharding of a tensor that is not Partial."""
    return NamedSharding(mesh, TENSORS[name][2])


def place(mesh, values=None):
    """Every parameter, optimizer state and input on `mesh` with its planned sharding."""
    return {name: jax.device_put(full_value(name, values), sharding(mesh, name))
            for name in PLACED}


def reshard(mesh, index, x):
    """Apply planned reshard `index` to `x` (its source; stacked over the source's Partial
    axes when it has any): exactly the priced collectives, inside jax.shard_map. Returns the
    target (stacked over the target's Partial axes when it has any). Works under jax.jit."""
    return reshard_function(mesh, RESHARDS[index])(x)


def source(mesh, index, values=None):
    """Reshard `index`'s tensor in its source sharding, stacked when Partial."""
    row = RESHARDS[index]
    sizes = dict(zip(MESH_AXES, MESH_SHAPE))
    stacked = stack_partial(full_value(row["tensor"], values), row["src_partial"], sizes)
    return jax.device_put(stacked, NamedSharding(mesh, stacked_spec(row["src"],
                                                                    row["src_partial"])))


def planned(index):
    """The collectives reshard `index` runs, as (kind, mesh axes in mesh order), sorted."""
    return sorted((executed_kind(kind, op), tuple(sorted(axes, key=MESH_AXES.index)))
                  for kind, axes, _, _, op in RESHARDS[index]["steps"]
                  if kind not in LOCAL_KINDS)


def compiled_collectives(compiled):
    """(kind, mesh axes) of every collective in a compiled executable's HLO, sorted."""
    counts = count_collectives(compiled.as_text(), MESH_AXES, MESH_SHAPE)
    return sorted((kind.replace("-", "_"), tuple(axes.split(",")) if axes else ())
                  for (kind, axes), n in counts.items() for _ in range(n))


def check(mesh, values=None):
    """Compile and run every planned reshard on its tensor; one record each with the planned
    collectives, those in XLA's compiled HLO, and the result's value."""
    records = []
    for index, row in enumerate(RESHARDS):
        x = source(mesh, index, values)
        compiled = jax.jit(reshard_function(mesh, row)).lower(x).compile()
        records.append({"index": index, "tensor": row["tensor"], "producer": row["producer"],
                        "consumer": row["consumer"], "planned": planned(index),
                        "ran": compiled_collectives(compiled),
                        "value": unstack(compiled(x), row["dst_partial"])})
    return records


def main(argv=None):
    args = parse_args(argv)
    mesh = make_mesh()
    values = dict(np.load(args.values)) if args.values else None
    placed = {name: unstack(x, ()) for name, x in place(mesh, values).items()}
    return report(check(mesh, values), placed, args)
'''
