"""One case of ``autoshard bench xla-crosscheck``, run in its own process with 8 CPU devices.

Reads a case (JSON on stdin), imports the JAX model with :func:`graphs.importers.jax_jaxpr.
import_jax`, plans it, then re-runs the *same* jaxpr under ``jax.jit`` with the plan applied:
inputs and parameters get their planned ``NamedSharding``, outputs too, and every planned
activation that is not Partial gets ``with_sharding_constraint`` at the jaxpr site it came
from. XLA compiles it (dumping the HLO after ``spmd-partitioning``), the collectives it
inserted are counted per kind and mesh axes and put beside the plan's, and the sharded result
is compared with the one-device result. Prints one JSON document on stdout.
The parent (:mod:`autoshard.bench.xla_crosscheck`) sets ``XLA_FLAGS`` before this starts.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import sys
import time
from collections import Counter
from typing import Any

import numpy as np

from autoshard.bench import jax_models as models
from autoshard.errors import InfeasibleError
from autoshard.export.hlo_collectives import KINDS, count_collectives
from autoshard.planning.planner import plan as make_plan
from autoshard.sharding.mesh import Mesh


def _model(case: dict[str, Any]) -> tuple[Any, tuple[Any, ...]]:
    if case["model"] == "mlp":
        params = models.mlp_params(case["hidden"], case["ffn"])
        x = np.random.default_rng(1).standard_normal((case["batch"], case["hidden"]))
        fn: Any = models.mlp_loss
        args = (params, x.astype(np.float32))
    else:
        shape = models.GptShape(layers=case["layers"], hidden=case["hidden"],
                                heads=case["heads"], ffn=case["ffn"], batch=case["batch"],
                                seq=case["seq"])
        fn = functools.partial(models.gpt_loss, heads=shape.heads)
        args = (models.gpt_params(shape), models.gpt_input(shape))
    if case["mode"] == "grad":
        import jax

        fn = jax.value_and_grad(fn)
    return fn, args


def predicted(plan: Any, *, unique: bool = False, as_cpu: bool = False
              ) -> Counter[tuple[str, str]]:
    """(kind, axes) → count of the communicating collectives the plan emits.

    ``unique``: a reshard of one tensor between the same two layouts counts once however many
    consumers need it (XLA emits it once and shares it). ``as_cpu``: a reduce-scatter counts
    as the all-reduce (+ local slice) that XLA's CPU SPMD partitioner writes for it.
    """
    counts: Counter[tuple[str, str]] = Counter()
    seen: set[tuple[Any, ...]] = set()
    records = []
    for reshard in plan.reshards:
        key = (reshard.tensor, reshard.src, reshard.dst)
        if unique and key in seen:
            continue
        seen.add(key)
        records.extend(reshard.collectives)
    records += [c for op in plan.ops.values() for c in op.intra_op]
    for record in records:
        kind = record.kind.replace("_", "-")
        if as_cpu and kind == "reduce-scatter":
            kind = "all-reduce"
        if kind in KINDS:
            counts[(kind, ",".join(record.axes))] += 1
    return counts


def _spec(record: Any) -> Any:
    from jax.sharding import PartitionSpec

    entries = record.partition_spec
    if entries is None:
        return None
    return PartitionSpec(*[tuple(e) if isinstance(e, list | tuple) else e for e in entries])


def _plan(graph: Any, case: dict[str, Any]) -> Any:
    """The case's plan, priced as a plain sum (``overlap="none"``).

    XLA's partitioner is given tensor layouts, not op strategies, and re-derives each op's
    strategy moving the fewest bytes, hidden or not. A plan priced with overlap prefers a
    parameter gather it hides behind the matmul where XLA slices the replicated activation and
    all-reduces the partial product instead; the count then differs by XLA's choice of path,
    not by what the layouts imply. The crosscheck checks the latter.
    """
    mesh = Mesh.parse(case["mesh"])
    free = make_plan(graph, mesh, time_limit=case["time_limit"], overlap="none")
    for squeeze in case.get("squeeze", ()):   # the tightest budget some plan fits in
        limit = free.peak_bytes_per_device * squeeze
        try:
            return make_plan(graph, mesh, memory_limit=limit, time_limit=case["time_limit"],
                             overlap="none"), limit
        except InfeasibleError:
            continue
    return free, None


def _sharded_function(imported: Any, plan: Any, mesh: Any) -> tuple[Any, int]:
    """The jaxpr re-run with a sharding constraint on every planned, non-Partial tensor."""
    import jax
    from jax.sharding import NamedSharding

    from graphs.importers.jaxpr_walk import Context, walk

    constraints = {}
    for tensor, site in imported.sites.items():
        record = plan.tensors.get(tensor)
        if record is None or any(p.startswith("P") for p in record.placements):
            continue
        spec = _spec(record)
        if spec is not None:
            constraints[site] = NamedSharding(mesh, spec)

    def apply(eqn: Any, inputs: list[Any], context: Context) -> list[Any]:
        out = eqn.primitive.bind(*inputs, **eqn.params)
        out = list(out) if eqn.primitive.multiple_results else [out]
        for index, value in enumerate(out):
            sharding = constraints.get((*context.path, index))
            if sharding is not None:
                out[index] = jax.lax.with_sharding_constraint(value, sharding)
        return out

    closed = imported.jaxpr

    def sharded(*flat: Any) -> list[Any]:
        return walk(closed.jaxpr, closed.consts, flat, Context(), apply, lambda lit: lit.val)

    return sharded, len(constraints)


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    import jax
    from jax.sharding import Mesh as JaxMesh
    from jax.sharding import NamedSharding, PartitionSpec

    from graphs.importers.jax_jaxpr import import_jax

    fn, args = _model(case)
    start = time.perf_counter()
    imported = import_jax(fn, *args, name=case["name"])
    plan, limit = _plan(imported.graph, case)
    plan_s = time.perf_counter() - start
    names = [a.split("=")[0] for a in case["mesh"].split(",")]
    sizes = [int(a.split("=")[1]) for a in case["mesh"].split(",")]
    mesh = JaxMesh(np.asarray(jax.devices()[: int(np.prod(sizes))]).reshape(sizes), tuple(names))

    def sharding(tensor: str) -> Any:
        spec = _spec(plan.tensors[tensor]) if tensor in plan.tensors else None
        return NamedSharding(mesh, spec if spec is not None else PartitionSpec())

    sharded, constrained = _sharded_function(imported, plan, mesh)
    jitted = jax.jit(sharded, in_shardings=[sharding(t) for t in imported.arg_tensors],
                     out_shardings=[sharding(t) for t in imported.out_tensors])
    flat = [np.asarray(leaf) for leaf in jax.tree.leaves(args)]
    start = time.perf_counter()
    compiled = jitted.lower(*flat).compile()
    compile_s = time.perf_counter() - start
    pattern = os.path.join(case["dump_dir"], "*jit_sharded*after_spmd-partitioning*")
    dumps = sorted(glob.glob(pattern))
    if not dumps:
        raise AssertionError(f"no after_spmd-partitioning dump in {case['dump_dir']}")
    with open(dumps[-1]) as handle:
        post = count_collectives(handle.read(), names, sizes)
    final = count_collectives(compiled.as_text(), names, sizes)
    got = compiled(*flat)
    want = jax.tree.leaves(jax.jit(fn)(*args))
    errors = [float(np.max(np.abs(np.asarray(g) - np.asarray(w))) /
                    max(float(np.max(np.abs(np.asarray(w)))), 1e-30))
              for g, w in zip(got, want, strict=True)]
    ours = predicted(plan)
    sharded_params = sum(1 for t in plan.tensors.values()
                         if t.role == "param" and any(p != "R" for p in t.placements))
    cpu = predicted(plan, unique=True, as_cpu=True)
    return {"predicted": [[k, a, n] for (k, a), n in sorted(ours.items())],
            "predicted_cpu": [[k, a, n] for (k, a), n in sorted(cpu.items())],
            "xla": [[k, a, n] for (k, a), n in sorted(post.items())],
            "xla_final": [[k, a, n] for (k, a), n in sorted(final.items())],
            "max_rel_err": max(errors), "plan_s": plan_s, "compile_s": compile_s,
            "ops": len(imported.graph.ops), "constrained": constrained,
            "sharded_params": sharded_params,
            "params": sum(1 for t in plan.tensors.values() if t.role == "param"),
            "memory_limit": limit, "peak_bytes": plan.peak_bytes_per_device,
            "optimal": plan.objective.optimal, "gap": plan.objective.gap,
            "status": plan.objective.status}


if __name__ == "__main__":
    print(json.dumps(run_case(json.loads(sys.stdin.read()))))
