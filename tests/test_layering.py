"""The architecture's rules (docs/architecture.md), checked on the code as it is.

``autoshard`` may import ``graphs``, ``costmodel`` and ``solver``; those three import nothing
of each other or of ``autoshard``; inside ``autoshard`` the subpackages are layered (the
import-linter contracts in pyproject.toml) and nothing imports the CLI; no module takes part
in an import cycle, counting imports placed inside functions; torch, jax and matplotlib are
imported only inside functions; and no product file points at a path outside the repository.
The scans read every module's source, so they also catch imports that no test runs.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest

from tests.support import REPO_ROOT as ROOT

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
    code = ("import sys, autoshard, autoshard.cli.app; "
            f"print(sorted(m for m in {LAZY_ONLY!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def _import_graph() -> nx.DiGraph:
    """Every module of the four packages and every import between them, wherever it sits in
    the module (top level, inside a function, under TYPE_CHECKING)."""
    graph = grimp.build_graph(*PACKAGES)
    edges = nx.DiGraph()
    for module in graph.modules:
        edges.add_node(module)
        edges.add_edges_from((module, target)
                             for target in graph.find_modules_directly_imported_by(module))
    return edges


def test_no_import_cycle_anywhere() -> None:
    cycles = [sorted(c) for c in nx.strongly_connected_components(_import_graph()) if len(c) > 1]
    assert cycles == []


def test_nothing_imports_the_cli() -> None:
    importers = {source for source, target in _import_graph().edges
                 if target.startswith("autoshard.cli") and not source.startswith("autoshard.cli")}
    assert importers == set()


# What a citation of a document outside the repository looks like: an absolute or parent path,
# the team repository's shared folder, or the names of its research notes and style guide.
OUTSIDE = re.compile(r"/work/|\.\./shared|shared/reference|ground-truth|ilp-backends|"
                     r"ARCHITECTURE\.md|STYLE rule|spec §|spec-sharding-semantics")


@pytest.mark.parametrize("package", PACKAGES)
def test_product_files_cite_nothing_outside_the_repository(package: str) -> None:
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for path in sorted((ROOT / package).rglob("*"))
                 if path.suffix in (".py", ".toml", ".json", ".md") and path.is_file()
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if OUTSIDE.search(line)]
    assert offenders == []
