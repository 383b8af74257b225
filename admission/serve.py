"""``berth serve``: the webhook and the controller in one process.

Every replica serves the webhook (aiohttp on the main event loop); the controller's watches,
lease loop and cycle loop run in threads beside it, and only the replica that holds the Lease
runs cycles. Both share one Prometheus registry, served at the webhook's ``/metrics``. The
policy the webhook reloads is handed to the controller before its next cycle.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

from admission.controller import Controller, Metrics, Settings, from_policy, selfsigned
from admission.kube import KubeApi, load_client
from admission.metrics import WebhookMetrics
from admission.policy import Policy
from admission.webhook import WebhookConfig, start_webhook

log = logging.getLogger("berth.serve")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    policy: Path
    cert_dir: Path
    kubeconfig: str | None = None
    host: str = "127.0.0.1"
    port: int = 8443
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
    """Settings derived from the webhook's current policy, rebuilt only when it changes."""

    def __init__(self, current: object) -> None:
        self._source = current
        self._policy: Policy | None = None
        self._settings: Settings | None = None

    def __call__(self) -> Settings:
        policy = self._source.policies.policy  # type: ignore[attr-defined]
        if policy is not self._policy or self._settings is None:
            self._policy, self._settings = policy, from_policy(policy)
        return self._settings


async def run_serve(cfg: ServeConfig) -> None:
    api = KubeApi(load_client(cfg.kubeconfig))  # fails fast, before anything listens
    if cfg.self_signed_secret is not None:
        secret = cfg.self_signed_secret
        await asyncio.get_running_loop().run_in_executor(None, lambda: selfsigned.ensure(
            api, namespace=cfg.namespace, secret=secret,
            service=cfg.webhook_service, webhook_config=cfg.webhook_config,
            cert_dir=cfg.cert_dir))
    registry = WebhookMetrics()
    server = await start_webhook(WebhookConfig(policy=cfg.policy, cert_dir=cfg.cert_dir,
                                               host=cfg.host, port=cfg.port), registry)
    settings = PolicySettings(server.state)
    controller = Controller(api=api, settings=settings(), identity=cfg.identity
                            or identity_default(), namespace=cfg.namespace,
                            lease_name=cfg.lease_name, metrics=Metrics(registry.registry),
                            settings_source=settings)
    controller.start()
    log.info("berth serving webhook on %s:%d; controller %s competing for lease %s/%s",
             cfg.host, server.port, controller.elector.identity, cfg.namespace, cfg.lease_name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down: controller first (gives the lease up), then the webhook drains")
    await loop.run_in_executor(None, controller.stop)
    await server.stop()
