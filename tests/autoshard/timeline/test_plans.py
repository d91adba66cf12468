"""Traces of real plans, read back from the file by the format reader in tests/support.

Hand plans (``--strategy`` ddp, zero1, zero2, fsdp, megatron) and the search, with one and
three micro-batches, with nothing overlapped and with the op overlap model (and the layer
model on a few): each trace must end at the plan's step time, show every run of every op and
collective exactly once, never put an exposed collective beside compute, and put each hidden
collective beside the op it hides behind.
"""

from __future__ import annotations

import functools
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
COMM = ("comm.exposed", "comm.overlapped", "comm.intra_op", "local")


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
    """Compute slices add up to the plan's compute seconds and communication slices (a
    collective over several axes counted on its first axis) to its communication seconds;
    each op has one compute slice per run."""
    plan, trace = planned(*case), traces[case]
    slices = len([e for e in trace.events if e.cat in ("compute", *COMM)])
    compute = [e for e in trace.events if e.cat == "compute"]
    assert sum(e.end_ns - e.start_ns for e in compute) == pytest.approx(
        plan.objective.compute_s * 1e9, abs=slices)
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


@pytest.mark.parametrize("case", [c for c in CASES if c[2] == "op"],
                         ids=[i for c, i in zip(CASES, IDS, strict=True) if c[2] == "op"])
def test_hidden_collectives_start_with_the_op_they_hide_behind(case, traces) -> None:
    trace = traces[case]
    ops = {(e.name, e.args.get("micro_batch")): e for e in compute_track(trace)
           if e.cat == "compute"}
    first: dict[tuple, int] = {}
    hidden = [e for e in trace.events if e.cat == "comm.overlapped"]
    assert hidden or case[0] == "auto"
    for event in hidden:
        hider = ops[(event.args["hides_behind"], event.args["micro_batch"])]
        assert event.args["overlap"] == f"op {hider.name}"
        key = (event.args["tensor"], event.args["consumer"], event.thread,
               event.args["micro_batch"])
        first[key] = min(first.get(key, event.start_ns), event.start_ns)
        assert first[key] == hider.start_ns


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


def test_several_gathers_behind_one_op_get_a_second_lane(traces) -> None:
    """FSDP gathers a norm's weight and bias for the same op: the model lets both hide behind
    it at once, so the fsdp axis needs a second lane, and the file nests (read_trace)."""
    trace = traces[("fsdp", 1, "op")]
    second = trace.on("fsdp #2")
    assert second and {e.args["hides_behind"] for e in second} <= {
        e.args.get("hides_behind") for e in trace.on("fsdp")}
