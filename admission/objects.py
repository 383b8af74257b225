"""Readers of API objects as the API server returns them: plain JSON mappings.

Outside the controller so that the release backends, which the webhook and the policy import
for their vocabulary, read pods without importing the controller; the controller's translation
(:mod:`admission.controller.translate`) reads with the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def labels(obj: Obj) -> Mapping[str, str]:
    return meta(obj).get("labels") or {}


def annotations_of(obj: Obj) -> Mapping[str, str]:
    return meta(obj).get("annotations") or {}


def gate_names(pod: Obj) -> list[str]:
    """The names of the pod's scheduling gates, in order."""
    return [g.get("name", "") for g in spec(pod).get("schedulingGates") or []]
