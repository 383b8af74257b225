"""The generated reference (docs/reference/, the policy schema) is current, and what it is
generated from is complete: every metric the served registry exposes, every reason the
controller writes."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from admission import reference
from admission.cli import main
from admission.controller import reasons as rs
from admission.policy.schema import SCHEMA_FILE

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER = ROOT / "admission" / "controller"


@pytest.mark.parametrize("path", list(reference.GENERATED))
def test_generated_file_is_current(path: str) -> None:
    assert path not in reference.stale(ROOT), (
        f"{path} is stale or missing: run `{reference.REGENERATE}` to regenerate it")


def test_metrics_reference_lists_what_is_scraped() -> None:
    registry, _ = reference._served()
    scraped = dict(re.findall(r"^# TYPE (\S+) (\S+)$", generate_latest(registry).decode(),
                              re.MULTILINE))
    scraped = {n: t for n, t in scraped.items() if not n.endswith("_created")}
    documented = {m.name: m.type for m in reference.exported_metrics()}
    assert documented == scraped
    page = reference.metrics_md()
    for name in scraped:
        assert f"| `{name}` |" in page


def _literal(expr: ast.expr, consts: dict[str, str], where: str) -> str:
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return expr.value
    if isinstance(expr, ast.Name) and expr.id in consts:
        return consts[expr.id]
    raise AssertionError(f"{where}: a reason that is neither a literal nor a module constant: "
                         f"{ast.unparse(expr)}")


def _written_reasons() -> dict[str, str]:
    """Every reason given to ``Why(...)``, or written as a literal ``"reason"`` of a dict, in
    admission/controller/*.py: reason -> file."""
    found: dict[str, str] = {}
    for path in sorted(CONTROLLER.glob("*.py")):
        if path.name == "reasons.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        consts = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                  and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
                  for t in node.targets if isinstance(t, ast.Name)}

        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Why":
                arg = node.args[0] if node.args else next(
                    k.value for k in node.keywords if k.arg == "reason")
                found[_literal(arg, consts, path.name)] = path.name
            elif isinstance(node, ast.Dict):
                for key, val in zip(node.keys, node.values, strict=True):
                    if (isinstance(key, ast.Constant) and key.value == "reason"
                            and isinstance(val, ast.Constant)):
                        found[_literal(val, consts, path.name)] = path.name
    return found


def test_every_reason_the_controller_writes_is_in_the_table() -> None:
    written = _written_reasons()
    table = {r.name: r.written_by for r in rs.REASONS}
    missing = sorted(set(written) - set(table))
    assert not missing, (f"reasons written but not in admission/controller/reasons.py: "
                         f"{missing}; add them there, then run `{reference.REGENERATE}`")
    gone = sorted(set(table) - set(written))
    assert not gone, f"reasons in admission/controller/reasons.py no longer written: {gone}"
    assert written == table, "a reason's written_by names the wrong module"


def test_reasons_are_camel_case_and_unique() -> None:
    names = [r.name for r in rs.REASONS]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[A-Z][A-Za-z]+", n) for n in names)
    assert rs.CONDITION_TYPE == "berth.dev/Waiting"


def test_docs_command_writes_and_checks(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config" / "policy").mkdir(parents=True)
    assert main(["docs", "--check", "--root", str(tmp_path)]) == 1
    assert main(["docs", "--root", str(tmp_path)]) == 0
    assert main(["docs", "--check", "--root", str(tmp_path)]) == 0
    for path in reference.GENERATED:
        assert (tmp_path / path).read_text() == (ROOT / path).read_text()
    page = tmp_path / "docs" / "reference" / "metrics.md"
    page.write_text(page.read_text() + "edited\n")
    capsys.readouterr()
    assert main(["docs", "--check", "--root", str(tmp_path)]) == 1
    assert "docs/reference/metrics.md: stale" in capsys.readouterr().out
    shutil.rmtree(tmp_path / "config")
    assert main(["docs", "--root", str(tmp_path)]) == 2  # not a checkout


def test_schema_is_among_the_generated_files() -> None:
    assert SCHEMA_FILE in reference.GENERATED
