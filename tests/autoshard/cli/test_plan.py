"""The command line as a user meets it: defaults work, bad input gets one line and an exit code."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autoshard.cli import main
from tests.support.cli import run


def test_plan_writes_the_three_files_and_refuses_to_overwrite(tmp_path, small_model) -> None:
    out = tmp_path / "out"
    result = run("plan", "--model", small_model, "--mesh", "dp=2,tp=2", "--out", str(out))
    assert result.exit_code == 0, result.output
    for name in ("plan.json", "costs.csv", "reshards.csv"):
        assert (out / name).is_file()
    plan = json.loads((out / "plan.json").read_text())
    assert plan["format"] == "autoshard.plan/v1"
    assert [a["name"] for a in plan["mesh"]["axes"]] == ["dp", "tp"]
    before = (out / "plan.json").read_bytes()
    again = run("plan", "--model", small_model, "--mesh", "dp=2,tp=2", "--out", str(out))
    assert again.exit_code == 2
    assert "--force" in again.output
    assert (out / "plan.json").read_bytes() == before
    forced = run("plan", "--model", small_model, "--mesh", "dp=2,tp=2", "--out", str(out),
                 "--force", "--quiet")
    assert forced.exit_code == 0 and forced.output == ""


@pytest.mark.parametrize("quiet", [(), ("-q",)], ids=["", "quiet"])
def test_json_summary_is_machine_readable(small_model, quiet) -> None:
    result = run("plan", "--model", small_model, "--mesh", "tp=2", "--json", *quiet)
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["objective"]["total_s"] > 0


@pytest.mark.parametrize(("args", "needle"), [
    (("--mesh", "dp=0"), "dp"),
    (("--mesh", "dp=2,dp=2"), "dp"),
    (("--mesh", "dp"), "dp"),
    (("--memory", "80GiX"), "80GiX"),
    (("--model", "lama3-8b"), "llama3-8b"),
    (("--model", "/nonexistent/graph.json"), "graph.json"),
    (("--topology", "dgx-h1000"), "dgx-h100"),
    (("--link", "tp"), "AXIS=SPEC"),
    (("--link", "zz=nvlink"), "zz"),
    (("--optimizer", "sgd"), "--training"),
    (("--reserve", "2GiX"), "2GiX"),
    (("--training", "--reserve", "100TiB"), "reserve"),
    (("--gap", "0"), "--gap"),
    (("--memory", "0"), "--memory 0 B: the memory per device must be positive; pass bytes "
                        "with a unit, e.g. --memory 80GiB"),
    (("--memory", "0GiB", "--reserve", "1GiB"), "memory per device must be positive"),
    (("--model", "GPT2"), 'unknown model "GPT2"; did you mean gpt2? ('),
    (("--model", "mixtral-8x7b", "--top-k", "0"), "pass --top-k 1 or more"),
], ids=["zero-axis", "duplicate-axis", "axis-without-size", "memory-unit", "unknown-model",
        "missing-file", "unknown-topology", "link-syntax", "link-unknown-axis",
        "optimizer-without-training", "reserve-unit", "reserve-over-limit", "gap-zero",
        "memory-zero", "memory-zero-with-reserve", "model-case", "top-k-zero"])
def test_bad_input_gets_one_line_and_exit_2(args, needle) -> None:
    result = run("plan", *args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert needle in lines[0]
    assert "Traceback" not in result.output


def test_refused_overrides_are_named_as_typed(small_model) -> None:
    """Options are spelled with dashes: the refusals name --top-k, never the keyword top_k."""
    from tests.support import DATA_DIR

    graph_file = run("plan", "--model", small_model, "--top-k", "2", "--expert-imbalance", "1.5")
    assert graph_file.exit_code == 2
    assert "--expert-imbalance, --top-k apply to zoo models only" in graph_file.output
    config = run("plan", "--model", str(DATA_DIR / "hf-configs" / "gpt2.json"), "--top-k", "2")
    assert config.exit_code == 2
    assert "--top-k cannot change a Hugging Face config" in config.output
    assert "--capacity-factor, --expert-imbalance apply" in config.output
    dense = run("plan", "--model", "gpt2", "--top-k", "2")
    assert dense.exit_code == 2 and "top-k applies to mixture-of-experts" in dense.output


def test_memory_too_small_exits_1_and_names_the_smallest_peak(small_model) -> None:
    result = run("plan", "--model", small_model, "--mesh", "tp=2", "--memory", "1KiB")
    assert result.exit_code == 1, result.output
    assert "smallest" in result.output and "KiB" in result.output


def test_malformed_graph_file(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "autoshard.graph/v1", "tensors": {')
    result = run("plan", "--model", str(bad))
    assert result.exit_code == 2 and "bad.json" in result.output


def test_a_looser_gap_is_stated_and_kept(tmp_path) -> None:
    """--gap lets the solver stop short of proving optimality; the plan must say so, and its
    bound must still be below the proven optimum of the same input."""
    args = ("plan", "--model", "gpt2", "--layers", "6", "--mesh", "dp=2,tp=2", "--training",
            "--json")
    exact = json.loads(run(*args).output)["objective"]
    loose_run = run(*args, "--gap", "0.05", "--out", str(tmp_path / "loose"))
    assert loose_run.exit_code == 0, loose_run.output
    loose = json.loads((tmp_path / "loose" / "plan.json").read_text())
    objective = loose["objective"]
    assert exact["optimal"] and objective["gap"] <= 0.05
    assert objective["lower_bound_s"] <= exact["total_s"] * (1 + 1e-9)
    assert objective["total_s"] >= exact["total_s"] * (1 - 1e-9)
    assert any("relative gap of 0.05 (--gap)" in note for note in loose["notes"])


# Published parameter counts of the shared Hugging Face configs (tests/data/hf-configs/README.md)
PUBLISHED = {"gpt2.json": 124_439_808, "llama-3.2-1b.json": 1_235_814_400,
             "llama-3.1-8b.json": 8_030_261_248, "mistral-7b-v0.1.json": 7_241_732_096,
             "qwen2.5-7b.json": 7_615_616_512}


@pytest.mark.parametrize("name", sorted(PUBLISHED), ids=sorted(PUBLISHED))
def test_a_hugging_face_config_plans_with_its_published_parameter_count(name: str) -> None:
    from tests.support import DATA_DIR

    path = str(DATA_DIR / "hf-configs" / name)
    result = CliRunner().invoke(main, ["plan", "--model", path, "--mesh", "tp=8", "--seq",
                                       "512"])
    assert result.exit_code == 0, result.output
    assert f"({PUBLISHED[name]:,} parameters)" in result.output
    warnings = [line for line in result.output.splitlines() if "warning" in line]
    assert len(warnings) == (1 if name == "gpt2.json" else 0)  # GPT-2's dropout, one line


def test_hugging_face_config_errors_are_one_line(tmp_path) -> None:
    from tests.support import DATA_DIR

    mistral = str(DATA_DIR / "hf-configs" / "mistral-7b-v0.1.json")
    refused = CliRunner().invoke(main, ["plan", "--model", mistral, "--hidden", "64"])
    assert refused.exit_code == 2 and "--hidden" in refused.output
    window = CliRunner().invoke(main, ["plan", "--model", mistral, "--seq", "8192", "--layers",
                                       "1", "--mesh", "tp=8"])
    assert window.exit_code == 0 and "sliding_window=4096" in window.output
    unknown = tmp_path / "config.json"
    unknown.write_text('{"model_type": "falcon", "hidden_size": 64}')
    result = CliRunner().invoke(main, ["plan", "--model", str(unknown)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "llama" in result.output
    (tmp_path / "empty").mkdir()
    folder = CliRunner().invoke(main, ["plan", "--model", str(tmp_path / "empty")])
    assert folder.exit_code == 2 and "folder" in folder.output
