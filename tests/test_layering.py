"""The one-way dependency rule of ARCHITECTURE.md, checked per package.

``autoshard`` may import ``graphs``, ``costmodel`` and ``solver``; those three import nothing
of each other or of ``autoshard``; torch, jax and matplotlib are imported only inside
functions. The scan reads every module's AST, so it also catches imports that no test runs.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("graphs", "costmodel", "solver", "autoshard")
LAZY_ONLY = ("torch", "jax", "jaxlib", "matplotlib")


def imported_roots(path: Path, top_level_only: bool = False) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    roots: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", ["graphs", "costmodel", "solver"])
def test_leaf_package_imports_no_sibling(package: str) -> None:
    forbidden = set(PACKAGES) - {package}
    offenders = {str(p.relative_to(ROOT)): sorted(imported_roots(p) & forbidden)
                 for p in sorted((ROOT / package).rglob("*.py"))}
    assert not {k: v for k, v in offenders.items() if v}


@pytest.mark.parametrize("package", PACKAGES)
def test_optional_frameworks_are_imported_lazily(package: str) -> None:
    offenders = {str(p.relative_to(ROOT)): sorted(imported_roots(p, top_level_only=True)
                                                  & set(LAZY_ONLY))
                 for p in sorted((ROOT / package).rglob("*.py"))}
    assert not {k: v for k, v in offenders.items() if v}


def test_import_linter_contracts_hold() -> None:
    """The same rule as import-linter states it in pyproject.toml."""
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_importing_autoshard_loads_no_optional_framework() -> None:
    code = ("import sys, autoshard, autoshard.cli; "
            f"print(sorted(m for m in {LAZY_ONLY!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
