"""The runnable PyTorch DTensor script of a plan (``autoshard export --format dtensor``).

The script builds the plan's ``DeviceMesh`` (plus a flattened mesh for every group of axes one
priced step spans, so an all-reduce over ``dp,tp`` is one collective, as priced),
``place(mesh)`` creates every parameter, optimizer state and input as a DTensor with its
planned placements, and ``reshard(mesh, index, x)`` runs planned reshard ``index`` as exactly
its priced collectives (:mod:`autoshard.export.dtensor_runtime` explains why not
``DTensor.redistribute``). Run under ``torchrun`` it applies every reshard to its tensor (from
``--values FILE.npz``, or deterministic random values), counts the collectives that run per
kind and mesh axes with ``CommDebugMode``, prints one line per reshard, and exits 1 when one
ran other collectives than the plan priced; ``--report`` and ``--results`` write the counts and
the full values.
"""

from __future__ import annotations

import logging
from typing import Any

from autoshard.export import dtensor_runtime
from autoshard.export.dtensor import to_dtensor_source
from autoshard.export.lowering import LoweredReshard
from autoshard.export.plan_view import PlanShardings
from autoshard.export.snippets import (
    MAIN_GUARD,
    REPORT_SOURCE,
    header,
    names_tuple,
    placed,
    quoted,
    runtime_source,
    shape_literal,
    steps_literal,
)

logger = logging.getLogger(__name__)

TORCH_DTYPES = {
    "bf16": "torch.bfloat16", "f16": "torch.float16", "f32": "torch.float32",
    "f64": "torch.float64", "f8e4m3": "torch.float8_e4m3fn", "f8e5m2": "torch.float8_e5m2",
    "int32": "torch.int32", "int64": "torch.int64", "bool": "torch.bool",
}

USAGE = """
Import it and call make_mesh(), place(mesh) and reshard(mesh, index, x) from your training
step, or run it under torchrun (e.g. `torchrun --nproc-per-node 8 THIS.py`) to apply every
planned reshard and check that exactly the priced collectives run.
"""


def dtensor_script(plan: Any, view: PlanShardings, reshards: tuple[LoweredReshard, ...]) -> str:
    """The DTensor script; see the module docstring."""
    tensors = "".join(
        f"    {quoted(name)}: ({shape_literal(view.shapes[name])}, "
        f"{TORCH_DTYPES[view.dtypes[name]]}, {to_dtensor_source(ts)}),\n"
        for name, ts in view.shardings.items()
    )
    table = "".join(
        f"    ({quoted(r.tensor)}, {quoted(r.producer)}, {quoted(r.consumer)},\n"
        f"     {to_dtensor_source(r.src)}, {to_dtensor_source(r.dst)},\n"
        f"     {steps_literal(r)}),\n"
        for r in reshards
    )
    return (
        header(plan, view, "dtensor", USAGE)
        + _IMPORTS
        + f"MESH_SHAPE = {shape_literal(view.mesh.axis_sizes)}\n"
        + f"MESH_AXES = {shape_literal(tuple(repr(n) for n in view.mesh.axis_names))}\n"
        + "# tensor: (global shape, dtype, planned placements), in graph order\n"
        + "TENSORS = {\n" + tensors + "}\n"
        + "# parameters, optimizer states and inputs: created by place()\n"
        + f"PLACED = {names_tuple(placed(view))}\n"
        + "# (tensor, producer, consumer, source placements, target placements,\n"
        + "#  priced steps: (kind, mesh axes, src dim, dst dim, reduce op), in order)\n"
        + "RESHARDS = (\n" + table + ")\n"
        + runtime_source(dtensor_runtime)
        + _BODY
        + REPORT_SOURCE
        + MAIN_GUARD
    )


_IMPORTS = """
import argparse
import json
import math
import sys
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.placement_types import _StridedShard

"""

_BODY = '''

# ---- the plan's entry points --------------------------------------------------------------
GROUPS = flattened_groups([row[5] for row in RESHARDS], MESH_AXES)


def make_mesh(device_type=None):
    """The plan's DeviceMesh (needs an initialized process group of MESH_SHAPE's size), with
    a flattened mesh for every group of axes one priced step runs over."""
    if device_type is None:
        device_type = "cuda" if torch.cuda.is_available() else "cpu"
    return build_mesh(device_type, MESH_SHAPE, MESH_AXES, GROUPS)


def example(name):
    """A deterministic full tensor of the right shape and dtype (same on every rank)."""
    shape, dtype, _ = TENSORS[name]
    generator = torch.Generator().manual_seed(0)
    if dtype == torch.bool or not dtype.is_floating_point:
        return torch.randint(0, 2, shape, generator=generator).to(dtype)
    return torch.randn(shape, generator=generator).to(dtype)


def full_value(name, values=None):
    """`values[name]` (any array) in the tensor's dtype, else example(name)."""
    if values is not None and name in values:
        return torch.as_tensor(np.asarray(values[name])).to(TENSORS[name][1])
    return example(name)


def place(mesh, values=None):
    """Every parameter, optimizer state and input as a DTensor with its planned placements."""
    return {name: distribute_tensor(full_value(name, values), mesh, TENSORS[name][2])
            for name in PLACED}


def reshard(mesh, index, x):
    """Apply planned reshard `index` to the DTensor `x` (in its source placements): exactly
    the priced collectives run, and the result has the target placements."""
    return run_steps(mesh, x, RESHARDS[index][5], RESHARDS[index][4])


def source(mesh, index, values=None):
    """Reshard `index`'s tensor in its source placements (a Partial one split into shares)."""
    name, _, _, placements, _, _ = RESHARDS[index]
    plain = tuple(Replicate() if p.is_partial() else p for p in placements)
    return partition(mesh, distribute_tensor(full_value(name, values), mesh, plain), placements)


def planned(index):
    """The collectives reshard `index` runs, as (kind, mesh axes in mesh order), sorted."""
    return sorted((executed_kind(kind, op), tuple(sorted(axes, key=MESH_AXES.index)))
                  for kind, axes, _, _, op in RESHARDS[index][5] if kind not in LOCAL_KINDS)


def check(mesh, values=None):
    """Apply every planned reshard to its tensor under CommDebugMode; one record each with the
    planned and the executed collectives and the result's full value."""
    records = []
    for index, (name, producer, consumer, _, _, steps) in enumerate(RESHARDS):
        x = source(mesh, index, values)
        log = collective_log(mesh, GROUPS)
        with log:
            y = reshard(mesh, index, x)
        records.append({"index": index, "tensor": name, "producer": producer,
                        "consumer": consumer, "planned": planned(index),
                        "ran": sorted(log.calls),
                        "comm_debug_mode": sum(log.get_comm_counts().values()),
                        "value": y.full_tensor()})
    return records


def main(argv=None):
    args = parse_args(argv)
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group()  # torchrun provides the rendezvous environment
    mesh = make_mesh()
    values = dict(np.load(args.values)) if args.values else None
    placed = {name: _numpy(x.full_tensor()) for name, x in place(mesh, values).items()}
    records = check(mesh, values)
    for record in records:
        record["value"] = _numpy(record["value"])
    code = report(records, placed, args, dist.get_rank() == 0)
    if owned:
        dist.barrier()  # no rank tears the group down while another still talks to it
        dist.destroy_process_group()
    return code


def _numpy(tensor):
    tensor = tensor.detach().cpu()
    return (tensor.double() if tensor.is_floating_point() else tensor).numpy()
'''
