"""``berth serve``: the webhook and the controller in one process, or the controller alone.

Every replica serves the webhook (aiohttp on the main event loop); the controller's watches,
lease loop and cycle loop run in threads beside it, and only the replica that holds the Lease
runs cycles. Both share one Prometheus registry, served at the webhook's ``/metrics`` or, with
``metrics_port``, as plain HTTP on a port of its own. The policy the webhook reloads is handed
to the controller before its next cycle.

With ``webhook=False`` (``berth serve --no-webhook``, config/overlays/split) the process runs
the controller only: it reloads the policy file itself and serves nothing but the metrics port
(``/metrics``, ``/healthz``). The webhook then runs as ``berth webhook`` under a service
account with no API rights, so the internet-facing process holds no token that may patch pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from admission.controller import Controller, Metrics, Settings, from_policy, selfsigned
from admission.kube import KubeApi, load_client
from admission.metrics import MetricsServer, WebhookMetrics
from admission.policy import Policy
from admission.webhook import PolicySource, WebhookConfig, WebhookServer, start_webhook

log = logging.getLogger("berth.serve")

POLICY_INTERVAL = 2.0  # seconds between policy file checks without a webhook (as the webhook)


@dataclass(frozen=True, slots=True)
class ServeConfig:
    policy: Path
    cert_dir: Path | None  # None only without the webhook
    kubeconfig: str | None = None
    host: str = "127.0.0.1"
    port: int = 8443
    metrics_port: int | None = None  # None: /metrics on the webhook port
    webhook: bool = True  # False: the controller alone (berth serve --no-webhook)
    namespace: str = "berth-system"  # where the Lease lives
    lease_name: str = "berth-controller"
    identity: str = ""  # this replica's name in the Lease; default: the pod's (host) name
    # Self-managed certificates (config/components/self-signed-certs): the Secret that holds
    # them, the Service the certificate names, the webhook configuration that gets the CA.
    self_signed_secret: str | None = None
    webhook_service: str = "berth-webhook"
    webhook_config: str = "berth"


def identity_default() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


class PolicySettings:
    """Settings derived from the current policy, rebuilt only when it changes."""

    def __init__(self, current: Callable[[], Policy]) -> None:
        self._current = current
        self._policy: Policy | None = None
        self._settings: Settings | None = None

    def __call__(self) -> Settings:
        policy = self._current()
        if policy is not self._policy or self._settings is None:
            self._policy, self._settings = policy, from_policy(policy)
        return self._settings


class ControllerOnly:
    """What stands in for the webhook server without one: the policy file, re-read every few
    seconds, and the metrics port when one is given."""

    def __init__(self, cfg: ServeConfig, registry: WebhookMetrics) -> None:
        self.policies = PolicySource(cfg.policy, registry)
        self.metrics = (None if cfg.metrics_port is None else MetricsServer(
            registry.registry, host=cfg.host, port=cfg.metrics_port))
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.metrics is not None:
            await self.metrics.start()
        self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(POLICY_INTERVAL)
            self.policies.check()

    async def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        if self.metrics is not None:
            await self.metrics.stop()


async def _self_signed(api: KubeApi, cfg: ServeConfig, secret: str) -> None:
    """The Secret with the webhook's pair (created when missing) and its CA in the webhook
    configuration. Without a webhook here, the files go to a scratch directory: the webhook
    replicas mount the Secret itself."""
    cert_dir = cfg.cert_dir or Path(tempfile.mkdtemp(prefix="berth-certs-"))
    await asyncio.get_running_loop().run_in_executor(None, lambda: selfsigned.ensure(
        api, namespace=cfg.namespace, secret=secret, service=cfg.webhook_service,
        webhook_config=cfg.webhook_config, cert_dir=cert_dir))


async def run_serve(cfg: ServeConfig) -> None:
    api = KubeApi(load_client(cfg.kubeconfig))  # fails fast, before anything listens
    if cfg.self_signed_secret is not None:
        await _self_signed(api, cfg, cfg.self_signed_secret)
    registry = WebhookMetrics()
    front: WebhookServer | ControllerOnly
    if cfg.webhook:
        assert cfg.cert_dir is not None, "the webhook needs its certificate directory"
        front = await start_webhook(WebhookConfig(
            policy=cfg.policy, cert_dir=cfg.cert_dir, host=cfg.host, port=cfg.port,
            metrics_port=cfg.metrics_port), registry)
        policies = front.state.policies
    else:
        front = ControllerOnly(cfg, registry)
        await front.start()
        policies = front.policies
    settings = PolicySettings(lambda: policies.policy)
    controller = Controller(api=api, settings=settings(), identity=cfg.identity
                            or identity_default(), namespace=cfg.namespace,
                            lease_name=cfg.lease_name, metrics=Metrics(registry.registry),
                            settings_source=settings)
    controller.start()
    serving = (f"webhook on {cfg.host}:{front.port}" if isinstance(front, WebhookServer)
               else "no webhook")
    metrics = (f"metrics on http://{cfg.host}:{cfg.metrics_port}/metrics"
               if cfg.metrics_port is not None else "metrics on the webhook port")
    log.info("berth serving %s, %s; controller %s competing for lease %s/%s", serving, metrics,
             controller.elector.identity, cfg.namespace, cfg.lease_name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down: controller first (gives the lease up), then the webhook drains")
    await loop.run_in_executor(None, controller.stop)
    await front.stop()
