"""Every docstring example in the four packages, and every Python example in README.md, runs
and gives what it shows.

Public functions carry runnable examples (docs/architecture.md). The modules are found, not listed:
every product module whose source holds a ``>>>`` prompt is collected, and each must run at
least one example (a prompt doctest cannot find, for instance inside a nested function, fails
here instead of silently checking nothing). README.md's examples are ``pycon`` blocks; the
fence lines are read as blank lines, which end an example's expected output.
"""

from __future__ import annotations

import doctest
import importlib
import io
import re

import pytest

from tests.support import REPO_ROOT

PACKAGES = ("graphs", "costmodel", "solver", "autoshard")


def modules_with_examples() -> list[str]:
    names = []
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if ">>>" in path.read_text(encoding="utf-8"):
                parts = path.relative_to(REPO_ROOT).with_suffix("").parts
                names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


MODULES = modules_with_examples()


def test_examples_are_found() -> None:
    assert len(MODULES) >= 30


@pytest.mark.parametrize("name", MODULES, ids=MODULES)
def test_doctests(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} shows examples that doctest does not run"
    assert result.failed == 0


FENCE = re.compile(r"^```.*$", re.MULTILINE)


@pytest.mark.torch
@pytest.mark.jax
def test_readme_examples(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = REPO_ROOT / "README.md"
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    test = doctest.DocTestParser().get_doctest(text, {}, "README.md", str(path), 0)
    assert len(test.examples) >= 20
    prompts = re.findall(r"^>>> (?!#)", text, re.MULTILINE)  # a comment alone is no example
    assert len(prompts) == len(test.examples)  # every prompt is an example doctest runs
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report = io.StringIO()
    result = runner.run(test, out=report.write)
    assert result.failed == 0, report.getvalue()
