"""What-if from the command line: ``plan --strategy/--pin/--print-pins``, ``explain``,
``diff``; each output a user relies on, and each bad input one line with the right exit code."""

from __future__ import annotations

import json

import pytest

from autoshard.planning.record import Plan
from tests.support.cli import run

MODEL = ("--model", "gpt2", "--layers", "2", "--batch", "8", "--seq", "64", "--hidden", "128",
         "--heads", "4")
TRAIN = (*MODEL, "--training", "--mesh", "dp=2,tp=2")


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A megatron plan and the auto plan of the same training step, on disk."""
    root = tmp_path_factory.mktemp("whatif")
    megatron = run("plan", *TRAIN, "--strategy", "megatron", "--out", str(root / "megatron"))
    assert megatron.exit_code == 0, megatron.output
    assert "pinned     " in megatron.output and "by strategy megatron" in megatron.output
    auto = run("plan", *TRAIN, "--out", str(root / "auto"), "-q")
    assert auto.exit_code == 0, auto.output
    return root


def test_a_saved_plan_pinned_whole_is_evaluated_with_every_output(saved, tmp_path) -> None:
    source = saved / "megatron" / "plan.json"
    result = run("plan", *TRAIN, "--pin", str(source), "--out", str(tmp_path / "again"),
                 "--verify")
    assert result.exit_code == 0, result.output
    before, after = Plan.load(source), Plan.load(tmp_path / "again" / "plan.json")
    assert after.objective.total_s == pytest.approx(before.objective.total_s, rel=1e-12)
    assert after.verification["passed"]
    assert (tmp_path / "again" / "costs.csv").is_file()
    exported = run("export", str(tmp_path / "again" / "plan.json"), "--format", "dtensor",
                   *TRAIN[:-2])
    assert exported.exit_code == 0, exported.output
    assert "distribute_tensor" in exported.output or "Shard(" in exported.output


def test_printed_pins_plan_like_the_strategy(saved, tmp_path) -> None:
    printed = run("plan", "--mesh", "dp=2,tp=2", "--strategy", "megatron", "--print-pins")
    assert printed.exit_code == 0 and "[[pin]]" in printed.output
    pins = tmp_path / "megatron.toml"
    pins.write_text(printed.output)
    result = run("plan", *TRAIN, "--pin", str(pins), "--json")
    assert result.exit_code == 0, result.output
    named = Plan.load(saved / "megatron" / "plan.json")
    assert json.loads(result.output)["objective"]["total_s"] == \
        pytest.approx(named.objective.total_s, rel=1e-12)


@pytest.mark.parametrize(("args", "code", "needle"), [
    (("--mesh", "dp=4", "--strategy", "megatron"), 2, "needs a tensor-parallel axis"),
    (("--mesh", "dp=2,cp=2", "--strategy", "fsdp"), 2, 'mesh axis "cp" has no role'),
    (("--strategy", "zero3"), 2, "zero3"),
    (("--pin", "/nonexistent/pins.toml"), 2, "no such file"),
])
def test_strategy_errors_are_one_line(args, code, needle) -> None:
    result = run("plan", *MODEL, *args)
    assert result.exit_code == code
    assert needle in result.output
    assert len(result.output.strip().splitlines()) == 1 or "Usage:" in result.output


def test_pin_file_errors_name_the_rule(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[pin]]\ntensors = "layers.*.attn.wz"\nplacements = ["R", "R"]\n')
    result = run("plan", *TRAIN, "--pin", str(bad))
    assert result.exit_code == 2
    assert result.output.strip() == ("autoshard: error: rule 1 of bad.toml (layers.*.attn.wz) "
                                     "matches no tensor of gpt2; check the names (plan.json "
                                     "lists them) or mark the rule optional = true")
    broken = tmp_path / "broken.toml"
    broken.write_text("[[pin]\n")
    result = run("plan", *TRAIN, "--pin", str(broken))
    assert result.exit_code == 2 and "not TOML" in result.output


def test_explain_prints_a_table_and_json(saved) -> None:
    plan = str(saved / "auto" / "plan.json")
    text = run("explain", plan, *MODEL, "--tensor", "layers.1.mlp.w1", "--limit", "2")
    assert text.exit_code == 0, text.output
    assert "re-solved with it pinned" in text.output and "Δ step time" in text.output
    data = json.loads(run("explain", plan, *MODEL, "--op", "layers.1.mlp.up",
                          "--limit", "1", "--json").output)
    assert data["kind"] == "op" and data["alternatives"][0]["delta_s"] is not None
    fragile = run("explain", plan, *MODEL, "--count", "3", "--shortlist", "3")
    assert fragile.exit_code == 0 and "fragile decisions" in fragile.output
    wrong = run("explain", plan, *MODEL, "--hidden", "256", "--tensor", "layers.1.mlp.w1")
    assert wrong.exit_code == 2 and "fingerprint" in wrong.output
    assert len(wrong.output.strip().splitlines()) == 1


def test_explain_shortlist_zero_is_refused_and_count_zero_documented(saved) -> None:
    plan = str(saved / "auto" / "plan.json")
    refused = run("explain", plan, *MODEL, "--shortlist", "0")
    assert refused.exit_code == 2
    assert refused.output.strip().splitlines() == [
        "autoshard: error: --shortlist 0 re-solves no decision, so none could be shown; pass "
        "--shortlist 1 or more (default 20)"]
    assert "(0: every one re-solved)" in " ".join(run("explain", "--help").output.split())


def test_explain_time_limit_is_checked_and_reported(saved) -> None:
    plan = str(saved / "auto" / "plan.json")
    refused = run("explain", plan, *MODEL, "--time-limit", "0")
    assert refused.exit_code == 2
    lines = refused.output.strip().splitlines()
    assert len(lines) == 1 and "time limit 0.0 s is not positive" in lines[0]
    # a limit spent before the first re-solve: every decision shows only its bound, and says so
    spent = run("explain", plan, *MODEL, "--count", "3", "--shortlist", "3",
                "--time-limit", "1e-9")
    assert spent.exit_code == 0, spent.output
    text = " ".join(spent.output.split())
    assert "the time limit (1e-09 s, --time-limit) ran out after 0 of those 3" in text
    assert text.count("(not re-solved)") == 3


def test_diff_compares_and_writes_csv(saved, tmp_path) -> None:
    a, b = str(saved / "auto" / "plan.json"), str(saved / "megatron" / "plan.json")
    result = run("diff", a, b, "--csv", str(tmp_path / "diff.csv"))
    assert result.exit_code == 0, result.output
    assert "placements that differ" in result.output and "all_reduce over tp" in result.output
    assert (tmp_path / "diff.csv").read_text().startswith("section,item,a,b,delta")
    other = tmp_path / "other"
    assert run("plan", *MODEL, "--mesh", "dp=2,tp=2", "--out", str(other), "-q").exit_code == 0
    refused = run("diff", a, str(other / "plan.json"))
    assert refused.exit_code == 2 and "--force" in refused.output
    assert run("diff", a, str(other / "plan.json"), "--force").exit_code == 0
