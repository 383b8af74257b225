"""/metrics on a port of its own (``--metrics-port``), and ``berth serve --no-webhook``.

By default nothing changes: /metrics is served on the webhook's port. With a metrics port,
/metrics (plain HTTP) moves there and the webhook port stops serving it, so a NetworkPolicy can
open the webhook port to everyone and the metrics port to monitoring only.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import aiohttp
import pytest

from admission.cli import main
from admission.metrics import MetricsServer, WebhookMetrics
from admission.serve import ControllerOnly, ServeConfig
from admission.webhook import WebhookConfig, start_webhook

SAMPLE = Path(__file__).resolve().parents[2] / "config" / "policy" / "sample-policy.yaml"


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    shutil.copy(SAMPLE, path)
    return path


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.text()


async def test_metrics_stay_on_the_webhook_port_by_default(policy_file: Path) -> None:
    server = await start_webhook(WebhookConfig(policy=policy_file, cert_dir=None, port=0,
                                               drain_seconds=0))
    try:
        assert server.metrics_server is None
        status, text = await _get(f"http://127.0.0.1:{server.port}/metrics")
        assert status == 200 and "berth_webhook_review_seconds" in text
    finally:
        await server.stop()


async def test_a_metrics_port_moves_metrics_off_the_webhook_port(policy_file: Path) -> None:
    server = await start_webhook(WebhookConfig(policy=policy_file, cert_dir=None, port=0,
                                               drain_seconds=0, metrics_port=0))
    try:
        assert server.metrics_server is not None
        metrics = f"http://127.0.0.1:{server.metrics_server.port}"
        assert server.metrics_server.port != server.port
        status, text = await _get(f"{metrics}/metrics")
        assert status == 200 and "berth_policy_last_reload_valid 1.0" in text
        assert (await _get(f"{metrics}/healthz"))[0] == 200
        assert (await _get(f"{metrics}/mutate-pods"))[0] == 404  # no reviews here
        assert (await _get(f"http://127.0.0.1:{server.port}/metrics"))[0] == 404
        assert (await _get(f"http://127.0.0.1:{server.port}/readyz"))[0] == 200
    finally:
        await server.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        await _get(f"{metrics}/metrics")  # stopped with the webhook


async def test_metrics_server_refuses_other_methods() -> None:
    server = MetricsServer(WebhookMetrics().registry, host="127.0.0.1", port=0)
    await server.start()
    try:
        async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{server.port}/metrics") as resp:
            assert resp.status == 405 and resp.headers["Allow"] == "GET, HEAD"
    finally:
        await server.stop()


async def test_controller_only_reloads_the_policy_and_serves_metrics(
        policy_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("admission.serve.POLICY_INTERVAL", 0.02)
    registry = WebhookMetrics()
    front = ControllerOnly(ServeConfig(policy=policy_file, cert_dir=None, webhook=False,
                                       metrics_port=0), registry)
    await front.start()
    try:
        before = front.policies.policy.generation
        policy_file.write_text(policy_file.read_text() + "\n# a new generation\n")
        for _ in range(200):
            if front.policies.policy.generation != before:
                break
            await asyncio.sleep(0.01)
        assert front.policies.policy.generation != before
        assert front.metrics is not None
        status, text = await _get(f"http://127.0.0.1:{front.metrics.port}/metrics")
        assert status == 200 and "berth_policy_reloads_total" in text
    finally:
        await front.stop()


@pytest.mark.parametrize(("argv", "message"), [
    (["serve", "--policy", "{policy}"], "--cert-dir is required (unless --no-webhook)"),
    (["serve", "--policy", "{policy}", "--cert-dir", "/x", "--metrics-port", "8443"],
     "--metrics-port must differ from --port (8443)"),
    (["webhook", "--policy", "{policy}", "--cert-dir", "/x", "--metrics-port", "70000"],
     "--metrics-port must be 1..65535, got 70000"),
    (["serve", "--policy", "{policy}", "--cert-dir", "/x", "--controller-nice", "25"],
     "--controller-nice must be 0..19 (a niceness to add), got 25"),
    (["serve", "--policy", "{policy}", "--cert-dir", "/x", "--controller-nice", "-5"],
     "--controller-nice must be 0..19 (a niceness to add), got -5"),
])
def test_flags_are_checked(policy_file: Path, capsys: pytest.CaptureFixture[str],
                           argv: list[str], message: str) -> None:
    assert main([a.format(policy=policy_file) for a in argv]) == 2
    assert message in capsys.readouterr().err


def test_serve_parses_controller_only_mode(policy_file: Path) -> None:
    from admission.cli import build_parser

    args = build_parser().parse_args(["serve", "--policy", str(policy_file), "--no-webhook",
                                      "--metrics-port", "9090"])
    assert args.no_webhook and args.cert_dir is None and args.metrics_port == 9090
