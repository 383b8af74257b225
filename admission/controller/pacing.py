"""The controller's writes yield to the API server's other clients when it is busy.

Berth's writes (releases, explanations, evictions) are the cluster's least urgent: a pod
waiting behind the gate a little longer costs less than a ``kubectl apply``, a Job controller or
the kubelets waiting on an API server that Berth keeps busy. So the number of Berth's writes in
flight at once is not fixed but adapted to how fast the API server answers them, the way a
background transfer yields to interactive traffic (a "scavenger" congestion control, LEDBAT,
RFC 6817): the answer time of a write is compared with the best seen lately (the *base*, a
windowed minimum, which the Lease renewals every two seconds keep fresh even when nothing is
released); above ``FACTOR`` x base + ``SLACK_S`` the server is queueing someone's work, and the
limit halves (once per round trip); otherwise it grows by one per ``limit`` writes, up to
``most``. While pods are being created quickly (a *creation burst*: at least ``BURST_PODS``
new pods seen within ``BURST_WINDOW_S``, :class:`Arrivals`), the limit may fall below one: one
write at a time with a pause after each, so that a write is in flight ``limit`` of the time,
never less than the floor (``BURST_FLOOR``). A burst of pod creations thus gets the API server
nearly to itself while Berth releases a pod now and then, and Berth's releases run ``most``
wide again once it is over (e2e/bench_pace.md measures both). The pause never starves the
scheduler behind Berth: while fewer than ``FEED_PODS`` of the pods Berth released wait to be
bound (``scheduler_short``), the writes go on at one in flight or more, burst or not, since a
release the scheduler could have bound by now costs that pod its start, and the scheduler binds
at its own pace whatever the creates do (kube-scheduler: 50 a second at its default client
limit). With a ``feed_rate`` (``BERTH_SCHEDULER_FEED_RATE``, off by default) they go at that
pace instead: as many in flight as ``feed_rate`` writes a second take at the answer times seen
lately (at most ``most``); pods then start sooner and the creates go slower
(e2e/bench_pace.md, "Feeding the scheduler at its pace"). Outside a burst the limit never falls
below one write in flight, so an API server that is merely slow for a long time still gets
Berth's releases one after another.

Only how many writes overlap changes: never their order, which the release protocol keeps by
waiting for each step (release.py), and never whether a write is made.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from admission.controller.api import ApiError, ClusterApi, Json
from admission.jsonpatch import PatchOp

FACTOR = 2.0  # an answer this many times the base (plus the slack) means the server queues
SLACK_S = 0.005  # the noise of one round trip on an idle server
WINDOW_S = 300.0  # how long the best answer time counts as the base
BUCKET_S = 10.0  # the windowed minimum keeps one minimum per bucket of this length
BUSY_STATUSES = frozenset({429, 503, 504})  # the server asking its clients to slow down
BURST_PODS = 40  # new pods within BURST_WINDOW_S that make a creation burst
BURST_WINDOW_S = 2.0
BURST_FLOOR = 0.25  # the lowest limit during a creation burst (a write in flight 1/4 of the time)
#: Released pods not yet bound below which a burst does not pause the writes: two seconds of
#: kube-scheduler's binds at its default client limit (``--kube-api-qps`` 50).
FEED_PODS = 100
#: Writes a second while the scheduler is short (0: one write in flight). Off by default: at 50
#: (kube-scheduler's binds at its default client limit) pods started sooner and the creates of
#: a burst went a quarter slower (e2e/bench_pace.md).
FEED_RATE = 0.0
RTT_SMOOTHING = 0.25  # weight of the newest answer time in the recent mean the feed uses


class Arrivals:
    """When the controller last saw new pods, to tell a creation burst (``burst``) from a
    server that is slow for other reasons. Thread-safe; keeps at most ``BURST_PODS`` times."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._times: deque[float] = deque(maxlen=BURST_PODS)
        self._lock = threading.Lock()

    def seen(self) -> None:
        """A pod was created (the watch's ADDED)."""
        with self._lock:
            self._times.append(self.clock())

    def burst(self) -> bool:
        """Whether ``BURST_PODS`` pods were created within the last ``BURST_WINDOW_S``."""
        with self._lock:
            return (len(self._times) == BURST_PODS
                    and self.clock() - self._times[0] <= BURST_WINDOW_S)


class WritePace:
    """How many writes may be in flight: between 1 and ``most``, adapted to the answer times;
    during a creation burst (``arrivals``) down to ``floor`` (below 1: a pause after each write)
    unless the scheduler is short of released pods (``scheduler_short``), when it is at least
    what makes ``feed_rate`` writes a second at the recent answer times (0: one write).

    ``slot()`` wraps one write: it waits until fewer than the limit are in flight, times the
    write and adapts the limit to it. ``observe()`` takes the time of a write made outside the
    limit (the Lease's renewals) as a sample of the base alone."""

    def __init__(self, most: int, *, adaptive: bool = True, floor: float = BURST_FLOOR,
                 clock: Callable[[], float] = time.monotonic,
                 arrivals: Arrivals | None = None,
                 on_cut: Callable[[], None] | None = None,
                 scheduler_short: Callable[[], bool] | None = None,
                 feed_rate: float = FEED_RATE) -> None:
        self.most = max(1, most)
        self.feed_rate = max(0.0, feed_rate)
        self.rtt: float | None = None  # recent answer time of the paced writes (smoothed)
        self.adaptive = adaptive
        # True while the scheduler behind Berth has too few released pods left to bind
        self.scheduler_short = scheduler_short or (lambda: False)
        # Below 1, and only while pods are being created quickly: one write at a time with a
        # pause after each, so that a write is in flight ``limit`` of the time (bench_pace.md).
        self.floor = min(1.0, max(1.0 / 64, floor))
        self.clock = clock
        self.arrivals = arrivals or Arrivals(clock)
        self.limit = 1.0 if adaptive else float(self.most)
        self.in_flight = 0
        self._next_start = float("-inf")
        self.halvings = 0  # times the limit was cut: what the server's load cost Berth's pace
        self.on_cut = on_cut  # told of each cut (the controller counts them in its metrics)
        self._buckets: deque[tuple[float, float]] = deque()  # (bucket start, min answer time)
        self._last_cut = float("-inf")
        self._cond = threading.Condition()

    # ------------------------------------------------------------------ the base
    @property
    def base(self) -> float | None:
        """The best answer time within the window (None before the first)."""
        with self._cond:
            return self._base()

    def _base(self) -> float | None:
        return min((m for _, m in self._buckets), default=None)

    def _sample(self, rtt: float, now: float) -> None:
        start = now - now % BUCKET_S
        if self._buckets and self._buckets[-1][0] == start:
            self._buckets[-1] = (start, min(self._buckets[-1][1], rtt))
        else:
            self._buckets.append((start, rtt))
        while self._buckets and self._buckets[0][0] <= now - WINDOW_S:
            self._buckets.popleft()

    def observe(self, rtt: float) -> None:
        """A write's answer time, from a write the limit does not hold (the base only)."""
        with self._cond:
            self._sample(rtt, self.clock())

    # ------------------------------------------------------------------ the limit
    def _answered(self, rtt: float, busy: bool) -> None:
        now = self.clock()
        base = self._base()
        self._sample(rtt, now)
        self.rtt = rtt if self.rtt is None else (
            RTT_SMOOTHING * rtt + (1 - RTT_SMOOTHING) * self.rtt)
        if not self.adaptive:
            return
        floor = self.floor if self._may_pause() else 1.0
        if self.limit < floor:  # the burst is over: one write at a time at least, at once
            self.limit = floor
        if busy or (base is not None and rtt > FACTOR * base + SLACK_S):
            if self.limit > floor and now - self._last_cut >= rtt:  # once per round trip
                self.limit = max(floor, self.limit / 2)
                self._last_cut = now
                self.halvings += 1
                if self.on_cut is not None:
                    self.on_cut()
        elif self.limit < 1:
            self.limit = min(1.0, self.limit * 2)
        else:
            self.limit = min(float(self.most), self.limit + 1.0 / self.limit)
        if self.limit < 1:
            self._next_start = now + rtt * (1 / self.limit - 1)

    def _may_pause(self) -> bool:
        """A creation burst, and the scheduler has enough released pods to bind meanwhile."""
        return self.arrivals.burst() and not self.scheduler_short()

    def allowed(self) -> int:
        """Writes that may be in flight now: the limit (at least one), and while the scheduler
        is short of released pods as many as ``feed_rate`` a second takes at the recent
        answer time, up to ``most``."""
        allowed = max(1, int(self.limit))
        if self.adaptive and self.feed_rate > 0 and self.rtt and self.scheduler_short():
            allowed = max(allowed, min(self.most, math.ceil(self.feed_rate * self.rtt - 1e-9)))
        return allowed

    @contextmanager
    def slot(self) -> Iterator[None]:
        with self._cond:
            while True:
                if self.in_flight < self.allowed():
                    pause = self._next_start - self.clock()
                    if pause <= 0 or not self._may_pause():
                        break
                    self._cond.wait(pause)
                else:
                    self._cond.wait()
            self.in_flight += 1
        start = self.clock()
        busy = False
        try:
            yield
        except ApiError as exc:
            busy = exc.status in BUSY_STATUSES
            raise
        finally:
            with self._cond:
                self.in_flight -= 1
                self._answered(self.clock() - start, busy)
                self._cond.notify_all()


class PacedApi:
    """``api`` with its pod writes and Events held to ``pace`` and its Lease renewals timed for
    the base; every other call passes straight through."""

    def __init__(self, api: ClusterApi, pace: WritePace) -> None:
        self.api = api
        self.pace = pace

    # ------------------------------------------------------------------ paced
    def patch_pod(self, namespace: str, name: str, ops: Sequence[PatchOp]) -> Json:
        with self.pace.slot():
            return self.api.patch_pod(namespace, name, ops)

    def set_pod_condition(self, namespace: str, name: str, condition: Json) -> Json:
        with self.pace.slot():
            return self.api.set_pod_condition(namespace, name, condition)

    def evict_pod(self, namespace: str, name: str, *, dry_run: bool = False) -> None:
        with self.pace.slot():
            self.api.evict_pod(namespace, name, dry_run=dry_run)

    def create_event(self, namespace: str, event: Json) -> None:
        with self.pace.slot():
            self.api.create_event(namespace, event)

    # ------------------------------------------------------------------ timed, not held
    def replace_lease(self, namespace: str, name: str, lease: Json) -> Json:
        start = self.pace.clock()
        out = self.api.replace_lease(namespace, name, lease)
        self.pace.observe(self.pace.clock() - start)
        return out

    # ------------------------------------------------------------------ straight through
    # Spelled out rather than forwarded by ``__getattr__``: a method added to ClusterApi is a
    # type error here until someone decides whether it is a write to pace.
    def list_pods(self) -> tuple[list[Json], str]:
        return self.api.list_pods()

    def watch_pods(self, resource_version: str, timeout_seconds: int
                   ) -> Iterator[tuple[str, Json]]:
        return self.api.watch_pods(resource_version, timeout_seconds)

    def get_pod(self, namespace: str, name: str) -> Json | None:
        return self.api.get_pod(namespace, name)

    def list_nodes(self) -> tuple[list[Json], str]:
        return self.api.list_nodes()

    def watch_nodes(self, resource_version: str, timeout_seconds: int
                    ) -> Iterator[tuple[str, Json]]:
        return self.api.watch_nodes(resource_version, timeout_seconds)

    def list_jobs(self) -> tuple[list[Json], str]:
        return self.api.list_jobs()

    def watch_jobs(self, resource_version: str, timeout_seconds: int
                   ) -> Iterator[tuple[str, Json]]:
        return self.api.watch_jobs(resource_version, timeout_seconds)

    def list_dra(self, kind: str) -> tuple[list[Json], str]:
        return self.api.list_dra(kind)

    def watch_dra(self, kind: str, resource_version: str, timeout_seconds: int
                  ) -> Iterator[tuple[str, Json]]:
        return self.api.watch_dra(kind, resource_version, timeout_seconds)

    def get_lease(self, namespace: str, name: str) -> Json | None:
        return self.api.get_lease(namespace, name)

    def create_lease(self, namespace: str, lease: Json) -> Json:
        return self.api.create_lease(namespace, lease)

    def get_config_map(self, namespace: str, name: str) -> Json | None:
        return self.api.get_config_map(namespace, name)

    def create_config_map(self, namespace: str, body: Json) -> Json:
        return self.api.create_config_map(namespace, body)

    def replace_config_map(self, namespace: str, name: str, body: Json) -> Json:
        return self.api.replace_config_map(namespace, name, body)

    def apply_custom(self, group: str, version: str, plural: str, namespace: str,
                     body: Json) -> Json:
        return self.api.apply_custom(group, version, plural, namespace, body)

    def list_custom(self, group: str, version: str, plural: str,
                    namespace: str) -> list[Json]:
        return self.api.list_custom(group, version, plural, namespace)
