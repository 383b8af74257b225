"""Patch the node's labels and annotations, only when they change and at a bounded rate.

API traffic is what a DaemonSet on every GPU node must keep small: in the steady state the agent
sends nothing. It remembers what the node carries (read once, re-read every ``resync_s`` or after
a failure, in case someone else edited the node), computes the difference with what it wants,
and sends one merge patch of just the changed keys, at most once per ``min_interval_s``. After a
failure it waits a jittered exponential backoff (full jitter: uniform in [0, base * 2^n], capped)
so that a thousand agents do not retry in step against a struggling API server.

Only keys the agent owns are ever removed (``owns``): labels other components put on the node
(including other ``nvidia.com/`` labels such as the MIG manager's) are left alone.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from admission.agent.metadata import NodeMetadata


class NodeApi(Protocol):
    """The two calls of ``kubernetes.client.CoreV1Api`` the publisher uses."""

    def read_node(self, name: str) -> Any: ...

    def patch_node(self, name: str, body: Any, *, field_manager: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class PublishResult:
    action: str  # unchanged | patched | deferred | failed | backing-off
    patch: dict[str, Any] | None = None
    retry_in_s: float = 0.0  # when a deferred or failed change should be tried again
    error: str | None = None


def _metadata_of(node: Any) -> tuple[dict[str, str], dict[str, str]]:
    # The kubernetes client returns model objects; tests and raw clients return dicts.
    meta = node.get("metadata", {}) if isinstance(node, Mapping) else node.metadata
    if isinstance(meta, Mapping):
        return dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})
    return dict(meta.labels or {}), dict(meta.annotations or {})


def _section(current: Mapping[str, str], desired: Mapping[str, str],
             owns: Callable[[str], bool]) -> dict[str, str | None]:
    changes: dict[str, str | None] = {k: v for k, v in desired.items() if current.get(k) != v}
    changes.update({k: None for k in current if owns(k) and k not in desired})
    return changes


def metadata_patch(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    desired: NodeMetadata,
    owns: Callable[[str], bool],
) -> dict[str, Any] | None:
    """The merge patch that turns the node's owned keys into ``desired`` (None: nothing to do).
    A key set to None is deleted."""
    meta: dict[str, Any] = {}
    lab = _section(labels, desired.labels, owns)
    ann = _section(annotations, desired.annotations, owns)
    if lab:
        meta["labels"] = lab
    if ann:
        meta["annotations"] = ann
    return {"metadata": meta} if meta else None


class Publisher:
    def __init__(
        self,
        api: NodeApi,
        node: str,
        *,
        owns: Callable[[str], bool],
        min_interval_s: float = 30.0,
        resync_s: float = 600.0,
        backoff_base_s: float = 2.0,
        backoff_cap_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        rng: Callable[[], float] = random.random,
        field_manager: str = "berth-agent",
    ) -> None:
        self._api = api
        self._node = node
        self._owns = owns
        self._min_interval_s = min_interval_s
        self._resync_s = resync_s
        self._backoff_base_s = backoff_base_s
        self._backoff_cap_s = backoff_cap_s
        self._clock = clock
        self._rng = rng
        self._field_manager = field_manager  # names the agent in the node's managedFields
        # What the node is believed to carry; None: read it before comparing.
        self._known: tuple[dict[str, str], dict[str, str]] | None = None
        self._read_at = -math.inf
        self._patched_at = -math.inf
        self._failures = 0
        self._retry_at = -math.inf

    def publish(self, desired: NodeMetadata) -> PublishResult:
        now = self._clock()
        if now < self._retry_at:
            return PublishResult("backing-off", retry_in_s=self._retry_at - now)
        try:
            if self._known is None or now - self._read_at >= self._resync_s:
                self._known = _metadata_of(self._api.read_node(self._node))
                self._read_at = now
            labels, annotations = self._known
            patch = metadata_patch(labels, annotations, desired, self._owns)
            if patch is None:
                self._failures = 0
                return PublishResult("unchanged")
            wait = self._patched_at + self._min_interval_s - now
            if wait > 0:
                return PublishResult("deferred", patch=patch, retry_in_s=wait)
            self._api.patch_node(self._node, patch, field_manager=self._field_manager)
        except Exception as exc:  # the agent must outlive any API or network failure
            return self._failed(now, exc)
        self._patched_at = now
        self._failures = 0
        self._known = (_apply(labels, patch["metadata"].get("labels", {})),
                       _apply(annotations, patch["metadata"].get("annotations", {})))
        return PublishResult("patched", patch=patch)

    def _failed(self, now: float, exc: Exception) -> PublishResult:
        self._failures += 1
        self._known = None  # the node may have changed under us: read it again next time
        ceiling = min(self._backoff_cap_s, self._backoff_base_s * 2 ** (self._failures - 1))
        delay = self._rng() * ceiling
        self._retry_at = now + delay
        return PublishResult("failed", retry_in_s=delay, error=f"{type(exc).__name__}: {exc}")


def _apply(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    out = dict(current)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out
