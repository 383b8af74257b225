"""The Grafana dashboard plots only metrics Berth exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from admission.controller.metrics import Metrics
from admission.metrics import WebhookMetrics

DASHBOARD = Path(__file__).resolve().parents[3] / "config" / "dashboards" / "berth.json"


def exported_samples() -> set[str]:
    webhook = WebhookMetrics()
    Metrics(webhook.registry)  # berth serve shares one registry
    names = set()
    for family in webhook.registry.collect():
        names.add(family.name)
        for suffix in ("", "_total", "_bucket", "_sum", "_count"):
            names.add(family.name + suffix)
    return names


def test_every_panel_query_names_an_exported_metric() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exported = exported_samples()
    queried = set()
    for panel in dash["panels"]:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            queried |= set(re.findall(r"\b(berth_[a-z_]+)", target["expr"]))
    missing = queried - exported
    assert not missing, f"the dashboard queries metrics Berth does not export: {missing}"
    core = {"berth_pending_gangs", "berth_pending_gpus", "berth_cycle_phase_seconds_bucket",
            "berth_solver_status_total", "berth_solver_gap",
            "berth_release_latency_seconds_bucket", "berth_releases_total",
            "berth_release_failures_total", "berth_leader"}
    assert core <= queried, f"panels missing for {core - queried}"
