"""Leader election over a ``coordination.k8s.io/v1`` Lease, so one replica runs the cycle.

Every replica serves the webhook; only the holder of the Lease runs cycles. The holder renews
every ``retry_seconds``; a replica takes the Lease over when it has watched the same record
(holder, renewTime, duration) go unchanged for ``leaseDurationSeconds`` on its own monotonic
clock. Like client-go's leaderelection (its ``observedTime``), it never compares the Lease's
``renewTime`` with its own wall clock: replicas' clocks may disagree by minutes, and a replica
running ahead would otherwise take a Lease that is being renewed. ``renewTime`` is written for
people and tools only. Writes use the Lease's resourceVersion, so two replicas racing for an
expired Lease cannot both win. A leader that fails to renew within ``renew_deadline`` (also on
its monotonic clock) steps down by itself before anyone else may take over (deadline <
duration), so two leaders never release at once. Losing the leader loses no pod: all state is
on the pods.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from admission.controller.api import ApiError, ClusterApi, Conflict, Json, NotFound

log = logging.getLogger(__name__)


def micro_time(t: datetime) -> str:
    """A MicroTime. Never a whole second: the ``kubernetes`` client re-reads a dict body as its
    model and writes datetimes back with ``isoformat()``, which drops ``.000000``, a form the
    API server refuses for MicroTime fields."""
    t = t.astimezone(UTC)
    if t.microsecond == 0:
        t = t.replace(microsecond=1)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(spec: Json) -> tuple[object, ...]:
    """What a renewal changes: seeing it unchanged is seeing the holder silent."""
    return (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"),
            spec.get("leaseTransitions"))


class LeaseElector:
    """``clock`` is the wall clock, used only for the times written on the Lease;
    ``monotonic`` (seconds) judges expiry and the renew deadline."""

    def __init__(self, *, api: ClusterApi, namespace: str, name: str, identity: str,
                 clock: Callable[[], datetime], lease_seconds: int = 15,
                 renew_deadline_seconds: float = 10.0, retry_seconds: float = 2.0,
                 on_change: Callable[[bool], None] | None = None,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        assert renew_deadline_seconds < lease_seconds
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.clock = clock
        self.monotonic = monotonic
        self.lease_seconds = lease_seconds
        self.renew_deadline = renew_deadline_seconds
        self.retry_seconds = retry_seconds
        self.on_change = on_change
        self._leader = False
        self._last_renew: float | None = None  # monotonic time of this replica's last write
        # The Lease record as last seen, and when (monotonic) it was first seen as it is.
        self._observed: tuple[object, ...] | None = None
        self._observed_at = 0.0

    @property
    def is_leader(self) -> bool:
        """True only while the last successful renewal is within the renew deadline."""
        if not self._leader or self._last_renew is None:
            return False
        return self.monotonic() - self._last_renew < self.renew_deadline

    def _observe(self, spec: Json, at: float) -> None:
        record = _record(spec)
        if record != self._observed:
            self._observed, self._observed_at = record, at

    def _set(self, leader: bool) -> None:
        if leader != self._leader:
            log.info("%s %s the lease %s/%s", self.identity,
                     "acquired" if leader else "lost", self.namespace, self.name)
            self._leader = leader
            if self.on_change:
                self.on_change(leader)

    def _body(self, current: Json | None, now: datetime) -> Json:
        spec = dict((current or {}).get("spec") or {})
        transitions = int(spec.get("leaseTransitions") or 0)
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = micro_time(now)
            if current is not None:
                transitions += 1
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.lease_seconds,
                    renewTime=micro_time(now), leaseTransitions=transitions)
        meta: Json = {"name": self.name, "namespace": self.namespace}
        if current is not None:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": spec}

    def try_acquire_or_renew(self) -> bool:
        """One round: returns whether this replica holds the lease afterwards."""
        now, mono = self.clock(), self.monotonic()
        try:
            current = self.api.get_lease(self.namespace, self.name)
            if current is None:
                body = self._body(None, now)
                self.api.create_lease(self.namespace, body)
            else:
                spec = current.get("spec") or {}
                self._observe(spec, mono)
                holder = spec.get("holderIdentity")
                duration = int(spec.get("leaseDurationSeconds") or 0)
                if holder and holder != self.identity and mono < self._observed_at + duration:
                    self._set(False)
                    return False
                body = self._body(current, now)
                self.api.replace_lease(self.namespace, self.name, body)
        except (Conflict, NotFound):
            self._set(False)  # someone else wrote first; look again next round
            return False
        except ApiError as exc:
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            if not self.is_leader:
                self._set(False)
            return self.is_leader
        self._observe(body["spec"], mono)
        self._last_renew = mono
        self._set(True)
        return True

    def release(self) -> None:
        """Give the lease up on shutdown so a standby takes over at once: a Lease without a
        holder is free to take, whoever's clock says what."""
        if not self._leader:
            return
        try:
            current = self.api.get_lease(self.namespace, self.name)
            if current and (current.get("spec") or {}).get("holderIdentity") == self.identity:
                body = self._body(current, self.clock())
                del body["spec"]["holderIdentity"]
                body["spec"]["leaseDurationSeconds"] = 1
                body["spec"]["renewTime"] = micro_time(datetime(1970, 1, 1, tzinfo=UTC))
                self.api.replace_lease(self.namespace, self.name, body)
        except ApiError as exc:
            log.warning("releasing the lease: %s", exc)
        self._set(False)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.try_acquire_or_renew()
            stop.wait(self.retry_seconds)
        self.release()
