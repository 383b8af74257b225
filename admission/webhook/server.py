"""The webhook's HTTPS server: it parses, calls :func:`admission.webhook.review.review`, serialises.

Two error channels (as the apiserver expects): a request that is not an AdmissionReview gets an
HTTP 400 (413 when the body is too large); a pod the policy refuses gets HTTP 200 with
``allowed: false`` and a message. The server never answers a review with a 5xx: an unexpected
failure inside review is logged and answered as a refusal that says so.

Background work (a task the server starts and stops): the policy file is re-read every few
seconds, in a worker thread so that parsing a large or hostile file never stalls reviews, and
swapped in when it changed and is valid (an invalid version is refused, logged and counted;
the last good one stays), and the TLS pair is re-hashed and reloaded into the live context.

Clients are bounded: a connection must finish a request's headers within ``idle_timeout`` of
opening (or of its last answer) and its body within ``body_timeout``, so a client that stalls
holds a connection for seconds, not an hour; one that goes away mid-body is logged in a line.
``berth serve`` reuses :func:`start_webhook` to run the webhook next to the controller.

Cost per review is what bounds throughput here (bench/webhook_load.md): the server runs on
aiohttp's low-level server (see :class:`WebhookHandler`) and, when installed, on uvloop
(admission/event_loop.py); nothing on the review path logs, takes a lock or looks up a
labelled metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import StreamReader, hdrs, web
from prometheus_client import CONTENT_TYPE_LATEST

from admission.certs import TlsReloader
from admission.dra import ClaimProblem, pod_claims
from admission.event_loop import loop_name
from admission.metrics import MetricsServer, WebhookMetrics, exposition
from admission.policy import Policy, PolicyError, PolicyIssue, check_text
from admission.webhook.claims import ClaimReader, ClaimReadError, api_client
from admission.webhook.demand import PodProblem
from admission.webhook.review import (
    Decision,
    MalformedReview,
    Outcome,
    context_for,
    dumps,
    loads,
    parse_review,
    refusal,
    review,
    review_response,
)
from admission.webhook.types import AdmissionResponse

log = logging.getLogger("berth.webhook")

# An AdmissionReview carries the object (and oldObject on UPDATE); etcd caps an object at
# 1.5 MiB by default, so 4 MiB holds any real review and refuses floods early.
MAX_BODY = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    policy: Path
    cert_dir: Path | None  # None: plain HTTP (tests only; the CLI always serves TLS)
    host: str = "127.0.0.1"
    port: int = 8443
    policy_interval: float = 2.0  # seconds between policy file checks
    cert_interval: float = 10.0  # seconds between certificate checks
    max_body: int = MAX_BODY
    drain_seconds: float = 2.0  # not ready before closing, so endpoints drop this replica
    shutdown_timeout: float = 25.0  # most time in-flight reviews get to finish
    # None: /metrics on the webhook port (TLS). A port: plain HTTP /metrics there instead, so
    # the webhook port, which must be open to the apiserver, serves only what it needs.
    metrics_port: int | None = None
    # A connection is closed when it has not sent a whole request's headers this long after
    # opening or after its last answer (aiohttp's keep-alive timer; under the 90 s for which
    # kube-apiserver keeps an idle connection, so the server is the side that closes).
    idle_timeout: float = 60.0
    body_timeout: float = 10.0  # most time a request's body may take to arrive (then 408)
    # Read the ResourceClaims and templates a GPU pod names (DRA): with the credentials of
    # this kubeconfig, or in-cluster ones when ``read_claims`` and no kubeconfig is named.
    read_claims: bool = False
    kubeconfig: str | None = None


@dataclass(frozen=True, slots=True)
class _Probe:
    """What one look at the policy file found (built off the event loop)."""

    digest: str = ""
    unreadable: str = ""  # why the file could not be read ("" when it was)
    checked: bool = False  # the content was new, so it was validated
    policy: Policy | None = None
    issues: tuple[PolicyIssue, ...] = field(default=())


class PolicySource:
    """The policy in force, reloaded from its file when the content changes.

    The file is read by path each time, so a ConfigMap's symlink swap (``..data`` pointing to
    a new directory) is seen like any other change. :meth:`check_async` reads and validates in
    a worker thread and swaps on the loop; :meth:`check` does both in the caller's thread.
    """

    def __init__(self, path: Path, metrics: WebhookMetrics) -> None:
        self.path = path
        self.metrics = metrics
        text = self._read()
        policy, issues = check_text(text)
        if policy is None:
            raise PolicyError(issues, str(path))
        self.policy: Policy = policy
        self._digest = self._hash(text)
        self._refused = ""
        metrics.policy_valid.set(1)
        metrics.policy_in_force(policy.generation)

    @staticmethod
    def _hash(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def _read(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError([PolicyIssue("", f"cannot read the file: {exc}")],
                              str(self.path)) from None

    def check(self) -> bool:
        """Reload when the file changed; True when a new version is now in force."""
        return self._apply(self._probe())

    async def check_async(self) -> bool:
        """:meth:`check`, with the read and the validation in a worker thread."""
        return self._apply(await asyncio.to_thread(self._probe))

    def _probe(self) -> _Probe:
        """Read the file and validate it when its content is new. Only reads this object's
        state: it runs in a worker thread while the loop keeps serving."""
        try:
            text = self._read()
        except PolicyError as exc:
            return _Probe(unreadable=str(exc))
        digest = self._hash(text)
        if digest in (self._digest, self._refused):
            return _Probe(digest)
        policy, issues = check_text(text)
        return _Probe(digest, checked=True, policy=policy, issues=tuple(issues))

    def _apply(self, probe: _Probe) -> bool:
        if probe.unreadable:
            self._refuse(probe.unreadable, "unreadable")  # logged once until the file changes
            return False
        digest = probe.digest
        if digest == self._digest:
            if self._refused:  # the file is back to the version in force
                self._refused = ""
                self.metrics.policy_valid.set(1)
                log.info("policy %s is back to generation %s", self.path,
                         self.policy.generation)
            return False
        if digest == self._refused or not probe.checked:
            return False
        policy = probe.policy
        if policy is None:
            self._refuse("\n".join(i.render(str(self.path)) for i in probe.issues), digest)
            return False
        old = self.policy.generation
        self.policy, self._digest, self._refused = policy, digest, ""
        self.metrics.policy_reloads.labels(result="success").inc()
        self.metrics.policy_valid.set(1)
        self.metrics.policy_in_force(policy.generation)
        log.info("policy %s reloaded: generation %s -> %s", self.path, old, policy.generation)
        return True

    def _refuse(self, why: str, digest: str) -> None:
        if digest == self._refused:
            return
        self._refused = digest
        self.metrics.policy_reloads.labels(result="failure").inc()
        self.metrics.policy_valid.set(0)
        log.error("policy %s: new version refused, generation %s stays in force:\n%s",
                  self.path, self.policy.generation, why)


@dataclass
class WebhookState:
    policies: PolicySource
    metrics: WebhookMetrics
    tls: TlsReloader | None = None
    max_body: int = MAX_BODY
    body_timeout: float = 10.0
    draining: bool = False
    in_flight: int = 0
    claims: ClaimReader | None = None  # None: this webhook has no API access (DRA pods refused)

    def __post_init__(self) -> None:
        # Read at scrape time: no lock taken per request for this gauge.
        self.metrics.in_flight.set_function(lambda: self.in_flight)


def _plain(status: int, text: str) -> web.Response:
    return web.Response(status=status, text=text + "\n")


def _internal_refusal(uid: str) -> Decision:
    message = ("Berth: the webhook failed to review this pod (an internal error, logged); "
               "retry, and report it if it persists")
    return Decision({"uid": uid, "allowed": False,
                     "status": {"code": 403, "reason": "Forbidden", "message": message}},
                    Outcome.DENIED, "internal-error")


def encode_answer(api_version: str, response: AdmissionResponse) -> bytes:
    """The AdmissionReview answer as JSON bytes.

    The patch is base64 text of a couple of kilobytes, which needs no JSON escaping: it is
    spliced in after the rest is serialised rather than scanned once more by the encoder
    (about 2% of the instructions a whole review costs). ``response`` is left as
    it was given.
    """
    patch = response.get("patch")
    if patch is None:
        return dumps(review_response(api_version, response))
    del response["patch"]
    try:
        head = dumps(review_response(api_version, response))
    finally:
        response["patch"] = patch
    # head ends with the two closing braces of "response" and of the review
    return b"".join((head[:-2], b',"patch":"', patch.encode("ascii"), b'"}}'))


class BodyTooLarge(Exception):
    pass


async def _read_body(content: StreamReader, limit: int, timeout: float) -> bytes:
    """The whole body, or BodyTooLarge as soon as it passes ``limit`` (a chunked body has no
    Content-Length to refuse it by up front), or TimeoutError when it has not all arrived
    within ``timeout`` seconds (however slowly it trickles in)."""
    chunks, size = [], 0
    async with asyncio.timeout(timeout):
        while chunk := await content.readany():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge
            chunks.append(chunk)
    return b"".join(chunks)  # one chunk (the usual case) is returned as it is, not copied


_Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


class WebhookHandler:
    """The server's request handler, on aiohttp's low-level server.

    aiohttp's ``web.Application`` resolves every request through its router, builds match
    info and a ``web.Request``, and looks for middlewares; with four fixed paths one dict
    look-up does the routing. What the application did for free is done here: 404 and 405
    (with Allow), HEAD on the GET paths, ``Expect: 100-continue``, and the body size limit.
    """

    def __init__(self, state: WebhookState, *, metrics: bool = True) -> None:
        self.state = state
        self._routes: dict[str, tuple[str, _Handler]] = {
            "/mutate-pods": ("POST", self._mutate_guarded),
            "/healthz": ("GET", self._healthz),
            "/readyz": ("GET", self._readyz),
        }
        if metrics:
            self._routes["/metrics"] = ("GET", self._metrics)

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        route = self._routes.get(request.path)
        if route is None:
            return _plain(404, f"no such path {request.path}; Berth serves /mutate-pods")
        method, handler = route
        if request.method != method and not (method == "GET" and request.method == "HEAD"):
            allow = "GET, HEAD" if method == "GET" else method
            response = _plain(405, f"{request.method} is not allowed here; use {allow}")
            response.headers[hdrs.ALLOW] = allow
            return response
        return await handler(request)

    async def _mutate_guarded(self, request: web.BaseRequest) -> web.StreamResponse:
        state = self.state
        state.in_flight += 1
        try:
            return await self._mutate(request)
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception:
            log.exception("unexpected failure answering %s", request.path)
            state.metrics.bad_requests.labels(code="400").inc()
            return _plain(400, "the request could not be read")
        finally:
            state.in_flight -= 1

    async def _mutate(self, request: web.BaseRequest) -> web.Response:
        state = self.state
        limit = state.max_body
        length = request.content_length
        if length is not None and length > limit:
            state.metrics.bad_requests.labels(code="413").inc()
            return _plain(413, f"body of {length} bytes exceeds the {limit}-byte limit")
        expect = request.headers.get(hdrs.EXPECT)
        if expect is not None:  # curl sends it for large bodies; kube-apiserver does not
            if expect.lower() != "100-continue":
                return _plain(417, f"unknown Expect: {expect}")
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            body = await _read_body(request.content, limit, state.body_timeout)
        except BodyTooLarge:
            state.metrics.bad_requests.labels(code="413").inc()
            return _plain(413, f"body exceeds the {limit}-byte limit")
        except TimeoutError:
            state.metrics.bad_requests.labels(code="408").inc()
            log.warning("client %s sent no whole body within %gs; connection closed",
                        request.remote, state.body_timeout)
            response = _plain(408, f"the body did not arrive within {state.body_timeout:g}s")
            response.force_close()
            await response.prepare(request)
            await response.write_eof()
            request.protocol.force_close()  # answered: no lingering read of a body not coming
            return response
        except ConnectionError as exc:  # the client went away mid-body: nothing to answer
            state.metrics.bad_requests.labels(code="aborted").inc()
            log.warning("client %s closed the connection before its body had arrived (%s)",
                        request.remote, exc)
            return _plain(400, "the connection was closed before the body had arrived")
        start = time.perf_counter()
        try:
            version, admission_request = parse_review(loads(body))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
            state.metrics.bad_requests.labels(code="400").inc()
            reason = str(exc) if isinstance(exc, MalformedReview) else f"not JSON: {exc}"
            return _plain(400, f"not an AdmissionReview: {reason}")
        try:
            claims = await _claims_for(state, admission_request)
            if isinstance(claims, Decision):
                decision = claims
            else:
                decision = review(admission_request, state.policies.policy, claims)
        except Exception:  # never a 5xx: log it and refuse with an explanation
            log.exception("review failed for request %s", admission_request.get("uid"))
            decision = _internal_refusal(str(admission_request.get("uid", "")))
        payload = encode_answer(version, decision.response)
        state.metrics.reviews.observe(time.perf_counter() - start, decision.outcome,
                                      decision.reason)
        return web.Response(body=payload, content_type="application/json")

    async def _healthz(self, request: web.BaseRequest) -> web.Response:
        return _plain(200, "ok")

    async def _readyz(self, request: web.BaseRequest) -> web.Response:
        if self.state.draining:
            return _plain(503, "draining")
        return _plain(200, f"ready; policy generation {self.state.policies.policy.generation}")

    async def _metrics(self, request: web.BaseRequest) -> web.Response:
        metrics = self.state.metrics
        return web.Response(body=await exposition(metrics.registry, metrics.extra),
                            headers={hdrs.CONTENT_TYPE: CONTENT_TYPE_LATEST})


async def _watch(state: WebhookState, policy_interval: float, cert_interval: float) -> None:
    next_cert = time.monotonic() + cert_interval
    while True:
        await asyncio.sleep(policy_interval)
        await state.policies.check_async()
        if state.tls is not None and time.monotonic() >= next_cert:
            next_cert = time.monotonic() + cert_interval
            _check_cert(state)


def _check_cert(state: WebhookState) -> None:
    tls = state.tls
    if tls is None or not tls.changed():
        return
    if tls.reload():
        state.metrics.cert_reloads.labels(result="success").inc()
        if tls.not_after is not None:
            state.metrics.cert_expiry.set(tls.not_after.timestamp())
        log.info("serving certificate reloaded; expires %s", tls.not_after)
    else:
        state.metrics.cert_reloads.labels(result="failure").inc()
        log.error("serving certificate not reloaded, the old one stays: %s", tls.last_error)


def new_state(config: WebhookConfig, metrics: WebhookMetrics | None = None) -> WebhookState:
    """Load the policy and certificates (raising PolicyError / CertError with the fix)."""
    metrics = metrics or WebhookMetrics()
    tls = TlsReloader(config.cert_dir) if config.cert_dir is not None else None
    if tls is not None and tls.not_after is not None:
        metrics.cert_expiry.set(tls.not_after.timestamp())
    claims = None
    if config.read_claims or config.kubeconfig:
        claims = ClaimReader(api_client(config.kubeconfig))
    return WebhookState(PolicySource(config.policy, metrics), metrics, tls, config.max_body,
                        config.body_timeout, claims=claims)


async def _claims_for(state: WebhookState, request: Mapping[str, Any]
                      ) -> Mapping[tuple[str, str], Any] | Decision | None:
    """What the review needs of the claims a pod CREATE names (None: it names none, or it is
    not Berth's to review), or the refusal when they cannot be read."""
    pod = request.get("object")
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if (not isinstance(spec, dict) or not spec.get("resourceClaims")
            or request.get("operation") != "CREATE"):
        return None
    namespace = str(request.get("namespace") or "")
    if namespace not in context_for(state.policies.policy).by_namespace:
        return None
    uid = str(request.get("uid", ""))
    try:
        refs = pod_claims(pod)  # type: ignore[arg-type]
    except ClaimProblem as problem:
        return refusal(uid, PodProblem(problem.path, problem.message, f"dra-{problem.reason}"))
    if state.claims is None:
        return refusal(uid, PodProblem(
            "spec.resourceClaims", "this webhook runs without API access and cannot read the "
            "pod's ResourceClaims; the cluster admin runs it with read access to "
            "resourceclaims and resourceclaimtemplates (docs/dra.md)", "dra-no-access"))
    try:
        return await state.claims.read(namespace, refs)
    except ClaimReadError as exc:
        return refusal(uid, PodProblem(exc.ref.path, f"Berth could not read {exc}; try again",
                                       "dra-unreadable"))


class WebhookServer:
    """A running webhook: the policy and certificate watcher plus the listening server.
    :meth:`stop` drains in-flight reviews before closing."""

    def __init__(self, config: WebhookConfig, state: WebhookState) -> None:
        self.config = config
        self.state = state
        self.handler = WebhookHandler(state, metrics=config.metrics_port is None)
        self.runner = web.ServerRunner(
            web.Server(self.handler, access_log=None, keepalive_timeout=config.idle_timeout),
            shutdown_timeout=config.shutdown_timeout)
        self.metrics_server = (None if config.metrics_port is None else MetricsServer(
            state.metrics.registry, host=config.host, port=config.metrics_port,
            extra=lambda: state.metrics.extra))
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.config.host, self.config.port,
                           ssl_context=self.state.tls.context if self.state.tls else None)
        await site.start()
        if self.metrics_server is not None:
            await self.metrics_server.start()
        self._watcher = asyncio.create_task(
            _watch(self.state, self.config.policy_interval, self.config.cert_interval))

    @property
    def port(self) -> int:
        for addr in self.runner.addresses:
            return int(addr[1])
        return self.config.port

    async def stop(self) -> None:
        """Drain: report not ready (so endpoints drop this replica) while still serving, then
        stop listening, let every review already begun finish (even one whose body is still
        arriving), then close the connections."""
        self.state.draining = True
        await asyncio.sleep(self.config.drain_seconds)
        for site in list(self.runner.sites):
            await site.stop()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.shutdown_timeout
        while self.state.in_flight and loop.time() < deadline:
            await asyncio.sleep(0.01)
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        await self.runner.cleanup()
        if self.metrics_server is not None:
            await self.metrics_server.stop()


async def start_webhook(config: WebhookConfig,
                        metrics: WebhookMetrics | None = None) -> WebhookServer:
    server = WebhookServer(config, new_state(config, metrics))
    await server.start()
    return server


async def run_webhook(config: WebhookConfig) -> None:
    """Serve until SIGTERM or SIGINT, then drain and stop."""
    server = await start_webhook(config)
    # Everything loaded so far lives as long as the process: keep the collector from
    # re-scanning it on every full collection (reviews allocate many short-lived objects).
    gc.freeze()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    scheme = "https" if config.cert_dir else "http"
    log.info("berth webhook serving %s://%s:%d/mutate-pods on %s's loop (policy generation %s)",
             scheme, config.host, server.port, loop_name(),
             server.state.policies.policy.generation)
    await stop.wait()
    log.info("shutting down: draining in-flight reviews")
    await server.stop()
