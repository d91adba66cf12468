"""The cheapest fitting mix of two plans of a chain, block by block, proven by a small MIP.

Where memory binds, the optimum of a chain of identical layers often mixes strategies: some
layers keep the cheap plan that does not fit, the others take one that saves memory. The
memory price (:mod:`solver.memory_price`) returns plans with identical interior blocks, so it
cannot express that; this module searches the mixes exactly. Given a plan ``cheap`` and a plan
``fitting``, every *unit* (each block of the chain, and the rest of the problem as one more
unit) takes either plan's choices at all its nodes: a binary ``s_u`` (1: cheap). The cost of
a mix is

    cost(fitting) + Σ_u l_u·s_u + Σ_{u<v} q_uv·s_u·s_v

(node costs and edges inside a unit are linear in ``s_u``; an edge between two units costs
one of four entries of its 2x2 table, whose interaction ``q`` is linearised exactly with one
continuous ``z_uv ∈ [0, 1]`` per pair: ``z ≥ s_u + s_v − 1`` when ``q > 0``, ``z ≤ s_u``,
``z ≤ s_v`` when ``q < 0``; exact at binary ``s``: Glover and Woolsey 1974, "Converting
the 0-1 Polynomial Programming Problem to a 0-1 Linear Program", Operations Research 22(1)), and
every memory row is linear: ``base_r + Σ_u D_ru·s_u ≤ limit``, where ``D_ru`` is what unit
``u`` adds to row ``r`` when it switches to the cheap plan. Rows that cannot bind even with
every unit cheap are dropped, identical rows kept once. The MIP has one binary per unit
(127 on llama3.1-405b, solved in 1.7-2.8 s) and is optimal over all ``2^units`` mixes (HiGHS,
relative gap 1e-9 on a scaled objective); an exhaustive search over the mixes checks it in the
tests. The answer is re-scored on the problem (``evaluate`` and ``peak_memory``) before it is
returned.

It is a restriction (only these two plans' choices, unit by unit): the caller states the gap
to a proven bound of the unrestricted problem beside it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import numpy as np

from solver.problem import ChoiceProblem

logger = logging.getLogger(__name__)

OBJECTIVE_SCALE = 1e6  # the MIP's objective in millionths of the fitting plan's cost


def _unit_of(problem: ChoiceProblem, units: Sequence[Sequence[int]]) -> np.ndarray:
    unit = np.full(problem.num_nodes, -1, dtype=np.int64)
    for u, nodes in enumerate(units):
        unit[np.asarray(nodes, dtype=np.int64)] = u
    if (unit < 0).any():
        raise ValueError("the units must cover every node")
    return unit


def _costs(problem: ChoiceProblem, unit: np.ndarray, count: int, cheap: np.ndarray,
           fitting: np.ndarray) -> tuple[np.ndarray, dict[tuple[int, int], np.ndarray]]:
    """Linear coefficients per unit and the 2x2 table (rows: unit u fitting/cheap, columns:
    unit v) of every pair of units joined by edges, relative to the all-fitting plan."""
    linear = np.zeros(count)
    for n, cost in enumerate(problem.node_costs):
        if cheap[n] != fitting[n]:
            linear[unit[n]] += cost[cheap[n]] - cost[fitting[n]]
    pairs: dict[tuple[int, int], np.ndarray] = {}
    for x, y, matrix in problem.edges:
        ux, uy = int(unit[x]), int(unit[y])
        if cheap[x] == fitting[x] and cheap[y] == fitting[y]:
            continue
        if ux == uy:
            linear[ux] += matrix[cheap[x], cheap[y]] - matrix[fitting[x], fitting[y]]
            continue
        rows, columns = (fitting[x], cheap[x]), (fitting[y], cheap[y])
        table = matrix[np.ix_(rows, columns)] - matrix[fitting[x], fitting[y]]
        if ux > uy:
            ux, uy, table = uy, ux, table.T
        pairs[(ux, uy)] = pairs.get((ux, uy), np.zeros((2, 2))) + table
    return linear, pairs


def _memory_constraint(problem: ChoiceProblem, unit: np.ndarray, count: int,
                       cheap: np.ndarray, fitting: np.ndarray, width: int
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """The memory rows that can bind (with every unit cheap they would exceed the limit),
    each kept once, in units of the limit (matrix, upper bounds); ``None`` when none
    can."""
    limit = float(problem.memory_limit)
    # shared with the problem's own evaluations
    base, deltas = problem.compiled_rows().switch_deltas(unit, count, cheap, fitting)
    binding = base + np.maximum(deltas, 0.0).sum(axis=1) > limit
    kept = np.unique(np.column_stack((deltas[binding], base[binding])), axis=0)
    if not kept.size:
        return None
    matrix = np.zeros((kept.shape[0], width))
    matrix[:, :count] = kept[:, :count] / limit
    return matrix, 1.0 - kept[:, count] / limit


def _linearised(linear: np.ndarray, pairs: dict[tuple[int, int], np.ndarray], count: int
                ) -> tuple[np.ndarray, list[np.ndarray], list[float]]:
    """The MIP's objective over ``[s (count), z (one per interacting pair)]`` and its product
    rows (``row · x ≤ upper``); an impossible combination of two units (an infinite entry of
    their table) becomes a row that forbids it."""
    keys = [key for key, table in pairs.items()
            if table[1, 1] - table[1, 0] - table[0, 1] != 0.0 or not np.isfinite(table).all()]
    c = np.concatenate((linear, np.zeros(len(keys))))
    rows: list[np.ndarray] = []
    upper: list[float] = []

    def row(entries: dict[int, float], bound: float) -> None:
        vector = np.zeros(c.size)
        for index, value in entries.items():
            vector[index] += value
        rows.append(vector)
        upper.append(bound)

    for k, (u, v) in enumerate(keys):
        table, z = pairs[(u, v)], count + k
        if not np.isfinite(table[1, 0]):
            row({u: 1.0, v: -1.0}, 0.0)  # u cheap needs v cheap
        if not np.isfinite(table[0, 1]):
            row({v: 1.0, u: -1.0}, 0.0)
        if not np.isfinite(table[1, 1]):
            row({u: 1.0, v: 1.0}, 1.0)
        finite = np.where(np.isfinite(table), table, 0.0)
        c[u] += finite[1, 0]
        c[v] += finite[0, 1]
        q = finite[1, 1] - finite[1, 0] - finite[0, 1]
        c[z] = q
        if q > 0:
            row({u: 1.0, v: 1.0, z: -1.0}, 1.0)
        else:
            row({z: 1.0, u: -1.0}, 0.0)
            row({z: 1.0, v: -1.0}, 0.0)
    interacting = set(keys)
    for (u, v), table in pairs.items():
        if (u, v) not in interacting:
            c[u] += table[1, 0]
            c[v] += table[0, 1]
    return c, rows, upper


def best_mix(problem: ChoiceProblem, units: Sequence[Sequence[int]], cheap: Sequence[int],
             fitting: Sequence[int], time_limit: float | None = None
             ) -> tuple[tuple[int, ...], float] | None:
    """The cheapest plan that fits whose every unit takes all of ``cheap``'s or all of
    ``fitting``'s choices, with its cost; ``None`` when no mix is cheaper than
    ``fitting`` (or the problem has windows, whose max terms this does not
    model). ``units`` partition the nodes; ``fitting`` must fit the memory limit.

    Example (two units; switching both to the cheap plan overflows the memory, one fits):
        >>> import numpy as np
        >>> p = ChoiceProblem(node_costs=[[2.0, 1.0], [2.0, 1.5]],
        ...                   node_memory=[[1.0, 3.0], [1.0, 3.0]], memory_limit=4.0)
        >>> best_mix(p, [[0], [1]], cheap=(1, 1), fitting=(0, 0))
        ((1, 0), 3.0)
    """
    if problem.windows:
        return None
    # scipy.optimize is slow to import (~35 MB): only chains whose memory binds get here
    from scipy.optimize import Bounds, LinearConstraint, milp

    cheap_a = np.asarray(cheap, dtype=np.int64)
    fitting_a = np.asarray(fitting, dtype=np.int64)
    unit = _unit_of(problem, units)
    count = len(units)
    linear, pairs = _costs(problem, unit, count, cheap_a, fitting_a)
    c, rows, upper = _linearised(linear, pairs, count)
    keys_count = c.size - count
    constraints = []
    if rows:
        constraints.append(LinearConstraint(np.array(rows), -np.inf, np.array(upper)))
    limit = problem.memory_limit
    if limit is not None and problem.memory_rows():
        memory = _memory_constraint(problem, unit, count, cheap_a, fitting_a, c.size)
        if memory is not None:
            constraints.append(LinearConstraint(memory[0], -np.inf, memory[1]))
    fitting_cost = problem.evaluate(fitting_a)
    scale = OBJECTIVE_SCALE / max(abs(fitting_cost), 1e-300)
    options = {"mip_rel_gap": 1e-9}
    if time_limit is not None:
        options["time_limit"] = max(time_limit, 0.01)
    integrality = np.concatenate((np.ones(count), np.zeros(keys_count)))
    answer = milp(c * scale, constraints=constraints, integrality=integrality,
                  bounds=Bounds(0.0, 1.0), options=options)
    if answer.x is None:
        return None
    chosen = np.round(answer.x[:count]).astype(bool)
    mix = np.where(chosen[unit], cheap_a, fitting_a)
    choices = tuple(int(i) for i in mix)
    cost = problem.evaluate(choices)
    peak = problem.peak_memory(choices)
    fits = peak is None or limit is None or peak <= limit
    logger.info("block mix: %d of %d units cheap, plan %.10g (fitting %.10g), %s, %s",
                int(chosen.sum()), count, cost, fitting_cost, "fits" if fits else "overflows",
                "optimal" if answer.status == 0 else answer.message)
    if not fits or not math.isfinite(cost) or cost >= fitting_cost:
        return None
    return choices, cost
