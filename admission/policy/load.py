"""Reading the policy file: YAML -> validated :class:`Policy`, or every error at once.

Each error carries its path in the file's own spelling (``tenants[2].quota.gpus``) and the line
and column where the YAML parser saw it, found by walking the composed node tree along that
path. The whole file is always checked: structure by pydantic (which collects all field errors),
cross-references by :mod:`admission.policy.refs`, duplicate keys by the node walk.

The file is read once into a node tree, whose size is bounded before anything walks it: an
alias names a node without copying it, so a kilobyte of anchors can stand for a billion values
("billion laughs"), and every walk (duplicate keys, line marks, validation) would expand it.
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

# A real policy has a few thousand values and fits a ConfigMap (1 MiB); these refuse a file
# built to exhaust the webhook or `berth policy check` long before either would notice.
MAX_TEXT = 1024 * 1024  # characters
MAX_VALUES = 100_000  # scalars, sequences and mappings, each alias counted as what it stands for


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


class _TooLarge(ValueError):
    pass


def _expanded_size(root: yaml.Node) -> int:
    """How many values ``root`` stands for once every alias is expanded (computed once per
    distinct node, so a bomb is measured as fast as it is read); :class:`_TooLarge` past
    :data:`MAX_VALUES` or on an alias inside the node it names (a recursive document)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            children = _children(node)
            size = 1 + sum(sizes[id(c)] for c in children)
            if size > MAX_VALUES:
                raise _TooLarge(f"the file stands for more than {MAX_VALUES} values once its "
                                "aliases are expanded; write the repeated parts out, or use "
                                "fewer aliases")
            sizes[key] = size
            open_.discard(key)
            continue
        if key in sizes:
            continue
        if key in open_:
            raise _TooLarge("an alias refers to a node that contains it (a recursive "
                            "document); a policy cannot be recursive")
        open_.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_:
                raise _TooLarge("an alias refers to a node that contains it (a recursive "
                                "document); a policy cannot be recursive")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _compose(text: str) -> tuple[yaml.Node | None, Any]:
    """The node tree (for line marks) and the data of ``text``, read once, its size bounded
    before it is constructed."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        _expanded_size(root)
        return root, loader.construct_document(root)
    finally:
        loader.dispose()


def _duplicate_keys(node: yaml.Node | None, loc: Loc = ()
                    ) -> list[tuple[Loc, yaml.Mark, yaml.Mark]]:
    """PyYAML keeps the last of two equal keys silently; an admin's typo deserves an error.
    Each is (path, mark of the first key, mark of the repeated one)."""
    found: list[tuple[Loc, yaml.Mark, yaml.Mark]] = []
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, yaml.Mark] = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name is not None:
                if name in seen:
                    found.append(((*loc, name), seen[name], key.start_mark))
                else:
                    seen[name] = key.start_mark
                found += _duplicate_keys(value, (*loc, name))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += _duplicate_keys(item, (*loc, i))
    return found


def _num(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))  # a bound of 1000000, not 1e+06
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
    if kind == "finite_number":
        return f"must be a finite number, got {err['input']!r}"
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
    if len(text) > MAX_TEXT:
        return None, [PolicyIssue("", f"the file has {len(text)} characters, more than the "
                                      f"{MAX_TEXT} a policy may have; a ConfigMap holds 1 MiB")]
    try:
        root, data = _compose(text)
    except _TooLarge as exc:
        return None, [PolicyIssue("", f"not accepted: {exc}")]
    except RecursionError:
        return None, [PolicyIssue("", "not accepted: the YAML is nested too deeply")]
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

    for loc, first, again in _duplicate_keys(root):
        issues.append(
            PolicyIssue(format_path(loc), f"duplicate key, first at line {first.line + 1} "
                        f"column {first.column + 1}, again at line {again.line + 1} column "
                        f"{again.column + 1}; YAML would keep only the last one: remove one",
                        again.line + 1, again.column + 1)
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
