"""The webhook's per-review metrics (kept in plain counters, exposed at scrape time) read the
same as prometheus-client's own histogram and counter would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from admission.metrics import LATENCY_BUCKETS, WebhookMetrics


def _samples(text: str, prefix: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_review_histogram_matches_prometheus_client() -> None:
    observed = [0.00004, 0.0001, 0.00010001, 0.0003, 0.001, 0.02, 0.5, 1.0, 3.0, 0.0]
    metrics = WebhookMetrics()
    reference_registry = CollectorRegistry()
    reference = Histogram("berth_webhook_review_seconds", "ref", buckets=LATENCY_BUCKETS,
                          registry=reference_registry)
    for seconds in observed:
        metrics.reviews.observe(seconds, "mutated", "admitted")
        reference.observe(seconds)
    ours = _samples(generate_latest(metrics.registry).decode(), "berth_webhook_review_seconds")
    theirs = _samples(generate_latest(reference_registry).decode(),
                      "berth_webhook_review_seconds")
    theirs = {k: v for k, v in theirs.items() if "_created" not in k}
    assert ours == theirs
    assert metrics.reviews.count == len(observed)


def test_decisions_are_counted_by_outcome_and_reason() -> None:
    metrics = WebhookMetrics()
    for outcome, reason in [("mutated", "admitted"), ("denied", "bad-fraction"),
                            ("mutated", "admitted"), ("untouched", "no-gpu")]:
        metrics.reviews.observe(0.0001, outcome, reason)
    text = generate_latest(metrics.registry).decode()
    assert _samples(text, "berth_webhook_decisions_total") == {
        'berth_webhook_decisions_total{outcome="denied",reason="bad-fraction"}': 1.0,
        'berth_webhook_decisions_total{outcome="mutated",reason="admitted"}': 2.0,
        'berth_webhook_decisions_total{outcome="untouched",reason="no-gpu"}': 1.0,
    }
    assert "# TYPE berth_webhook_decisions_total counter" in text


def test_a_second_collector_of_the_same_names_is_refused() -> None:
    registry = CollectorRegistry()
    WebhookMetrics(registry)
    try:
        Histogram("berth_webhook_review_seconds", "clash", registry=registry)
    except ValueError as exc:
        assert "Duplicated" in str(exc)
    else:
        raise AssertionError("a clashing metric name was accepted")
