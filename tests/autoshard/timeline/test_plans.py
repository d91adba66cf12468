"""Traces of real plans, read back from the file by the format reader in tests/support.

Hand plans (``--strategy`` ddp, zero1, zero2, fsdp, megatron) and the search, with one and
three micro-batches, with nothing overlapped and with the op overlap model (and the layer
model on a few): each trace must end at the plan's step time, show every run of every op and
collective exactly once, never put an exposed collective beside compute, and put each hidden
collective beside the op it hides behind.
"""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict

import pytest

import autoshard
from autoshard.planning.record import Plan
from autoshard.timeline import step_timeline, trace_json, write_trace
from graphs import zoo
from tests.support.trace_format import Event, Trace, read_trace

MESHES = {"ddp": "dp=8", "zero1": "dp=8", "zero2": "dp=2,fsdp=4", "fsdp": "dp=2,fsdp=4",
          "megatron": "dp=2,tp=4", "auto": "dp=2,tp=4"}
CASES = [(s, m, o) for s in MESHES for m in (1, 3) for o in ("none", "op")] + [
    ("fsdp", 3, "layer"), ("zero2", 3, "layer"), ("megatron", 1, "layer")]
IDS = [f"{s}-m{m}-{o}" for s, m, o in CASES]
COMM = ("comm.exposed", "comm.overlapped", "comm.intra_op")
WORK = ("compute", "local")  # an op's compute and a reshard's local steps (no bytes move)


@functools.cache
def planned(strategy: str, m: int, overlap: str) -> Plan:
    graph = zoo.build("gpt2", layers=2, batch=8, seq=128, hidden=256, heads=4, vocab=1024)
    return autoshard.plan(graph, autoshard.Mesh.parse(MESHES[strategy]), training=True,
                          strategy=None if strategy == "auto" else strategy, micro_batches=m,
                          overlap=overlap)


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("traces")
    found = {}
    for case, name in zip(CASES, IDS, strict=True):
        write_trace(planned(*case), root / f"{name}.json")
        found[case] = read_trace(root / f"{name}.json")
    return found


def compute_track(trace: Trace) -> list[Event]:
    return trace.on("compute")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_trace_ends_at_the_step_time(case, traces) -> None:
    plan, trace = planned(*case), traces[case]
    assert abs(trace.end_ns - plan.objective.total_s * 1e9) <= 1  # the file's 1 ns grid
    assert step_timeline(plan).end_s == pytest.approx(plan.objective.total_s, rel=1e-12)
    assert trace.other["step_s"] == plan.objective.total_s


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_every_run_of_every_op_and_collective_is_drawn_once(case, traces) -> None:
    """Compute slices (ops' and reshards' local steps, on the compute track) add up to the
    plan's compute seconds and communication slices (a collective over several axes counted
    on its first axis) to its communication seconds; each op has one compute slice per run."""
    plan, trace = planned(*case), traces[case]
    slices = len([e for e in trace.events if e.cat in (*WORK, *COMM)])
    work = [e for e in trace.events if e.cat in WORK]
    assert all(e.thread == "compute" for e in work)
    assert sum(e.end_ns - e.start_ns for e in work) == pytest.approx(
        plan.objective.compute_s * 1e9, abs=slices)
    compute = [e for e in work if e.cat == "compute"]
    comm = [e for e in trace.events if e.cat in COMM  # lanes "fsdp #2" belong to axis fsdp
            and e.thread.split(" #")[0] in ("compute", e.args["axes"].split(",")[0])]
    assert sum(e.end_ns - e.start_ns for e in comm) == pytest.approx(
        plan.objective.comm_s * 1e9, abs=slices)
    runs = defaultdict(int)
    for event in compute:
        runs[event.name] += 1
    assert runs == {name: rec.count for name, rec in plan.ops.items()
                    if rec.kind not in ("param", "input", "state")}


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_exposed_collectives_never_run_beside_compute(case, traces) -> None:
    trace = traces[case]
    busy = compute_track(trace)
    exposed = [e for e in trace.events if e.cat in ("comm.exposed", "comm.intra_op")]
    assert exposed or case[0] == "auto"
    clashes = [(e.name, c.name) for e in exposed for c in busy if e.overlaps(c)]
    assert clashes == []


SERIAL = ("compute", "local", "comm.exposed", "comm.intra_op")  # what waits for the stall


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "op"],
                         ids=[i for c, i in zip(CASES, IDS, strict=True) if c[2] == "op"])
def test_hidden_collectives_run_within_the_op_they_hide_behind(case, traces) -> None:
    """Each hidden collective starts no earlier than its op's compute and ends before the
    step does anything else on the compute stream or exposed (the op's priced slot), and the
    first reshard behind each op starts with it."""
    trace = traces[case]
    ops = {(e.name, e.args.get("micro_batch")): e for e in compute_track(trace)
           if e.cat == "compute"}
    serial = sorted(e.start_ns for e in trace.events if e.cat in SERIAL)
    hidden = [e for e in trace.events if e.cat == "comm.overlapped"]
    assert hidden or case[0] == "auto"
    first: dict[tuple, int] = {}
    for event in hidden:
        hider = ops[(event.args["hides_behind"], event.args["micro_batch"])]
        assert event.args["overlap"] == f"op {hider.name}"
        after = next((t for t in serial if t >= hider.end_ns), trace.end_ns)
        assert hider.start_ns <= event.start_ns and event.end_ns <= after + 1
        key = (hider.name, event.args["micro_batch"])
        first[key] = min(first.get(key, event.start_ns), event.start_ns)
    assert all(start == ops[key].start_ns for key, start in first.items())


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_no_axis_runs_two_collectives_at_once(case, traces) -> None:
    """Every mesh axis is one stream in the model, so its track never needs a second lane:
    several reshards hidden behind one op (a norm's weight and bias gathers under FSDP) run
    one after the other, each within its share of the op's compute."""
    trace = traces[case]
    plan = planned(*case)
    assert not [t for t in {e.thread for e in trace.events} if " #" in t]
    for axis, _ in plan.mesh:
        spans = sorted((e.start_ns, e.end_ns) for e in trace.on(axis))
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def test_ddp_gradient_all_reduces_overlap_the_backward_op_that_produced_them(traces) -> None:
    """The DDP plan's gradient reductions: one all-reduce per parameter, each beside the
    backward op that produced its gradient, in the last micro-batch only (they keep the
    gradient's size, so it accumulates unreduced)."""
    plan, trace = planned("ddp", 3, "op"), traces[("ddp", 3, "op")]
    ops = {(e.name, e.args["micro_batch"]): e for e in trace.on("compute")
           if e.cat == "compute" and "micro_batch" in e.args}
    reductions = [e for e in trace.events if e.args.get("tensor", "").startswith("grad/")]
    params = [n for n, t in plan.tensors.items() if t.role == "param"]
    assert sorted(e.args["tensor"] for e in reductions) == sorted(f"grad/{p}" for p in params)
    for event in reductions:
        assert event.name.startswith("all_reduce ") and event.args["micro_batch"] == 2
        producer = ops[(event.args["producer"], 2)]
        assert producer.name.startswith("bwd/") and event.overlaps(producer)


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "layer"],
                         ids=[i for c, i in zip(CASES, IDS, strict=True) if c[2] == "layer"])
def test_a_layer_window_lasts_its_busiest_stream(case, traces) -> None:
    trace = traces[case]
    windows = trace.on("windows")
    assert windows
    for window in windows:
        inside = [e for e in trace.events if e.args.get("window") == window.name
                  and e.args.get("micro_batch") == window.args["micro_batch"]]
        streams: dict[str, list[Event]] = defaultdict(list)
        for event in inside:
            if event.cat == "comm.overlapped":
                streams[event.thread].append(event)
        streams["compute"] = [e for e in trace.on("compute") if e.cat == "compute"
                              and window.start_ns <= e.start_ns < window.end_ns]
        busiest = max(streams.values(), key=lambda s: sum(e.end_ns - e.start_ns for e in s))
        # each slice is rounded to the 1 ns grid on its own
        assert window.end_ns - window.start_ns == pytest.approx(
            sum(e.end_ns - e.start_ns for e in busiest), abs=len(busiest) + 1)


def test_the_same_plan_gives_the_same_bytes_and_plan_json_round_trips(tmp_path) -> None:
    plan = planned("fsdp", 3, "op")
    plan.save(tmp_path)
    assert trace_json(step_timeline(Plan.load(tmp_path / "plan.json"))) == \
        trace_json(step_timeline(plan)) == trace_json(step_timeline(plan))


def test_a_norms_weight_and_bias_gathers_share_its_compute(traces) -> None:
    """FSDP gathers a LayerNorm's weight and bias (equal bytes) for the same op: each hides
    behind half its compute, one after the other on the fsdp track."""
    plan, trace = planned("fsdp", 1, "op"), traces[("fsdp", 1, "op")]
    norm = "layers.0.attn_norm"
    gathers = [r for r in plan.reshards if r.overlap == f"op {norm}"]
    assert sorted(r.tensor for r in gathers) == [f"{norm}.bias", f"{norm}.weight"]
    assert [r.cover for r in gathers] == [0.5, 0.5]
    drawn = sorted((e.start_ns, e.end_ns) for e in trace.on("fsdp")
                   if e.args.get("hides_behind") == norm)
    assert len(drawn) == 2 and drawn[0][1] <= drawn[1][0]
