"""Random reshards run by the exported scripts' runtimes: ``random_reshards.py FRAMEWORK MESH N``.

Draws ``N`` (source, target) layout pairs of a ``[8, 16]`` tensor on ``MESH`` (every evenly
divisible layout, Partial sums and maxima included, seeded), prices each with
:func:`autoshard.reshard.find.find_reshard` (with and without the cost of local slices, which
changes the path), runs its steps with the framework's runtime, and prints one JSON line: per
reshard the priced steps, the collectives that ran (``CommDebugMode`` under torchrun; XLA's
compiled HLO for JAX) and whether the result's value equals the source's. Under ``torchrun``
rank 0 prints. Covers what the plans in test_scripts_run.py may not: collective-permutes, max
and min reductions, three-axis meshes and axis orders against mesh order.
"""

from __future__ import annotations

import json
import random
import sys

import numpy as np

from autoshard.reshard.convert import to_sharding
from autoshard.reshard.find import ReshardError, find_reshard
from autoshard.reshard.state import enumerate_states
from autoshard.sharding.links import MeshLinks
from autoshard.sharding.mesh import Mesh
from autoshard.sharding.placements import Partial, Replicate
from autoshard.sharding.tensor_sharding import TensorSharding
from costmodel import get_preset

SHAPE = (8, 16)


def cases(mesh: Mesh, count: int) -> list[tuple[TensorSharding, TensorSharding, tuple]]:
    topology = get_preset("dgx-h100")
    links = MeshLinks.build(mesh, topology)
    states = enumerate_states(tuple(mesh.axis_sizes), SHAPE, ("sum", "max"))
    rng = random.Random(0)
    out = []
    while len(out) < count:
        src, dst = (to_sharding(mesh, 2, rng.choice(states)) for _ in range(2))
        for hbm in (None, topology.device.hbm_bw_bytes_per_s):
            try:
                found = find_reshard(src, dst, SHAPE, 4, links, hbm)
            except ReshardError:
                continue
            steps = tuple((c.kind, c.axes, c.src_dim, c.dst_dim, c.reduce_op)
                          for c in found.collectives)
            out.append((src, dst, steps))
    return out[:count]


def _plain(ts: TensorSharding) -> TensorSharding:
    placements = tuple(Replicate() if isinstance(p, Partial) else p for p in ts.placements)
    return TensorSharding(ts.mesh, placements, ts.ndim, ts.shard_order)


def run_jax(mesh: Mesh, drawn: list) -> list[dict]:
    import jax
    from jax.sharding import Mesh as JaxMesh
    from jax.sharding import NamedSharding

    from autoshard.export import jax_runtime as rt
    from autoshard.export.hlo_collectives import count_collectives
    from autoshard.export.jax_spec import partition_spec_entries

    devices = np.asarray(jax.devices()[:mesh.size]).reshape(mesh.axis_sizes)
    jax_mesh = JaxMesh(devices, mesh.axis_names)
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    out = []
    for index, (src, dst, steps) in enumerate(drawn):
        row = {"src": partition_spec_entries(_plain(src)), "src_partial": src.partial_axes,
               "dst": partition_spec_entries(_plain(dst)), "dst_partial": dst.partial_axes,
               "steps": steps}
        full = np.random.default_rng(index).standard_normal(SHAPE).astype(np.float32)
        spec = rt.stacked_spec(row["src"], row["src_partial"])
        x = jax.device_put(rt.stack_partial(full, row["src_partial"], sizes),
                           NamedSharding(jax_mesh, spec))
        compiled = jax.jit(rt.reshard_function(jax_mesh, row)).lower(x).compile()
        counts = count_collectives(compiled.as_text(), mesh.axis_names, mesh.axis_sizes)
        ran = sorted([kind.replace("-", "_"), axes.split(",")]
                     for (kind, axes), n in counts.items() for _ in range(n))
        value = rt.unstack(compiled(x), row["dst_partial"])
        out.append({"steps": steps, "ran": ran, "equal": bool(np.array_equal(value, full))})
    return out


def run_dtensor(mesh: Mesh, drawn: list) -> list[dict]:
    import torch
    from torch.distributed.tensor import Replicate as TorchReplicate
    from torch.distributed.tensor import distribute_tensor

    from autoshard.export import dtensor_runtime as rt
    from autoshard.export.dtensor import to_dtensor

    groups = rt.flattened_groups([steps for _, _, steps in drawn], mesh.axis_names)
    device_mesh = rt.build_mesh("cpu", tuple(mesh.axis_sizes), tuple(mesh.axis_names), groups)
    out = []
    for index, (src, dst, steps) in enumerate(drawn):
        full = torch.from_numpy(np.random.default_rng(index).standard_normal(SHAPE)).float()
        source = to_dtensor(src)
        plain = tuple(TorchReplicate() if p.is_partial() else p for p in source)
        x = rt.partition(device_mesh, distribute_tensor(full, device_mesh, plain), source)
        log = rt.collective_log(device_mesh, groups)
        with log:
            y = rt.run_steps(device_mesh, x, steps, to_dtensor(dst))
        ran = sorted([kind, list(axes)] for kind, axes in log.calls)
        out.append({"steps": steps, "ran": ran,
                    "counted": sum(log.get_comm_counts().values()),
                    "equal": bool(torch.equal(y.full_tensor(), full))})
    return out


def main(argv: list[str]) -> int:
    framework, mesh_text, count = argv
    mesh = Mesh.parse(mesh_text)
    drawn = cases(mesh, int(count))
    if framework == "jax":
        print(json.dumps(run_jax(mesh, drawn)))
        return 0
    import torch.distributed as dist

    dist.init_process_group("gloo")
    result = run_dtensor(mesh, drawn)
    if dist.get_rank() == 0:
        print(json.dumps(result))
    dist.barrier()  # no rank tears the group down while another still talks to it
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
