"""Reading the policy file: YAML -> validated :class:`Policy`, or every error at once.

Each error carries its path in the file's own spelling (``tenants[2].quota.gpus``) and the line
and column where the YAML parser saw it, found by walking the composed node tree along that
path. The whole file is always checked: structure by pydantic (which collects all field errors),
cross-references by :mod:`admission.policy.refs`, duplicate keys by the node walk.

The file is read once into a node tree by :mod:`admission.yamlfile` under :data:`CAPS`, its
depth, aliases and expanded size bounded before anything walks it: an alias names a node without
copying it, so a kilobyte of anchors can stand for a billion values ("billion laughs"), and every
walk (line marks, validation) would expand it. The same scan collects the keys written twice.
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
from admission.yamlfile import (
    BoundError,
    Caps,
    Duplicate,
    SyntaxProblem,
    YamlFileError,
    compose,
    construct,
    dotted,
    read_text,
)

Loc = tuple[str | int, ...]
SAMPLE_HINT = "config/policy/sample-policy.yaml"

# A real policy has a few thousand values and fits a ConfigMap (1 MiB); these refuse a file
# built to exhaust the webhook or `berth policy check` long before either would notice.
MAX_TEXT = 1024 * 1024  # characters
MAX_VALUES = 100_000  # scalars, sequences and mappings, each alias counted as what it stands for
MAX_DEPTH = 64  # a policy nests about 5 deep
MAX_ALIASES = 1_000
CAPS = Caps(max_depth=MAX_DEPTH, max_aliases=MAX_ALIASES, max_values=MAX_VALUES)


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
    return dotted(loc)


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


def _compose(text: str) -> tuple[yaml.Node | None, list[Duplicate], Any]:
    """The node tree (for line marks), the keys written twice and the data of ``text``, read
    once under :data:`CAPS` (:mod:`admission.yamlfile`) before anything walks it."""
    root, duplicates = compose(text, CAPS)
    return root, duplicates, construct(root)


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


def _bound_message(exc: BoundError) -> str:
    if exc.kind == "recursive":
        return "an alias refers to a node that contains it (a recursive document); a policy " \
               "cannot be recursive"
    if exc.kind == "depth":
        return f"the YAML is nested too deeply (more than {exc.limit} levels)"
    if exc.kind == "aliases":
        return f"the file has more than {exc.limit} aliases (*name); write the values out"
    return f"the file stands for more than {exc.limit} values once its aliases are " \
           "expanded; write the repeated parts out, or use fewer aliases"


def check_text(text: str) -> tuple[Policy | None, list[PolicyIssue]]:
    """Validate policy YAML text; returns the policy (None on error) and every issue found."""
    if len(text) > MAX_TEXT:
        return None, [PolicyIssue("", f"the file has {len(text)} characters, more than the "
                                      f"{MAX_TEXT} a policy may have; a ConfigMap holds 1 MiB")]
    try:
        root, duplicates, data = _compose(text)
    except BoundError as exc:
        (problem,) = exc.problems
        return None, [PolicyIssue("", f"not accepted: {_bound_message(exc)}", problem.line,
                                  problem.column)]
    except SyntaxProblem as exc:
        (problem,) = exc.problems
        return None, [PolicyIssue("", f"not valid YAML: {exc.problem}", problem.line,
                                  problem.column)]
    except (ValueError, OverflowError) as exc:  # an out-of-range date, a 5,000-digit number
        return None, [PolicyIssue("", f"a value cannot be read ({exc}); write it as a plain "
                                      "number or a quoted string")]
    if data is None:
        return None, [PolicyIssue("", f"the file is empty; start from {SAMPLE_HINT}")]
    if not isinstance(data, dict):
        top = "the top level must be a mapping (apiVersion, kind, tenants, ...)"
        return None, [PolicyIssue("", top, 1, 1)]

    issues: list[PolicyIssue] = []

    def add(loc: Loc, message: str) -> None:
        mark = _mark(root, loc)
        issues.append(PolicyIssue(format_path(loc), message, *(mark or (None, None))))

    for dup in duplicates:
        (line, column), (again, again_column) = dup.first, dup.again
        issues.append(
            PolicyIssue(format_path(dup.loc), f"duplicate key, first at line {line} column "
                        f"{column}, again at line {again} column {again_column}; YAML would "
                        "keep only the last one: remove one", again, again_column)
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
        # 4 bytes a character at most: check_text then applies MAX_TEXT in characters.
        text = read_text(path, what="a policy file", max_bytes=4 * MAX_TEXT)
    except YamlFileError as exc:
        raise PolicyError([PolicyIssue("", p.message, p.line, p.column or (1 if p.line else None))
                           for p in exc.problems], source) from None
    policy, issues = check_text(text)
    if issues:
        raise PolicyError(issues, source)
    assert policy is not None
    return policy
