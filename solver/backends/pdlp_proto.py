"""PDLP on a mid-size LP through MathOpt's model proto (``solver.backends.lp`` decides when).

Mid-size LPs without memory rows (``lp.PDLP_TRY_VARS`` variables and up) try PDLP first, for at
most ``lp.PDLP_TRY_ITERATIONS``, and go to the dual simplex only if it did not converge. Under
measured-curve link prices every reshard has its own latency floor and bandwidth ramp, so the
periodic LPs have ~2x the distinct prices of alpha-beta ones and little of the degeneracy the
simplex feeds on: Glop needs ~10,000 iterations where alpha-beta LPs need 1,400–3,000. PDLP
does not care: it converges on the tight, integral ones in under a thousand (seconds on one
loaded 2-core machine, the LPs as ``periodic_lp`` writes them, training with the dgx-h100
preset: gpt2 dp=2,tp=4, 55 k variables: Glop 10,157 iterations, 1.7 s; PDLP 896 iterations,
0.33 s at its default settings, 640 with ``SMOOTHING``; llama3-8b dp=8,tp=8, 46 k: Glop
10,323, 1.5 s; PDLP 1,152, 0.38 s, then 704, its bound at the plan). ``lp`` asks for a tenth
of the tolerance of large LPs (1e-7 at the default gap): 704 and 832 iterations, bounds within
1e-13 of the plans, and x that rounds to the optimal plan, where llama3-8b's at 1e-6 rounded
to one 5.5e-7 above it (inside the gap, so the search stopped there).
Where the LP optimum is fractional it crawls (llama3-70b dp=8,tp=8, 43 k variables, 39 split
nodes: not converged after 30,000 iterations), and some tight ones converge late
(mixtral-8x7b ep=8,tp=8, 53 k: 2,624 iterations at 1e-7), so the cap bounds what a miss
costs (~0.3 s of CPU). The alpha-beta LPs of these jobs have 17–35 k variables and stay with
the simplex, which is faster on them (gpt2: 0.10 s against PDLP's 0.20 s).

The large LPs go to PDLP's own Python binding, which takes a SciPy matrix (no proto of a
million terms). Below a few hundred thousand variables the proto costs ~0.05 s, while the
binding's first call imports ``scipy.sparse`` (0.15–0.25 s on the 2-core machine under load,
measured on gpt2's periodic LP), which nothing else in a plan needs. The same PDLP runs
either way: the same parameters give the same iterations and the same bound to the last bit
(gpt2 training dp=2,tp=4 with measured-curve prices: 896 iterations, bound
0.016670547397551055 both ways, at PDLP's default smoothing).

MathOpt refuses the generic parameters PDLP does not support (``random_seed``, the gap
tolerances), so they are left unset; PDLP's own termination criteria decide.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.backends import mathopt
from solver.backends.formulation import Formulation
from solver.backends.pdlp_run import MAJOR_ITERATIONS, SMOOTHING, configure


@dataclass(frozen=True, slots=True, eq=False)
class FirstOrderRun:
    """PDLP's last iterate: ``x`` and ``duals`` (``None`` when it returned none), whether it
    met its tolerance (``converged``) and how many iterations it took."""

    x: np.ndarray | None
    duals: np.ndarray | None
    converged: bool
    iterations: int


def run_pdlp(form: Formulation, factor: float, time_limit: float | None, *, eps: float,
             max_iterations: int, threads: int, shards: int, proto=None,
             calling=None, major: int = MAJOR_ITERATIONS) -> FirstOrderRun:
    """PDLP without restarts (primal weight smoothing ``SMOOTHING``) on ``form`` (objective
    scaled by ``factor``) to relative and absolute tolerance ``eps``, for at most
    ``max_iterations`` (a count: the same answer on every machine) and ``time_limit``
    seconds, with a major iteration every ``major`` (``pdlp_run.MAJOR_ITERATIONS``).
    ``shards`` fixes the summation order, so the answer does not depend on ``threads``.
    ``proto``: the LP's model proto if already built (``mathopt.model_proto(form, factor,
    integral=False)``, shared with the simplex that races this run in
    ``solver.backends.lp``); ``calling`` is called right before the solve (``mathopt.run``)."""
    from ortools.math_opt import parameters_pb2, result_pb2

    params = parameters_pb2.SolveParametersProto()
    if time_limit is not None:
        params.time_limit.FromNanoseconds(int(max(time_limit, 0.01) * 1e9))
    configure(params.pdlp, eps=eps, iterations=max_iterations, threads=threads, shards=shards,
              smoothing=SMOOTHING, major=major)
    _, model_params = mathopt.parameters(None, 0.0, None, form)
    if proto is None:
        proto = mathopt.model_proto(form, factor, integral=False)
    result = mathopt.run(proto, "PDLP", params, model_params, calling=calling)
    converged = result.termination.reason == result_pb2.TERMINATION_REASON_OPTIMAL
    iterations = int(result.solve_stats.first_order_iterations)
    if not result.solutions:
        return FirstOrderRun(None, None, False, iterations)
    solution = result.solutions[0]
    x = mathopt.values(form, solution.primal_solution) \
        if solution.HasField("primal_solution") else None
    duals = None
    if solution.HasField("dual_solution"):
        values = solution.dual_solution.dual_values
        duals = np.zeros(form.row_lo.size)
        duals[np.array(values.ids, dtype=np.int64)] = np.array(values.values)
    return FirstOrderRun(x, duals, converged, iterations)
