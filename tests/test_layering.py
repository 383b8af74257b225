"""solver/ is the pure core: it may import neither admission/, aiohttp, a Kubernetes client,
nor anything that does I/O on its behalf."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOLVER = Path(__file__).resolve().parent.parent / "solver"
FORBIDDEN = ("admission", "aiohttp", "kubernetes", "kr8s", "kopf", "requests", "urllib3",
             "http", "socket", "subprocess", "pynvml", "prometheus_client", "yaml")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


SOURCES = sorted(SOLVER.rglob("*.py"))


def test_solver_has_sources() -> None:
    assert SOURCES, "solver/ has no Python files"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(SOLVER)))
def test_solver_imports_nothing_impure(path: Path) -> None:
    bad = [n for n in _imports(path) if n.split(".")[0] in FORBIDDEN]
    assert not bad, f"{path} imports {bad}: solver/ must stay pure (no I/O, no cluster client)"


def test_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("import aiohttp\nfrom kubernetes import client\n")
    assert [n for n in _imports(f) if n.split(".")[0] in FORBIDDEN] == ["aiohttp", "kubernetes"]
