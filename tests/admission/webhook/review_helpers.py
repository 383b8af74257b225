"""Helpers shared by the admission tests: fixtures, a policy in code, the answer's patch applied."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path
from typing import Any

from admission import jsonpatch
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


def apply_patch(doc: dict[str, Any], patch_b64: str) -> dict[str, Any]:
    """Apply a base64 JSON Patch the way the apiserver does; fails on an invalid operation, and
    on any op but the two the webhook writes."""
    ops = json.loads(base64.b64decode(patch_b64))
    unexpected = [op["op"] for op in ops if op["op"] not in ("add", "remove")]
    assert not unexpected, f"unexpected ops {unexpected}"
    return jsonpatch.apply(doc, ops)
