"""MathOpt plumbing shared by the HiGHS MIP and the simplex LP: the model written straight
into a ``ModelProto`` from NumPy arrays (skipping the term-by-term Python builder: 2 s at 1,000
nodes in docs/solver-backends.md), its parameters, the call, and the values read back."""

from __future__ import annotations

import multiprocessing
import os
import time

import numpy as np

from solver.backends.formulation import Formulation


def model_proto(form: Formulation, factor: float = 1.0, integral: bool = True, *,
                integers: np.ndarray | None = None, upper: np.ndarray | None = None):
    """The model; ``integral`` makes every x integer, ``integers`` (a mask over all variables)
    only those it marks; ``upper`` replaces the variables' upper bounds of 1 (0 fixes one)."""
    from ortools.math_opt import model_pb2

    proto = model_pb2.ModelProto()
    nvar = form.num_vars
    proto.variables.ids.extend(range(nvar))
    proto.variables.lower_bounds.extend([0.0] * nvar)
    proto.variables.upper_bounds.extend([1.0] * nvar if upper is None else upper.tolist())
    if integers is None:
        proto.variables.integers.extend([integral] * form.num_x
                                        + [False] * (nvar - form.num_x))
    else:
        proto.variables.integers.extend(integers.tolist())
    nz = np.flatnonzero(form.obj)
    proto.objective.linear_coefficients.ids.extend(nz.tolist())
    proto.objective.linear_coefficients.values.extend((form.obj[nz] * factor).tolist())
    proto.objective.offset = form.constant * factor
    nrow = form.row_lo.size
    # memory rows stay in bytes: scaling them to units of the limit made HiGHS' incumbent
    # search much worse at 5,000 nodes (291,634 vs 127,397 after 45 s); ``solve`` re-checks
    # every returned plan against the exact float limit anyway
    proto.linear_constraints.ids.extend(range(nrow))
    proto.linear_constraints.lower_bounds.extend(form.row_lo.tolist())
    proto.linear_constraints.upper_bounds.extend(form.row_hi.tolist())
    order = np.lexsort((form.cols, form.rows))
    matrix = proto.linear_constraint_matrix
    matrix.row_ids.extend(form.rows[order].tolist())
    matrix.column_ids.extend(form.cols[order].tolist())
    matrix.coefficients.extend(form.coefs[order].tolist())
    return proto


def left(time_limit: float | None, started: float) -> float | None:
    """What is left of ``time_limit`` seconds counted from ``started`` (``perf_counter``):
    the solver's limit once its model is built, so that building a large model (seconds at
    700 k variables) does not run past the caller's limit."""
    return None if time_limit is None else max(time_limit - (time.perf_counter() - started),
                                                0.0)


def parameters(time_limit: float | None, gap: float, hint: np.ndarray | None,
                form: Formulation):
    from ortools.math_opt import model_parameters_pb2, parameters_pb2

    params = parameters_pb2.SolveParametersProto()
    params.relative_gap_tolerance = gap
    params.absolute_gap_tolerance = 0.0
    params.random_seed = 0
    if time_limit is not None:
        params.time_limit.FromNanoseconds(int(max(time_limit, 0.01) * 1e9))
    model_params = model_parameters_pb2.ModelSolveParametersProto()
    if hint is not None:
        values = form.hint(hint)
        solution_hint = model_params.solution_hints.add()
        solution_hint.variable_values.ids.extend(range(form.num_vars))
        solution_hint.variable_values.values.extend(values.tolist())
    return params, model_params


def run(proto, solver_type: str, params, model_params, interrupter=None, calling=None):
    """MathOpt's solve of ``proto`` (stopped early when ``interrupter``, a
    ``PySolveInterrupter``, is triggered from another thread; the solve releases the GIL).
    ``calling``, if given, is called right before the solve (``lp_race.SimplexRace.release``).
    HiGHS may fail with an internal error where it maps a
    solution found on its presolved model back (``HighsMipSolverData::
    transformNewIntegerFeasibleSolution``: a 2-option chain with overlap windows, seed 57 of
    tests/solver/test_windows.py); such a solve is run once more without presolve, which
    answers the same model, and only a second failure is raised."""
    from ortools.math_opt import parameters_pb2
    from ortools.math_opt.core.python import solver as core
    from ortools.math_opt.python import callback, init_arguments
    from pybind11_abseil.status import StatusNotOk

    def solve(parameters):
        return core.solve(proto, getattr(parameters_pb2, f"SOLVER_TYPE_{solver_type}"),
                          init_arguments.StreamableSolverInitArguments().to_proto(), parameters,
                          model_params, None, callback.CallbackRegistration().to_proto(), None,
                          interrupter)

    try:
        if calling is not None:
            calling()
        return solve(params)
    except StatusNotOk:
        if solver_type != "HIGHS" or params.presolve == parameters_pb2.EMPHASIS_OFF:
            raise
    retry = type(params)()
    retry.CopyFrom(params)
    retry.presolve = parameters_pb2.EMPHASIS_OFF
    return solve(retry)


# seconds a stoppable run may take past its limit before it is killed: HiGHS' own limit
# stops it first wherever HiGHS checks it (the kill is for where it does not)
KILL_GRACE_S = 1.0


def run_stoppable(proto, solver_type: str, params, model_params, time_limit: float | None):
    """``run`` that returns at ``time_limit`` (plus ``KILL_GRACE_S``) even where the solver
    does not check its limit, or ``None`` when it was stopped.

    HiGHS' barrier (IPX, with crossover) ignores both the time limit and MathOpt's
    interrupter (HiGHS 1.x in OR-Tools 9.15, measured: a 5 s limit and an interrupt at 15 s
    on the 710 k-variable LP of llama3-8b-shaped dp=4,fsdp=4,tp=4 with 4 layers, and the
    barrier ran on past 160 s; in a periodic search it ran 238 s past a 5 s limit). So the
    solve runs in a forked child process, its answer comes back through a pipe, and the
    child is killed at the deadline. Without a limit, or where ``fork`` is missing, it is
    ``run`` in this process. A child forked from a process with other threads (JAX loaded)
    could deadlock on a lock one of them held: it is then killed at the deadline like a
    barrier that overran, and the caller goes on without its answer.

    ``forkserver`` or ``spawn`` would avoid that risk (and the warning JAX, or Python 3.12
    itself, gives when a process with threads forks) but cost too much per call to adopt.
    Measured on a loaded 2-core machine with the barrier and crossover on the LP relaxation of
    the 363,680-variable, 24,427-row MIP of the llama3-8b-shaped 2-layer training graph on
    dp=4,fsdp=4,tp=4 (a 21.5 MB proto): the solve takes 4.3 s in this process and 4.4 s forked
    (one call each). At a 0.01 s limit (the child only builds HiGHS' model), a call takes
    (medians of 3) 1.48 s forked, 1.95 s with ``forkserver`` (server up, OR-Tools preloaded:
    the proto is pickled through a pipe) and 2.96 s with ``spawn`` (a fresh interpreter, the
    imports, the proto): +0.47 s and +1.48 s, 11 % and 34 % of that solve. On the same job's
    27,072-variable support LP (2.1 MB, 0.6 s): +0.10 s and +0.79 s, 17 % and 133 %."""
    if time_limit is None or not hasattr(os, "fork"):
        return run(proto, solver_type, params, model_params)
    from ortools.math_opt import result_pb2

    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(writer, proto, solver_type, params,
                                                 model_params), daemon=True)
    child.start()
    writer.close()
    try:
        if not reader.poll(max(time_limit, 0.0) + KILL_GRACE_S):
            return None
        result = result_pb2.SolveResultProto()
        result.ParseFromString(reader.recv_bytes())
        return result
    except EOFError:  # the child died without an answer
        return None
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        reader.close()


def _child(writer, proto, solver_type: str, params, model_params) -> None:
    writer.send_bytes(run(proto, solver_type, params, model_params).SerializeToString())
    writer.close()


def values(form: Formulation, primal) -> np.ndarray:
    values = np.zeros(form.num_vars)
    values[np.array(primal.variable_values.ids, dtype=np.int64)] = \
        np.array(primal.variable_values.values)
    return values
