"""The smallest achievable memory peak, for the ``Infeasible`` certificate.

With one memory row it is the sum of per-node minima (closed form, used directly by
``solve``). With liveness rows the steps share nodes, so the minimum of the largest step is a
small min-max integer program, solved exactly here with CP-SAT. Edge costs play no part: an
edge makes no plan impossible unless its entry is inf, and inf pairs are excluded.
"""

from __future__ import annotations

import numpy as np

from solver.compact import Indexed


def min_peak(ix: Indexed) -> float:
    """Exact minimum over plans of the largest memory row."""
    from ortools.sat.python import cp_model

    coefs = np.concatenate([np.zeros(1)] + [vec for row in ix.rows for _, vec in row])
    integral = bool(np.all(coefs == np.round(coefs)))
    scale = 1.0 if integral else 2.0**40 / max(float(np.abs(coefs).sum()), 1e-300)
    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x{i}_{p}") for p in range(c.size)]
         for i, c in enumerate(ix.costs)]
    for options in x:
        model.add_exactly_one(options)
    for u, v, matrix in ix.edges:
        for p, q in zip(*np.nonzero(~np.isfinite(matrix)), strict=True):
            model.add_bool_or([x[u][p].Not(), x[v][q].Not()])
    top = int(np.ceil(float(np.abs(coefs).sum()) * scale)) + 1
    peak = model.new_int_var(-top, top, "peak")
    for row in ix.rows:
        terms = [int(np.ceil(vec[p] * scale)) * x[i][p] for i, vec in row for p in range(vec.size)]
        model.add(sum(terms) <= peak)
    model.minimize(peak)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.Solve(model)
    return float(solver.Value(peak)) / scale
