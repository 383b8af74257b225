"""Prometheus metrics of the webhook: review latency, decisions, policy reloads, certificates.

Each server owns its own registry (not prometheus-client's global one), so several servers can
live in one process, as they do in tests and in ``berth serve`` next to the controller's own
metrics, which may register on the same registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Reviews take tens of microseconds to a few milliseconds; the apiserver times out at seconds.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0)


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.review_seconds = Histogram(
            "berth_webhook_review_seconds",
            "Time to decide one AdmissionReview (parse to serialised answer).",
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.decisions = Counter(
            "berth_webhook_decisions_total",
            "Admission decisions by outcome (untouched, mutated, denied) and reason.",
            ["outcome", "reason"], registry=r,
        )
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
