"""The solver's input: one cost vector per node, one cost matrix per edge, optional memory.

A ``ChoiceProblem`` is numbers only (numbers in, choices out): it knows nothing of tensors or
meshes. It is canonicalised and validated in the constructor so an invalid problem cannot
exist: every array becomes float64, shapes are checked against the node sizes, and each error
names the node or edge index at fault.

Memory comes in one of two forms. ``node_memory`` gives bytes per option and the constraint is
the *sum* over nodes ≤ ``memory_limit``. ``liveness`` gives, per time step, the terms alive at
that step, and the constraint is that *every step's* sum ≤ ``memory_limit`` (a peak).

``windows`` add costs that are not sums: a :class:`Window` is a stretch of time in which several
streams run concurrently (a compute stream and a stream per link, say), and it lasts as long as
its busiest stream. Its cost is ``weight · max_s Σ(stream s's terms)``: still linear in a MIP
(a time variable above every stream), so plans stay provably optimal.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from solver.errors import InvalidProblemError, NoFiniteOptionError
from solver.row_sums import RowSums
from solver.span_rows import SpanRows, SpanSums

Edge = tuple[int, int, np.ndarray]
Term = tuple[int, np.ndarray]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Stream:
    """One stream of a :class:`Window`: its time is ``constant`` plus the chosen entry of each
    node vector and of each edge matrix (``(u, v, matrix)``, ``matrix[i, j]`` when u takes i
    and v takes j). Entries are finite: an impossible option is marked in ``node_costs``."""

    nodes: tuple[Term, ...] = ()
    edges: tuple[Edge, ...] = ()
    constant: float = 0.0

    def value(self, choices: Sequence[int]) -> float:
        total = self.constant + sum(float(vec[choices[n]]) for n, vec in self.nodes)
        return total + sum(float(m[choices[u], choices[v]]) for u, v, m in self.edges)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Window:
    """Streams that run at the same time; the window costs ``weight`` times its longest one.

    Example: compute of 3 units beside a link busy for 5: the window costs 5.

        >>> import numpy as np
        >>> w = Window(streams=(Stream(nodes=((0, np.array([3.0, 1.0])),)),
        ...                     Stream(nodes=((1, np.array([5.0, 0.0])),))))
        >>> w.value((0, 0)), w.value((1, 1))
        (5.0, 1.0)
    """

    streams: tuple[Stream, ...]
    weight: float = 1.0
    # windows of one group are alike (a model's layers): the solver may treat them alike
    group: Hashable | None = None

    def value(self, choices: Sequence[int]) -> float:
        """``weight · max`` over the streams, for an assignment."""
        return self.weight * max(stream.value(choices) for stream in self.streams)


def _vector(values: object, what: str, *, node: int | None = None) -> np.ndarray:
    if (isinstance(values, np.ndarray) and values.dtype == np.float64
            and not values.flags.writeable):
        array = values  # already immutable: no copy (liveness rows share their vectors)
    else:
        array = np.array(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        msg = f"{what} must be a non-empty 1-D array, got shape {array.shape}"
        raise InvalidProblemError(msg, node=node)
    if np.isnan(array).any():
        msg = f"{what} contains NaN; use np.inf to mark an impossible option"
        raise InvalidProblemError(msg, node=node)
    array.setflags(write=False)
    return array


def _check_node(index: object, count: int, what: str) -> int:
    if not isinstance(index, int | np.integer) or not 0 <= int(index) < count:
        msg = f"{what} refers to node {index!r}, but nodes are numbered 0..{count - 1}"
        raise InvalidProblemError(msg)
    return int(index)


class _CheckedRows(tuple):
    """Liveness rows already checked against ``sizes`` (node indices in range, read-only
    finite vectors of the node's size): a problem built from another's rows (a solver road
    that narrows or ties the problem) skips the check, which is a Python loop over every
    term (llama3.1-405b on 512 devices: ~13 M terms, ~35 s per problem, seven problems per
    memory-bound solve)."""

    sizes: tuple[int, ...]
    _sums: RowSums | None

    def __new__(cls, steps: list[tuple[Term, ...]], sizes: list[int]) -> _CheckedRows:
        rows = super().__new__(cls, steps)
        rows.sizes = tuple(sizes)
        rows._sums = None
        return rows

    def sums(self) -> RowSums:
        """The rows compiled for evaluation, once for every problem that shares them."""
        if self._sums is None:
            self._sums = RowSums.compile(self)
        return self._sums

    def __reduce__(self):  # pickled as a plain tuple: checked again where it is loaded
        return tuple, (tuple(self),)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ChoiceProblem:
    """Pick one option per node minimising node plus edge costs under a memory limit.

    Args:
        node_costs: per node, the cost (seconds) of each option; ``np.inf`` = impossible.
        edges: ``(u, v, matrix)`` with ``matrix[i, j]`` the cost of u taking i and v taking j.
            Several edges between the same pair are allowed; their costs add up.
        node_memory: per node, bytes per option (the sum over nodes must fit the limit).
        memory_limit: bytes; ``None`` means unconstrained.
        groups: lists of nodes that must take the same option index.
        liveness: per time step, ``(node, vector)`` terms; each step's sum must fit the limit.
            A :class:`~solver.span_rows.SpanRows` gives the same rows as spans of steps
            (a term alive over consecutive steps), checked and evaluated per span.
        windows: costs of concurrent work (see the module docstring), added to the objective.
        blocks: a claim that the problem is a chain of repeated blocks (a model's layers):
            ``blocks[k][r]`` is the r-th node of block k, blocks in chain order, every block
            the same length with matching option counts position by position. It is only a
            hint: ``solve`` checks which blocks really are identical (costs and edges) and
            exploits the periodic structure only where the check passes.

    Example:
        >>> import numpy as np
        >>> p = ChoiceProblem(node_costs=[[1.0, 2.0], [3.0, 1.0]],
        ...                   edges=[(0, 1, np.array([[0.0, 5.0], [5.0, 0.0]]))])
        >>> p.evaluate((0, 0))
        4.0
    """

    node_costs: tuple[np.ndarray, ...]
    edges: tuple[Edge, ...] = ()
    node_memory: tuple[np.ndarray, ...] | None = None
    memory_limit: float | None = None
    groups: tuple[tuple[int, ...], ...] | None = None
    liveness: tuple[tuple[Term, ...], ...] | SpanRows | None = None
    blocks: tuple[tuple[int, ...], ...] | None = None
    windows: tuple[Window, ...] = ()

    def __post_init__(self) -> None:
        costs = tuple(_vector(c, f"node_costs[{i}]", node=i)
                      for i, c in enumerate(self.node_costs))
        if not costs:
            raise InvalidProblemError("a ChoiceProblem needs at least one node")
        for i, c in enumerate(costs):
            if not np.isfinite(c).any():
                msg = (f"node {i} has no option of finite cost ({c.size} options, all inf); "
                       f"give it at least one possible option")
                raise NoFiniteOptionError(msg, node=i)
            if np.isneginf(c).any():
                raise InvalidProblemError(f"node_costs[{i}] contains -inf", node=i)
        object.__setattr__(self, "node_costs", costs)
        sizes = [c.size for c in costs]
        object.__setattr__(self, "edges", self._edges(sizes))
        object.__setattr__(self, "node_memory", self._memory(sizes))
        object.__setattr__(self, "groups", self._groups(sizes))
        object.__setattr__(self, "liveness", self._liveness(sizes))
        object.__setattr__(self, "blocks", self._blocks(sizes))
        object.__setattr__(self, "windows", self._windows(sizes))
        if self.memory_limit is not None:
            limit = float(self.memory_limit)
            if np.isnan(limit):
                raise InvalidProblemError("memory_limit is NaN")
            object.__setattr__(self, "memory_limit", limit)

    def _edges(self, sizes: list[int]) -> tuple[Edge, ...]:
        out = []
        checked: dict[int, np.ndarray] = {}  # planners share one matrix among many edges
        for e, edge in enumerate(self.edges):
            if len(edge) != 3:
                raise InvalidProblemError(f"edge {e} must be (u, v, matrix)", edge=e)
            u = _check_node(edge[0], len(sizes), f"edge {e}")
            v = _check_node(edge[1], len(sizes), f"edge {e}")
            seen = checked.get(id(edge[2]))
            if seen is not None and seen.shape == (sizes[u], sizes[v]):
                out.append((u, v, seen))
                continue
            given = edge[2]
            if (isinstance(given, np.ndarray) and given.dtype == np.float64
                    and not given.flags.writeable):
                matrix = given  # immutable already: shared, not copied (405b: 8 GB of copies)
            else:
                matrix = np.array(given, dtype=np.float64)
            checked[id(edge[2])] = matrix
            if matrix.shape != (sizes[u], sizes[v]):
                msg = (f"edge {e} ({u}->{v}) has a matrix of shape {matrix.shape}, expected "
                       f"({sizes[u]}, {sizes[v]}) from the option counts of nodes {u} and {v}")
                raise InvalidProblemError(msg, edge=e)
            if np.isnan(matrix).any() or np.isneginf(matrix).any():
                raise InvalidProblemError(f"edge {e} ({u}->{v}) contains NaN or -inf", edge=e)
            matrix.setflags(write=False)
            out.append((u, v, matrix))
        return tuple(out)

    def _memory(self, sizes: list[int]) -> tuple[np.ndarray, ...] | None:
        if self.node_memory is None:
            return None
        if len(self.node_memory) != len(sizes):
            msg = (f"node_memory has {len(self.node_memory)} entries but there are "
                   f"{len(sizes)} nodes")
            raise InvalidProblemError(msg)
        memory = tuple(_vector(m, f"node_memory[{i}]", node=i)
                       for i, m in enumerate(self.node_memory))
        for i, m in enumerate(memory):
            if m.size != sizes[i] or not np.isfinite(m).all():
                msg = (f"node_memory[{i}] must hold {sizes[i]} finite values, got "
                       f"{m.size} values")
                raise InvalidProblemError(msg, node=i)
        return memory

    def _groups(self, sizes: list[int]) -> tuple[tuple[int, ...], ...] | None:
        if self.groups is None:
            return None
        seen: dict[int, int] = {}
        out = []
        for g, group in enumerate(self.groups):
            members = tuple(sorted({_check_node(i, len(sizes), f"group {g}") for i in group}))
            for i in members:
                if sizes[i] != sizes[members[0]]:
                    msg = (f"group {g} mixes node {members[0]} ({sizes[members[0]]} options) "
                           f"and node {i} ({sizes[i]} options); grouped nodes must have the "
                           f"same number of options")
                    raise InvalidProblemError(msg, node=i)
                if i in seen:
                    msg = f"node {i} is in group {seen[i]} and group {g}; merge the groups"
                    raise InvalidProblemError(msg, node=i)
                seen[i] = g
            out.append(members)
        return tuple(out)

    def _liveness(self, sizes: list[int]) -> tuple[tuple[Term, ...], ...] | SpanRows | None:
        if self.liveness is None:
            return None
        if isinstance(self.liveness, SpanRows):
            problem = self.liveness.check(sizes)
            if problem is not None:
                raise InvalidProblemError(problem)
            return self.liveness
        if isinstance(self.liveness, _CheckedRows) and self.liveness.sizes == tuple(sizes):
            return self.liveness  # checked when an earlier problem was built from them
        steps = []
        checked: dict[int, np.ndarray] = {}  # the same vector recurs in every step it lives
        # and the same (node, vector) pair too, when the rows were built to share them: such
        # a pair is checked once (a row of 5,600 pairs in 0.2 ms instead of 5 ms)
        pairs: dict[int, tuple[int, np.ndarray]] = {}
        for t, step in enumerate(self.liveness):
            terms = [pairs.get(id(term)) for term in step]
            if None in terms:
                for k, term in enumerate(step):
                    if terms[k] is None:
                        terms[k] = self._term(t, term, sizes, checked, pairs)
            steps.append(tuple(terms))
        return _CheckedRows(steps, sizes)

    @staticmethod
    def _term(t: int, term: Term, sizes: list[int], checked: dict[int, np.ndarray],
              pairs: dict[int, tuple[int, np.ndarray]]) -> tuple[int, np.ndarray]:
        """One liveness term checked (its vector checked once per object, its pair
        registered in ``pairs`` when it is already in its checked form)."""
        node = _check_node(term[0], len(sizes), f"liveness step {t}")
        vec = checked.get(id(term[1]))
        if vec is None or vec.size != sizes[node]:
            vec = _vector(term[1], f"liveness step {t} term of node {node}", node=node)
            checked[id(term[1])] = vec
            if vec.size != sizes[node] or not np.isfinite(vec).all():
                msg = (f"liveness step {t}: the term of node {node} must hold "
                       f"{sizes[node]} finite values, got {vec.size}")
                raise InvalidProblemError(msg, node=node)
        if type(term) is tuple and len(term) == 2 and type(term[0]) is int and term[1] is vec:
            pairs[id(term)] = term  # already in its checked form: shared as it is
            return term
        return (node, vec)

    def _blocks(self, sizes: list[int]) -> tuple[tuple[int, ...], ...] | None:
        if self.blocks is None:
            return None
        blocks = tuple(tuple(_check_node(i, len(sizes), f"block {k}") for i in block)
                       for k, block in enumerate(self.blocks))
        seen: set[int] = set()
        for k, block in enumerate(blocks):
            if len(block) != len(blocks[0]):
                msg = (f"block {k} has {len(block)} nodes but block 0 has {len(blocks[0])}; "
                       "repeated blocks must have the same nodes position by position")
                raise InvalidProblemError(msg)
            for r, (node, first) in enumerate(zip(block, blocks[0], strict=True)):
                if sizes[node] != sizes[first]:
                    msg = (f"block {k} position {r} (node {node}) has {sizes[node]} options "
                           f"but block 0's node {first} has {sizes[first]}")
                    raise InvalidProblemError(msg, node=node)
                if node in seen:
                    raise InvalidProblemError(f"node {node} is in two blocks", node=node)
                seen.add(node)
        return blocks

    def _windows(self, sizes: list[int]) -> tuple[Window, ...]:
        out = []
        for w, window in enumerate(self.windows):
            if not isinstance(window, Window) or not window.streams:
                raise InvalidProblemError(f"window {w} must be a Window with at least one stream")
            weight = float(window.weight)
            if not np.isfinite(weight) or weight < 0:
                raise InvalidProblemError(f"window {w} has weight {window.weight!r}; it must be "
                                          "finite and non-negative")
            streams = tuple(self._stream(sizes, f"window {w} stream {s}", stream)
                            for s, stream in enumerate(window.streams))
            try:
                hash(window.group)
            except TypeError:
                raise InvalidProblemError(f"window {w} has an unhashable group") from None
            out.append(Window(streams=streams, weight=weight, group=window.group))
        return tuple(out)

    def _stream(self, sizes: list[int], what: str, stream: Stream) -> Stream:
        nodes = []
        for node, vec in stream.nodes:
            node = _check_node(node, len(sizes), what)
            vec = _vector(vec, f"{what} term of node {node}", node=node)
            if vec.size != sizes[node] or not np.isfinite(vec).all():
                msg = f"{what}: the term of node {node} must hold {sizes[node]} finite values"
                raise InvalidProblemError(msg, node=node)
            nodes.append((node, vec))
        edges = []
        for u, v, matrix in stream.edges:
            u, v = _check_node(u, len(sizes), what), _check_node(v, len(sizes), what)
            matrix = np.array(matrix, dtype=np.float64)
            if matrix.shape != (sizes[u], sizes[v]) or not np.isfinite(matrix).all() or u == v:
                msg = (f"{what}: the edge term {u}->{v} must be a finite ({sizes[u]}, "
                       f"{sizes[v]}) matrix between two different nodes")
                raise InvalidProblemError(msg)
            matrix.setflags(write=False)
            edges.append((u, v, matrix))
        constant = float(stream.constant)
        if not np.isfinite(constant):
            raise InvalidProblemError(f"{what} has a non-finite constant")
        return Stream(nodes=tuple(nodes), edges=tuple(edges), constant=constant)

    @property
    def num_nodes(self) -> int:
        return len(self.node_costs)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(c.size for c in self.node_costs)

    def memory_rows(self) -> Sequence[Sequence[Term]]:
        """The memory constraint as rows of terms, each row's sum ≤ the limit (the rows are
        shared, not copied: 45 M terms on llama3.1-405b; rows given as spans are built
        only as they are read)."""
        if isinstance(self.liveness, SpanRows):
            return self.liveness
        if self.liveness is not None:
            return list(self.liveness)
        if self.node_memory is not None:
            return [list(enumerate(self.node_memory))]
        return []

    def compiled_rows(self) -> RowSums | SpanSums:
        """Every memory row compiled (:class:`RowSums`, :class:`SpanSums` for spans): the
        rows' own cached copy when they were checked, compiled here otherwise."""
        if isinstance(self.liveness, _CheckedRows | SpanRows) and self.liveness:
            return self.liveness.sums()
        return RowSums.compile(self.memory_rows())

    def row_sums(self, choices: Sequence[int]) -> np.ndarray | None:
        """Every memory row's sum for an assignment (``None`` without memory)."""
        if isinstance(self.liveness, _CheckedRows | SpanRows) and self.liveness:
            return self.liveness.sums().sums(choices)
        rows = self.memory_rows()
        if not rows:
            return None
        return np.array([sum(float(vec[choices[n]]) for n, vec in row) for row in rows])

    def memory_row_entries(self) -> int:
        """How many option entries the memory rows hold written out term by term: the size a
        MIP with every row pays for (spans counted without building their rows)."""
        if isinstance(self.liveness, SpanRows):
            return sum((span.stop - span.first) * span.vector.size
                       for span in self.liveness.spans)
        return sum(vec.size for row in self.memory_rows() for _, vec in row)

    def memory_totals(self) -> list[np.ndarray]:
        """Per node, the bytes each option adds summed over every memory row (zeros without
        memory): compiled row sums when the rows were checked, term by term otherwise."""
        sizes = self.sizes
        if isinstance(self.liveness, _CheckedRows | SpanRows) and self.liveness:
            return self.liveness.sums().node_totals(sizes)
        totals = [np.zeros(size) for size in sizes]
        for row in self.memory_rows():
            for node, vector in row:
                totals[node] += vector
        return totals

    def evaluate(self, choices: Sequence[int]) -> float:
        """Total float cost of an assignment (node costs plus edge costs)."""
        total = sum(float(c[i]) for c, i in zip(self.node_costs, choices, strict=True))
        for u, v, matrix in self.edges:
            total += float(matrix[choices[u], choices[v]])
        return total + sum(window.value(choices) for window in self.windows)

    def peak_memory(self, choices: Sequence[int]) -> float | None:
        """Memory of an assignment: the row sum, or the largest liveness step."""
        sums = self.row_sums(choices)
        if sums is None:
            return None
        return float(sums.max()) if sums.size else 0.0
