"""Mixture-of-experts models through ``autoshard plan``: the Mixtral config, expert axes by
request, and bad input with one line and an exit code each."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from autoshard.cli import main
from tests.support import DATA_DIR

MIXTRAL = str(DATA_DIR / "hf-configs" / "mixtral-8x7b-v0.1.json")
ONE_LAYER = ("--layers", "1", "--seq", "1024")


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_mixtral_config_plans_with_its_count_and_shards_the_experts(tmp_path) -> None:
    result = run("plan", "--model", MIXTRAL, *ONE_LAYER, "--mesh", "ep=8", "--training",
                 "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    # one layer of 1,451,270,144, embedding and head 2 × 32000 × 4096, the final norm
    assert "(1,713,418,240 parameters)" in result.output
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["tensors"]["layers.0.moe.experts.w13"]["placements"] == ["S(0)"]


def test_expert_axes_pin_the_experts(tmp_path) -> None:
    result = run("plan", "--model", "mixtral-8x7b", *ONE_LAYER, "--mesh", "dp=2,ep=4",
                 "--training", "--expert-axes", "ep", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    tensors = json.loads((tmp_path / "plan.json").read_text())["tensors"]
    for weight in ("w13", "w2"):
        assert tensors[f"layers.0.moe.experts.{weight}"]["placements"][1] == "S(0)"
        assert tensors[f"layers.0.moe.experts.{weight}"]["placements"][0] != "S(0)"


@pytest.mark.parametrize(("args", "message"), [
    (("--model", "mixtral-8x7b", "--mesh", "ep=3", "--expert-axes", "ep"),
     "8 experts do not divide over --expert-axes ep (3 devices); choose axes whose sizes "
     "multiply to one of 1, 2, 4, 8"),
    (("--model", "mixtral-8x7b", "--mesh", "ep=2", "--top-k", "9"),
     "top-k 9 is larger than the 8 experts"),
    (("--model", "mixtral-8x7b", "--mesh", "ep=2", "--capacity-factor", "0"),
     "capacity factor 0.0 must be > 0"),
    (("--model", "mixtral-8x7b", "--mesh", "ep=2", "--capacity-factor", "-1.5"),
     "capacity factor -1.5 must be > 0"),
    (("--model", "mixtral-8x7b", "--mesh", "ep=2", "--capacity-factor", "inf"),
     "capacity factor inf must be > 0 and finite"),
    (("--model", "mixtral-8x7b", "--mesh", "ep=2", "--expert-imbalance", "inf"),
     "expert imbalance inf is the busiest expert's load over the mean load"),
    (("--model", "mixtral-8x7b", "--mesh", "ep=2", "--capacity-factor", "1.25",
      "--expert-imbalance", "1.5"),
     "expert imbalance 1.5 sizes dropless expert buffers, but capacity factor 1.25 already "
     "fixes them"),
    (("--model", "llama3-8b", "--mesh", "ep=2", "--expert-axes", "ep"),
     "has no mixture-of-experts layers"),
    (("--model", MIXTRAL, "--mesh", "ep=2", "--top-k", "3"), "--top-k cannot change"),
])
def test_bad_moe_input_is_one_line(args: tuple[str, ...], message: str) -> None:
    result = run("plan", *ONE_LAYER, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output and result.output.count("\n") == 1, result.output
