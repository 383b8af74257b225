"""``berth serve``: the webhook and the controller side by side, or the controller alone.

Every replica serves the webhook (aiohttp on the main event loop) and runs the controller,
whose watches, lease loop and cycle loop run in threads; only the replica that holds the Lease
runs cycles. By default the controller runs in a child process of its own
(:class:`ControllerProcess`, ``berth serve --no-webhook`` under the hood): sharing one
interpreter, a controller busy with a burst's watch events, its snapshot or its writes held
the interpreter lock while the apiserver waited on a review, and pod creation through Berth ran
at a quarter of the apiserver's pace (e2e/bench_pace.md). The child reads the same policy file
and serves its metrics on a Unix socket; the webhook's ``/metrics`` (or the ``metrics_port``)
appends them, so one scrape still shows both. A child that dies is started again with a backoff
(``berth_controller_process_restarts_total``); the child exits when its parent is gone. With
``controller_child=False`` (``--one-process``) both share one process and one registry, and
the policy the webhook reloads is handed to the controller before its next cycle.

With ``webhook=False`` (``berth serve --no-webhook``, config/overlays/split) the process runs
the controller only: it reloads the policy file itself and serves nothing but the metrics port
(``/metrics``, ``/healthz``). The webhook then runs as ``berth webhook --read-claims`` under
a service account that may only read ResourceClaims and templates by name (DRA pods' demand),
so the internet-facing process holds no token that may patch pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Counter

from admission.controller import Controller, Metrics, Settings, from_policy, selfsigned
from admission.kube import KubeApi, load_client
from admission.metrics import MetricsServer, WebhookMetrics
from admission.policy import Policy
from admission.webhook import PolicySource, WebhookConfig, WebhookServer, start_webhook

log = logging.getLogger("berth.serve")

POLICY_INTERVAL = 2.0  # seconds between policy file checks without a webhook (as the webhook)
PARENT_INTERVAL = 1.0  # seconds between checks that the parent of a controller child lives
CHILD_STOP_SECONDS = 30.0  # how long a stopping controller child may take before SIGKILL
RESTART_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)  # seconds before each restart of a dead child
SCRAPE_TIMEOUT = 5.0  # seconds the webhook's /metrics waits for the controller child's


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
    # With the webhook: the controller in a child process (False: in this one).
    controller_child: bool = True
    # The controller child's niceness (os.nice): under CPU pressure the reviews the apiserver
    # waits on go first; the controller's batch work (watches, solve, writes) takes the rest.
    controller_nice: int = 10
    log_level: str = "INFO"  # passed on to the controller child
    event_loop: str = "auto"  # passed on to the controller child
    # Set only in a controller child: where it serves its metrics, and the parent to outlive.
    metrics_socket: Path | None = None
    parent_pid: int | None = None
    nice: int = 0  # added to this process's niceness at start (the controller child's)


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
        self.metrics = (None if cfg.metrics_port is None and cfg.metrics_socket is None
                        else MetricsServer(registry.registry, host=cfg.host,
                                           port=cfg.metrics_port or 0,
                                           unix_path=cfg.metrics_socket))
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


def controller_argv(cfg: ServeConfig, socket_path: Path) -> list[str]:
    """The command line of the controller child: ``berth serve --no-webhook`` with this
    replica's policy, credentials, Lease and identity, its metrics on ``socket_path``."""
    # As the `berth` entry point runs (``-m admission.cli`` would load the module twice).
    entry = "from admission.cli import main; raise SystemExit(main())"
    argv = [sys.executable, "-c", entry, "serve", "--no-webhook",
            "--policy", str(cfg.policy), "--namespace", cfg.namespace,
            "--lease-name", cfg.lease_name, "--identity", cfg.identity or identity_default(),
            "--log-level", cfg.log_level, "--event-loop", cfg.event_loop,
            "--metrics-socket", str(socket_path), "--parent-pid", str(os.getpid()),
            "--nice", str(cfg.controller_nice)]
    if cfg.kubeconfig:
        argv += ["--kubeconfig", cfg.kubeconfig]
    return argv


class ControllerProcess:
    """The controller as a child process of the webhook's: started, watched, started again
    with a backoff when it dies, stopped with SIGTERM (it gives the Lease up), and scraped for
    its metrics over a Unix socket. The child stays in the parent's process group, so a signal
    to the group (a crash test's SIGKILL, a supervisor's SIGTERM) reaches both; it ignores
    SIGINT (a terminal's Ctrl-C), which the parent turns into an orderly stop, and it exits by
    itself within ``PARENT_INTERVAL`` when the parent alone is gone."""

    def __init__(self, cfg: ServeConfig, registry: WebhookMetrics) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="berth-controller-"))
        self.socket = self._dir / "metrics.sock"
        self.argv = controller_argv(cfg, self.socket)
        self.proc: asyncio.subprocess.Process | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self.restarts = Counter("berth_controller_process_restarts",
                                "Times the controller child process died and was started "
                                "again", registry=registry.registry)

    async def start(self) -> None:
        await self._spawn()
        self._task = asyncio.create_task(self._supervise())

    async def _spawn(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        self.proc = await asyncio.create_subprocess_exec(*self.argv)
        log.info("controller process %d started", self.proc.pid)

    async def _supervise(self) -> None:
        failures = 0
        while True:
            assert self.proc is not None
            started = asyncio.get_running_loop().time()
            code = await self.proc.wait()
            if self._stopping:
                return
            if asyncio.get_running_loop().time() - started > 60:
                failures = 0  # it ran a while: start over from the shortest backoff
            delay = RESTART_BACKOFF[min(failures, len(RESTART_BACKOFF) - 1)]
            failures += 1
            log.error("controller process %d exited with %s; starting it again in %.0f s "
                      "(the webhook keeps serving)", self.proc.pid, code, delay)
            self.restarts.inc()
            await asyncio.sleep(delay)
            if self._stopping:
                return
            await self._spawn()

    async def scrape(self) -> bytes:
        """The child's /metrics text; a comment saying why when it does not answer."""
        import aiohttp

        try:
            async with aiohttp.ClientSession(
                    connector=aiohttp.UnixConnector(path=str(self.socket)),
                    timeout=aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT)) as session, \
                    session.get("http://controller/metrics") as resp:
                return await resp.read()
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:
            return f"# the controller process did not answer: {exc or type(exc).__name__}\n" \
                .encode()

    async def stop(self) -> None:
        self._stopping = True
        proc = self.proc
        if proc is not None and proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), CHILD_STOP_SECONDS)
            except TimeoutError:
                log.error("controller process %d did not stop in %.0f s: killing it",
                          proc.pid, CHILD_STOP_SECONDS)
                proc.kill()
                await proc.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        shutil.rmtree(self._dir, ignore_errors=True)


async def _parent_gone(parent: int, stop: asyncio.Event) -> None:
    while os.getppid() == parent:
        await asyncio.sleep(PARENT_INTERVAL)
    log.warning("parent process %d is gone: the controller stops", parent)
    stop.set()


async def run_serve(cfg: ServeConfig) -> None:
    if cfg.nice:
        os.nice(cfg.nice)  # before any thread starts: threads inherit it
    api = KubeApi(load_client(cfg.kubeconfig))  # fails fast, before anything listens
    if cfg.self_signed_secret is not None:
        await _self_signed(api, cfg, cfg.self_signed_secret)
    registry = WebhookMetrics()
    if cfg.webhook and cfg.controller_child:
        await _serve_two_processes(cfg, registry)
        return
    front: WebhookServer | ControllerOnly
    if cfg.webhook:
        assert cfg.cert_dir is not None, "the webhook needs its certificate directory"
        front = await start_webhook(WebhookConfig(
            policy=cfg.policy, cert_dir=cfg.cert_dir, host=cfg.host, port=cfg.port,
            metrics_port=cfg.metrics_port, read_claims=True, kubeconfig=cfg.kubeconfig),
            registry)
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
               if cfg.metrics_port is not None else f"metrics on {cfg.metrics_socket}"
               if cfg.metrics_socket is not None else "metrics on the webhook port")
    log.info("berth serving %s, %s; controller %s competing for lease %s/%s", serving, metrics,
             controller.elector.identity, cfg.namespace, cfg.lease_name)
    # A controller child stops on SIGTERM (its parent's, or its group's) and when its parent
    # is gone, never on SIGINT: the parent decides the order of an interactive stop.
    stop = _stop_on_signals(interrupt=cfg.parent_pid is None)
    watcher = (None if cfg.parent_pid is None
               else asyncio.create_task(_parent_gone(cfg.parent_pid, stop)))
    await stop.wait()
    if watcher is not None:
        watcher.cancel()
    log.info("shutting down: controller first (gives the lease up), then the webhook drains")
    await asyncio.get_running_loop().run_in_executor(None, controller.stop)
    await front.stop()


def _stop_on_signals(*, interrupt: bool = True) -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if interrupt:
        loop.add_signal_handler(signal.SIGINT, stop.set)
    else:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return stop


async def _serve_two_processes(cfg: ServeConfig, registry: WebhookMetrics) -> None:
    """The webhook here, the controller in a child process (see the module's docstring)."""
    assert cfg.cert_dir is not None, "the webhook needs its certificate directory"
    child = ControllerProcess(cfg, registry)
    registry.extra = child.scrape
    await child.start()
    try:
        front = await start_webhook(WebhookConfig(
            policy=cfg.policy, cert_dir=cfg.cert_dir, host=cfg.host, port=cfg.port,
            metrics_port=cfg.metrics_port, read_claims=True, kubeconfig=cfg.kubeconfig),
            registry)
    except BaseException:
        await child.stop()
        raise
    log.info("berth serving webhook on %s:%s, %s; controller in process %s competing for "
             "lease %s/%s", cfg.host, front.port,
             f"metrics on http://{cfg.host}:{cfg.metrics_port}/metrics"
             if cfg.metrics_port is not None else "metrics on the webhook port",
             child.proc.pid if child.proc else "?", cfg.namespace, cfg.lease_name)
    await _stop_on_signals().wait()
    log.info("shutting down: controller first (gives the lease up), then the webhook drains")
    await child.stop()
    log.info("controller process stopped (exit %s); draining the webhook",
             child.proc.returncode if child.proc else None)
    await front.stop()
