"""Helpers shared by the admission tests: fixtures, a policy in code, an RFC 6902 applier."""

from __future__ import annotations

import base64
import copy
import json
import textwrap
from pathlib import Path
from typing import Any

from admission.policy import Policy, check_text

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "config" / "policy" / "sample-policy.yaml"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return data


def policy_from(text: str) -> Policy:
    policy, issues = check_text(textwrap.dedent(text))
    assert policy is not None, [i.render() for i in issues]
    return policy


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(doc: dict[str, Any], patch_b64: str) -> dict[str, Any]:
    """Apply a base64 JSON Patch the way the apiserver does; fails on an invalid operation."""
    out = copy.deepcopy(doc)
    for op in json.loads(base64.b64decode(patch_b64)):
        tokens = [_unescape(t) for t in op["path"].split("/")[1:]]
        parent: Any = out
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if op["op"] == "add":
            if isinstance(parent, list):
                if last == "-":
                    parent.append(op["value"])
                else:
                    parent.insert(int(last), op["value"])
            else:
                assert isinstance(parent, dict), f"{op['path']}: parent is not an object"
                parent[last] = op["value"]
        elif op["op"] == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                assert last in parent, f"{op['path']}: nothing to remove"
                del parent[last]
        else:
            raise AssertionError(f"unexpected op {op['op']}")
    return out
