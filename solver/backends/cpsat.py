"""CP-SAT on the aggregated marginal formulation, tuned as docs/solver-backends.md recommends.

Costs become integers at a resolution chosen so the largest possible objective is about 2^40
units; each active term then carries at most half a unit of rounding error, which is
subtracted from the returned bound so it stays a certified bound of the float problem. Memory
is rounded up per option and the limit down, so an integer-feasible plan truly fits (integral
byte counts are kept exact). One worker with ``linearization_level=2`` is one of the two
settings that prove the 100-node reference instance optimal in 6 s, and it is deterministic.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from solver.backends.formulation import Formulation, WindowMap, build, decode
from solver.backends.result import BackendResult
from solver.compact import Indexed

logger = logging.getLogger(__name__)

OBJECTIVE_UNITS = 2.0**40
# With windows the time variables are integers ranging over up to this many units; at 2^40
# CP-SAT proved a plan optimal that was 3 % above the true optimum (its LP relaxation loses
# precision on domains that wide); at 2^32 it found the optimum, the rounding error stays
# far below the 1e-6 gap (tests/solver/test_windows.py checks it on random problems)
WINDOW_UNITS = 2.0**32


def _scale(values: np.ndarray, units: float) -> float:
    finite = np.abs(values[np.isfinite(values)])
    top = float(finite.sum()) if finite.size else 0.0
    return units / top if top > 0 else 1.0


def _memory_ints(form: Formulation, ix: Indexed) -> tuple[np.ndarray, float, float]:
    """Integer memory coefficients (rounded up) and the scale used."""
    mask = np.isin(form.rows, np.array(form.memory_rows, dtype=np.int64))
    coefs = form.coefs[mask]
    integral = bool(np.all(coefs == np.round(coefs))) and float(np.abs(coefs).sum()) < 2**52
    scale = 1.0 if integral else _scale(coefs, OBJECTIVE_UNITS)
    return mask, scale, float(np.floor(ix.limit * scale)) if ix.limit is not None else 0.0


def _window_error(window: WindowMap, scale: float) -> float:
    """What rounding a window's row to units may cost its time, weighted: half a unit per
    active term (one per node term and per edge term at an integral point), one for the
    floored right-hand side, and a weight that is not a whole number."""
    terms = max(len(stream.nodes) + len(stream.edges) for stream in window.window.streams)
    weight = window.window.weight
    return (round(weight) * (0.5 * terms + 1) / scale
            + abs(weight - round(weight)) * window.span)


def solve_cpsat(ix: Indexed, hint: np.ndarray | None, time_limit: float | None,
                gap: float) -> BackendResult:
    from ortools.sat.python import cp_model

    form = build(ix)
    scale = _scale(form.obj, WINDOW_UNITS if form.window_maps else OBJECTIVE_UNITS)
    model = cp_model.CpModel()
    windows = {w.var: w for w in form.window_maps}
    slack = ix.n + len(ix.edges) + 2  # room for the rows' rounding (_window_error)
    variables = [model.new_int_var(0, math.ceil(windows[i].span * scale) + slack, f"t{i}")
                 if i in windows else model.new_bool_var(f"v{i}") for i in range(form.num_vars)]
    int_coefs = np.ceil(form.coefs).astype(np.int64)
    window_rows = {row: w for w in form.window_maps for row in w.rows}
    mem_mask, mem_scale, mem_limit = _memory_ints(form, ix) if form.memory_rows else \
        (np.zeros(form.rows.size, dtype=bool), 1.0, 0.0)
    int_coefs[mem_mask] = np.ceil(form.coefs[mem_mask] * mem_scale).astype(np.int64)
    order = np.argsort(form.rows, kind="stable")
    bounds = np.searchsorted(form.rows[order], np.arange(form.row_lo.size + 1))
    memory_rows = set(form.memory_rows)
    for r in range(form.row_lo.size):
        sel = order[bounds[r]:bounds[r + 1]]
        expr = cp_model.LinearExpr.weighted_sum([variables[c] for c in form.cols[sel]],
                                                 int_coefs[sel].tolist())
        if r in memory_rows:
            lower = int(np.sum(np.minimum(int_coefs[sel], 0)))
            model.add_linear_constraint(expr, lower, int(mem_limit))
        elif r in window_rows:  # in units of 1/scale s; t counts them (coefficient 1)
            t = window_rows[r].var
            units = [1 if c == t else round(k * scale)
                     for c, k in zip(form.cols[sel].tolist(), form.coefs[sel].tolist(),
                                     strict=True)]
            expr = cp_model.LinearExpr.weighted_sum([variables[c] for c in form.cols[sel]],
                                                    units)
            model.add(expr >= math.floor(float(form.row_lo[r]) * scale))
        else:
            model.add_linear_constraint(expr, int(form.row_lo[r]), int(form.row_hi[r]))
    obj_ints = np.round(form.obj * scale).astype(np.int64)
    for var, window in windows.items():  # t counts units of the window's time already
        obj_ints[var] = round(window.window.weight)  # (its rounding: _window_error)
    nz = np.flatnonzero(obj_ints)
    model.minimize(cp_model.LinearExpr.weighted_sum([variables[i] for i in nz],
                                                    obj_ints[nz].tolist()))
    if hint is not None:
        values = form.hint(hint)
        for var, window in windows.items():
            values[var] = math.ceil(values[var] * window.span * scale)
        for var, value in zip(variables, values.astype(np.int64).tolist(), strict=True):
            model.add_hint(var, value)
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.num_workers = 1
    params.linearization_level = 2
    params.relative_gap_limit = gap
    if time_limit is not None:
        params.max_time_in_seconds = max(time_limit, 0.01)
    status = solver.Solve(model)
    error = 0.5 * (ix.n + len(ix.edges)) / scale if np.any(form.obj) else 0.0
    error += sum(_window_error(window, scale) for window in windows.values())
    if status == cp_model.INFEASIBLE:
        return BackendResult(x=None, bound=math.inf, timed_out=False, infeasible=True)
    bound = solver.BestObjectiveBound() / scale - error + form.constant
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return BackendResult(x=None, bound=bound if status != cp_model.MODEL_INVALID else
                             -math.inf, timed_out=True)
    values = np.array([solver.Value(variables[i]) for i in range(form.num_x)], dtype=float)
    values = np.concatenate([values, np.zeros(form.num_vars - form.num_x)])
    return BackendResult(x=decode(form, values), bound=bound,
                         timed_out=status != cp_model.OPTIMAL)
