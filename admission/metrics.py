"""Prometheus metrics of the webhook: review latency, decisions, policy reloads, certificates;
and :class:`MetricsServer`, which serves a registry on a port of its own.

Each server owns its own registry (not prometheus-client's global one), so several servers can
live in one process, as they do in tests and in ``berth serve`` next to the controller's own
metrics, which may register on the same registry.

The two metrics fed once per review (the latency histogram and the decisions counter) are kept
in plain integers by :class:`ReviewStats` and turned into metric families only when scraped:
prometheus-client's ``Histogram.observe`` plus a labelled ``Counter.inc`` take a lock each and
cost about 3.5 us a review, a tenth of the review itself; ``ReviewStats.observe`` costs 0.5 us.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

# Reviews take tens of microseconds to a few milliseconds; the apiserver times out at seconds.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0)

REVIEW_SECONDS = "berth_webhook_review_seconds"
DECISIONS = "berth_webhook_decisions"  # exposed as berth_webhook_decisions_total


class ReviewStats:
    """The review latency histogram and the decisions by outcome and reason, as a collector.

    Not locked: every review is answered on the server's event loop thread, and the scrape
    that reads these numbers runs on that thread too (``/metrics``), so nothing interleaves.
    """

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self._bounds = (*buckets, float("inf"))
        # the "le" labels as prometheus-client writes them ("0.0001", ..., "+Inf")
        self._labels: list[str] = [floatToGoString(b) for b in self._bounds]  # type: ignore[no-untyped-call]
        self._counts = [0] * len(self._bounds)  # per bucket, not cumulative
        self.seconds = 0.0
        self.decisions: dict[tuple[str, str], int] = {}

    def observe(self, seconds: float, outcome: str, reason: str) -> None:
        # bisect_left: the first bound >= seconds, which is Prometheus' "le" bucket
        self._counts[bisect_left(self._bounds, seconds)] += 1
        self.seconds += seconds
        key = (outcome, reason)
        self.decisions[key] = self.decisions.get(key, 0) + 1

    @property
    def count(self) -> int:
        return sum(self._counts)

    def describe(self) -> list[Metric]:
        return [self._histogram(None), self._decisions(None)]

    def collect(self) -> Iterator[Metric]:
        yield self._histogram(self._counts)
        yield self._decisions(self.decisions)

    def _histogram(self, counts: list[int] | None) -> HistogramMetricFamily:
        doc = "Time to decide one AdmissionReview (parse to serialised answer)."
        if counts is None:
            return HistogramMetricFamily(REVIEW_SECONDS, doc)
        cumulative, buckets = 0, []
        for label, n in zip(self._labels, counts, strict=True):
            cumulative += n
            buckets.append((label, float(cumulative)))
        return HistogramMetricFamily(REVIEW_SECONDS, doc, buckets=buckets,
                                     sum_value=self.seconds)

    @staticmethod
    def _decisions(counts: dict[tuple[str, str], int] | None) -> CounterMetricFamily:
        family = CounterMetricFamily(
            DECISIONS, "Admission decisions by outcome (untouched, mutated, denied) and reason.",
            labels=["outcome", "reason"])
        for (outcome, reason), n in sorted((counts or {}).items()):
            family.add_metric([outcome, reason], n)
        return family


# More exposition text from elsewhere, appended to a scrape: ``berth serve``'s controller runs
# in a process of its own, and its metrics are served through the webhook's /metrics.
ExtraMetrics = Callable[[], Awaitable[bytes]]


def family_names(text: bytes) -> set[bytes]:
    """The metric families an exposition text declares (its ``# HELP name`` lines)."""
    return {line.split(b" ", 3)[2] for line in text.splitlines()
            if line.startswith(b"# HELP ") and line.count(b" ") >= 2}


def without_families(text: bytes, names: set[bytes]) -> bytes:
    """``text`` less the families in ``names`` (each family runs from its ``# HELP`` line to
    the next one), so that two registries' texts can be joined without declaring a family
    twice, which Prometheus refuses."""
    kept: list[bytes] = []
    keep = True
    for line in text.splitlines(keepends=True):
        if line.startswith(b"# HELP ") and line.count(b" ") >= 2:
            keep = line.split(b" ", 3)[2] not in names
        if keep:
            kept.append(line)
    return b"".join(kept)


async def exposition(registry: CollectorRegistry, extra: ExtraMetrics | None) -> bytes:
    """The registry's text, then ``extra``'s families that the registry does not have."""
    own: bytes = generate_latest(registry)
    if extra is None:
        return own
    return own + without_families(await extra(), family_names(own))


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.extra: ExtraMetrics | None = None  # appended to every scrape of this registry
        r = self.registry
        self.reviews = ReviewStats()
        r.register(self.reviews)
        self.bad_requests = Counter(
            "berth_webhook_bad_requests_total",
            "Requests answered with an HTTP 4xx (malformed review, body too large).",
            ["code"], registry=r,
        )
        self.policy_reloads = Counter(
            "berth_policy_reloads_total",
            "Policy file reloads by result (success, failure).",
            ["result"], registry=r,
        )
        self.policy_valid = Gauge(
            "berth_policy_last_reload_valid",
            "1 when the latest version of the policy file was accepted, 0 when it was refused "
            "and the last good version stays in force.",
            registry=r,
        )
        self.policy_info = Gauge(
            "berth_policy_generation_info",
            "The policy version in force (label: generation hash).",
            ["generation"], registry=r,
        )
        self.cert_expiry = Gauge(
            "berth_webhook_cert_expiry_timestamp_seconds",
            "Unix time when the serving certificate in use expires.",
            registry=r,
        )
        self.cert_reloads = Counter(
            "berth_webhook_cert_reloads_total",
            "Serving certificate reloads by result (success, failure).",
            ["result"], registry=r,
        )
        self.in_flight = Gauge(
            "berth_webhook_in_flight_requests", "Reviews being answered now.", registry=r
        )

    def policy_in_force(self, generation: str) -> None:
        self.policy_info.clear()
        self.policy_info.labels(generation=generation).set(1)


# --------------------------------------------------------------------------------------------
# /metrics on a port of its own
# --------------------------------------------------------------------------------------------


class MetricsServer:
    """Plain HTTP ``/metrics`` (and ``/healthz``) on a port apart from the webhook's.

    The webhook port must be reachable from wherever the apiserver runs, which is rarely known,
    so it is open to every source; the metrics port can then be opened only to the monitoring
    namespaces (config/components/network-policy). Without ``--metrics-port``, ``/metrics``
    stays on the webhook's TLS port, as before. Runs on the caller's event loop, the thread the
    reviews are counted on (:class:`ReviewStats` is not locked).
    """

    def __init__(self, registry: CollectorRegistry, *, host: str, port: int,
                 extra: Callable[[], ExtraMetrics | None] = lambda: None,
                 unix_path: Path | None = None) -> None:
        self.registry = registry
        self.host = host
        self._port = port
        self._extra = extra  # read at each scrape
        self.unix_path = unix_path  # serve on this Unix socket instead of host:port
        self.runner = web.ServerRunner(web.Server(self._handle, access_log=None))

    async def _handle(self, request: web.BaseRequest) -> web.Response:
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text="use GET\n", headers={"Allow": "GET, HEAD"})
        if request.path == "/metrics":
            return web.Response(body=await exposition(self.registry, self._extra()),
                                headers={"Content-Type": CONTENT_TYPE_LATEST})
        if request.path in ("/healthz", "/readyz"):
            return web.Response(text="ok\n")
        return web.Response(status=404, text=f"no such path {request.path}; "
                            "this port serves /metrics\n")

    async def start(self) -> None:
        await self.runner.setup()
        if self.unix_path is not None:
            await web.UnixSite(self.runner, str(self.unix_path)).start()
        else:
            await web.TCPSite(self.runner, self.host, self._port).start()

    @property
    def port(self) -> int:
        for addr in self.runner.addresses:
            return int(addr[1])
        return self._port

    async def stop(self) -> None:
        await self.runner.cleanup()
