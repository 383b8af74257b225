"""Reading the policy file: YAML -> validated :class:`Policy`, or every error at once.

Each error carries its path in the file's own spelling (``tenants[2].quota.gpus``) and the line
and column where the YAML parser saw it, found by walking the composed node tree along that
path. The whole file is always checked: structure by pydantic (which collects all field errors),
cross-references by :mod:`admission.policy.refs`, duplicate keys by the node walk.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from admission.policy.model import Policy
from admission.policy.refs import check_references

Loc = tuple[str | int, ...]
SAMPLE_HINT = "config/policy/sample-policy.yaml"


@dataclass(frozen=True, slots=True)
class PolicyIssue:
    path: str  # "tenants[2].quota.gpus"; "" for the file as a whole
    message: str
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based

    def render(self, source: str = "") -> str:
        where = source
        if self.line is not None:
            where = f"{where}:{self.line}:{self.column}" if where else f"line {self.line}"
        head = f"{where}: " if where else ""
        return f"{head}{self.path}: {self.message}" if self.path else f"{head}{self.message}"


class PolicyError(ValueError):
    """The policy file is not valid; ``issues`` lists every problem found."""

    def __init__(self, issues: list[PolicyIssue], source: str = "") -> None:
        self.issues = issues
        self.source = source
        super().__init__("\n".join(i.render(source) for i in issues))


def format_path(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _mark(root: yaml.Node | None, loc: Loc) -> tuple[int, int] | None:
    """Line and column (1-based) of the deepest node of ``root`` reached along ``loc``."""
    node = root
    if node is None:
        return None
    best = node.start_mark
    for part in loc:
        nxt: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == part:
                    best = key.start_mark
                    nxt = value
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            nxt = node.value[part]
            best = nxt.start_mark
        if nxt is None:
            break
        node = nxt
    return best.line + 1, best.column + 1


def _duplicate_keys(node: yaml.Node | None, loc: Loc = ()) -> list[tuple[Loc, yaml.Mark]]:
    """PyYAML keeps the last of two equal keys silently; an admin's typo deserves an error."""
    found: list[tuple[Loc, yaml.Mark]] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name is not None:
                if name in seen:
                    found.append(((*loc, name), key.start_mark))
                seen.add(name)
                found += _duplicate_keys(value, (*loc, name))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += _duplicate_keys(item, (*loc, i))
    return found


def _num(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _message(err: Any) -> str:
    """pydantic's message in the policy's words, with the fix where one is obvious."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "greater_than_equal":
        return f"must be >= {_num(ctx['ge'])}, got {err['input']!r}"
    if kind == "greater_than":
        return f"must be > {_num(ctx['gt'])}, got {err['input']!r}"
    if kind == "less_than_equal":
        return f"must be <= {_num(ctx['le'])}, got {err['input']!r}"
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return f"unknown field; check its spelling against {SAMPLE_HINT}"
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx['expected']}, got {err['input']!r}"
    if kind == "string_pattern_mismatch":
        return f"{err['input']!r} does not match {ctx['pattern']}"
    if kind == "too_short":
        return "must not be empty"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return str(err["msg"]).replace("Input should be", "must be")


def check_text(text: str) -> tuple[Policy | None, list[PolicyIssue]]:
    """Validate policy YAML text; returns the policy (None on error) and every issue found."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        return None, [
            PolicyIssue(
                "", f"not valid YAML: {problem}",
                mark.line + 1 if mark else None, mark.column + 1 if mark else None,
            )
        ]
    if data is None:
        return None, [PolicyIssue("", f"the file is empty; start from {SAMPLE_HINT}")]
    if not isinstance(data, dict):
        top = "the top level must be a mapping (apiVersion, kind, tenants, ...)"
        return None, [PolicyIssue("", top, 1, 1)]

    issues: list[PolicyIssue] = []

    def add(loc: Loc, message: str) -> None:
        mark = _mark(root, loc)
        issues.append(PolicyIssue(format_path(loc), message, *(mark or (None, None))))

    for loc, key_mark in _duplicate_keys(root):
        issues.append(
            PolicyIssue(format_path(loc), "duplicate key; YAML would keep only the last one",
                        key_mark.line + 1, key_mark.column + 1)
        )
    policy: Policy | None = None
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            add(tuple(err["loc"]), _message(err))
    for loc, message in check_references(data):
        add(loc, message)
    if issues:
        return None, sorted(issues, key=lambda i: (i.line or 0, i.column or 0, i.path))
    assert policy is not None
    return policy.with_generation(hashlib.sha256(text.encode()).hexdigest()[:12]), []


def load_policy(path: str | Path) -> Policy:
    """Load and validate the policy file at ``path``; raise :class:`PolicyError` listing every
    problem (path, message, line and column)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PolicyError([PolicyIssue("", "file not found")], source) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError([PolicyIssue("", f"cannot read the file: {exc}")], source) from None
    policy, issues = check_text(text)
    if issues:
        raise PolicyError(issues, source)
    assert policy is not None
    return policy
