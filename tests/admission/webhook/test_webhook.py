"""The webhook server in-process (the server `berth webhook` runs, on a free port, over plain
HTTP): real payloads, every kind of bad request, random input from hypothesis, policy hot
reload and graceful drain."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from review_helpers import FIXTURES, SAMPLE, fixture

import admission.webhook.server as webhook_module
from admission.webhook import WebhookConfig, WebhookServer, WebhookState, start_webhook

FIXTURE_NAMES = sorted(p.name for p in FIXTURES.glob("*.json"))


class Client:
    """Requests to a running webhook by path; ``state`` is the server's."""

    def __init__(self, server: WebhookServer, session: aiohttp.ClientSession) -> None:
        self.server = server
        self.state: WebhookState = server.state
        self.session = session
        self.base = f"http://127.0.0.1:{server.port}"

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.session.post(self.base + path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.session.get(self.base + path, **kwargs)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.session.request(method, self.base + path, **kwargs)


@contextlib.asynccontextmanager
async def serve(policy: Path, **config: Any) -> AsyncIterator[Client]:
    server = await start_webhook(WebhookConfig(policy=policy, cert_dir=None, port=0,
                                               drain_seconds=0, **config))
    try:
        async with aiohttp.ClientSession() as session:
            yield Client(server, session)
    finally:
        await server.stop()


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    shutil.copy(SAMPLE, path)
    return path


@pytest.fixture
async def client(policy_file: Path) -> AsyncIterator[Client]:
    async with serve(policy_file, max_body=64 * 1024, policy_interval=0.05) as c:
        yield c


async def post(client: Client, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    resp = await client.post("/mutate-pods", data=data,
                             headers={"Content-Type": "application/json"})
    text = await resp.text()
    try:
        return resp.status, json.loads(text)
    except ValueError:
        return resp.status, text


def metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize("name", FIXTURE_NAMES)
async def test_real_reviews_are_answered(client: Client, name: str) -> None:
    payload = fixture(name)
    status, body = await post(client, payload)
    assert status == 200
    assert body["apiVersion"] == "admission.k8s.io/v1" and body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == payload["request"]["uid"]
    assert body["response"]["allowed"] is True
    assert ("patch" in body["response"]) == (name != "non-gpu-pod.json")


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[" * 60_000, "not JSON"),
        ([], "must be a JSON object"),
        ({"apiVersion": "v1", "kind": "AdmissionReview", "request": {"uid": "u"}}, "apiVersion"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {"uid": "u"}}, "kind"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": ""}}, "request.uid"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
          "request": {"uid": "u", "object": []}}, "request.object"),
    ],
)
async def test_malformed_requests_get_400(client: Client, body: Any, needle: str) -> None:
    status, text = await post(client, body)
    assert status == 400 and needle in text


async def test_oversized_body_gets_413(client: Client) -> None:
    status, text = await post(client, b"x" * (65 * 1024))
    assert status == 413 and "limit" in text


async def test_health_ready_and_metrics(client: Client) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    await post(client, fixture("job-pod.json"))
    await post(client, b"nope")
    text = await (await client.get("/metrics")).text()
    assert 'berth_webhook_decisions_total{outcome="mutated",reason="admitted"} 1.0' in text
    assert metric(text, "berth_webhook_review_seconds_count") == 1
    assert 'berth_webhook_bad_requests_total{code="400"} 1.0' in text
    assert "berth_policy_generation_info{generation=" in text
    assert (await client.get("/mutate-pods")).status == 405


async def test_a_failing_review_is_refused_with_a_reason_never_a_5xx(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(request: Any, policy: Any) -> Any:
        raise KeyError("bug")

    monkeypatch.setattr(webhook_module, "review", broken)
    status, body = await post(client, fixture("job-pod.json"))
    assert status == 200 and body["response"]["allowed"] is False
    assert "internal error" in body["response"]["status"]["message"]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4),
    max_leaves=20,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = value
    return doc


@st.composite
def mutated_reviews(draw: st.DrawFn) -> Any:
    """A real review with one to three of its values replaced by random JSON."""
    doc = fixture(draw(st.sampled_from(FIXTURE_NAMES)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc["request"], ("request",))
        doc = _replace(doc, draw(st.sampled_from(paths)), draw(json_values))
    return doc


async def _check_answer(client: Client, body: Any) -> None:
    status, answer = await post(client, body)
    assert status in (200, 400), (status, answer)
    if status == 200:
        response = answer["response"]
        assert isinstance(response["allowed"], bool)
        if not response["allowed"]:
            message = response["status"]["message"]
            assert message.startswith("Berth: ") and len(message) > 20
            assert "internal error" not in message, message


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=json_values)
async def test_random_json_never_crashes(client: Client, body: Any) -> None:
    await _check_answer(client, body)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=mutated_reviews())
async def test_mutated_real_reviews_never_crash(client: Client, body: Any) -> None:
    await _check_answer(client, body)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=300))
async def test_random_bytes_never_crash(client: Client, raw: bytes) -> None:
    status, _ = await post(client, raw)
    assert status == 400


async def _wait_for(predicate: Any, timeout: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def _add_team_c(text: str) -> str:
    return text.replace("tenants:\n", "tenants:\n  - name: team-c\n    namespaces: [team-c]\n", 1)


def _team_c_review() -> dict[str, Any]:
    payload = fixture("plain-gpu-pod.json")
    payload["request"]["namespace"] = "team-c"
    payload["request"]["object"]["metadata"]["namespace"] = "team-c"
    return payload


async def test_policy_hot_reload_and_refusal_of_a_bad_version(
    client: Client, policy_file: Path
) -> None:
    state = client.state
    first = state.policies.policy.generation
    _, body = await post(client, _team_c_review())
    assert "patch" not in body["response"]  # team-c is not managed yet

    policy_file.write_text(_add_team_c(policy_file.read_text()))
    await _wait_for(lambda: state.policies.policy.generation != first)
    _, body = await post(client, _team_c_review())
    assert "patch" in body["response"]
    good = state.policies.policy.generation

    policy_file.write_text(policy_file.read_text().replace("weight: 2", "weight: -2"))
    await _wait_for(lambda: state.metrics.policy_valid._value.get() == 0)
    assert state.policies.policy.generation == good  # the last good version stays
    text = await (await client.get("/metrics")).text()
    assert 'berth_policy_reloads_total{result="failure"} 1.0' in text
    assert 'berth_policy_reloads_total{result="success"} 1.0' in text
    assert "berth_policy_last_reload_valid 0.0" in text
    assert (await client.get("/readyz")).status == 200


async def test_a_vanished_file_keeps_the_policy_and_is_reported_once(
    client: Client, policy_file: Path
) -> None:
    state = client.state
    good = policy_file.read_text()
    first = state.policies.policy.generation
    policy_file.unlink()
    await _wait_for(lambda: state.metrics.policy_valid._value.get() == 0)
    await asyncio.sleep(0.2)  # several more checks: still one failure counted
    assert state.metrics.policy_reloads.labels(result="failure")._value.get() == 1
    assert state.policies.policy.generation == first
    policy_file.write_text(good)
    await _wait_for(lambda: state.metrics.policy_valid._value.get() == 1)
    assert state.policies.policy.generation == first


async def test_configmap_symlink_swap_is_seen(tmp_path: Path) -> None:
    # The kubelet's layout: policy.yaml -> ..data/policy.yaml, ..data -> ..<timestamp>/
    mount = tmp_path / "mount"
    (mount / "..v1").mkdir(parents=True)
    shutil.copy(SAMPLE, mount / "..v1" / "policy.yaml")
    os.symlink("..v1", mount / "..data")
    os.symlink("..data/policy.yaml", mount / "policy.yaml")
    async with serve(mount / "policy.yaml", policy_interval=0.05) as client:
        state = client.state
        first = state.policies.policy.generation

        (mount / "..v2").mkdir()
        (mount / "..v2" / "policy.yaml").write_text(_add_team_c(SAMPLE.read_text()))
        os.symlink("..v2", mount / "..data_tmp")
        os.replace(mount / "..data_tmp", mount / "..data")  # atomic swap, as the kubelet does
        await _wait_for(lambda: state.policies.policy.generation != first)
        assert state.policies.policy.tenant_for_namespace("team-c") is not None


async def test_shutdown_drains_a_review_in_flight(policy_file: Path) -> None:
    server = await start_webhook(WebhookConfig(policy=policy_file, cert_dir=None, port=0,
                                               drain_seconds=0.2, shutdown_timeout=5))
    body = json.dumps(fixture("job-pod.json")).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"POST /mutate-pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:100])
    await writer.drain()
    await asyncio.sleep(0.1)  # the handler is now waiting for the rest of the body
    stopping = asyncio.create_task(server.stop())
    await asyncio.sleep(0.3)  # past the drain delay: the listener is closing
    assert not stopping.done()
    writer.write(body[100:])
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200")
    length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n")
                  if h.lower().startswith(b"content-length"))
    answer = json.loads(await reader.readexactly(length))
    assert answer["response"]["allowed"] is True
    await asyncio.wait_for(stopping, 10)
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", server.port)


async def test_readyz_reports_draining(client: Client) -> None:
    client.state.draining = True
    resp = await client.get("/readyz")
    assert resp.status == 503 and "draining" in await resp.text()
    status, _ = await post(client, fixture("job-pod.json"))
    assert status == 200  # still answering reviews while endpoints catch up


@pytest.mark.slow
async def test_a_burst_of_creates_is_answered_within_the_apiserver_timeout(
    client: Client,
) -> None:
    # A 10k-pod burst made Volcano's webhook time out; the apiserver gives Berth 5 s per call.
    # 600 reviews sent at once (over the client's 100 connections) must all be answered, each
    # well inside that budget.
    body = json.dumps(fixture("job-pod.json")).encode()
    loop = asyncio.get_running_loop()

    async def one() -> tuple[int, float]:
        start = loop.time()
        resp = await client.post("/mutate-pods", data=body,
                                 headers={"Content-Type": "application/json"})
        await resp.read()
        return resp.status, loop.time() - start

    results = await asyncio.gather(*(one() for _ in range(600)))
    assert {status for status, _ in results} == {200}
    assert max(seconds for _, seconds in results) < 5.0


async def test_routing_answers_what_the_apiserver_and_probes_send(client: Client) -> None:
    payload = fixture("job-pod.json")
    # kube-apiserver appends its timeout to the webhook's path
    resp = await client.post("/mutate-pods?timeout=10s", json=payload)
    assert resp.status == 200 and (await resp.json())["response"]["allowed"] is True
    resp = await client.get("/nowhere")
    assert resp.status == 404 and "/mutate-pods" in await resp.text()
    resp = await client.request("PUT", "/mutate-pods", json=payload)
    assert resp.status == 405 and resp.headers["Allow"] == "POST"
    resp = await client.post("/healthz")
    assert resp.status == 405 and resp.headers["Allow"] == "GET, HEAD"
    resp = await client.request("HEAD", "/readyz")
    assert resp.status == 200 and await resp.read() == b""


async def test_expect_100_continue_is_honoured(client: Client) -> None:
    resp = await client.post("/mutate-pods", json=fixture("job-pod.json"), expect100=True)
    assert resp.status == 200 and (await resp.json())["response"]["allowed"] is True


async def test_a_chunked_body_over_the_limit_gets_413(client: Client) -> None:
    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: refused as it arrives
        for _ in range(10):
            yield b" " * (10 * 1024)

    resp = await client.post("/mutate-pods", data=chunks())
    assert resp.status == 413 and "limit" in await resp.text()
    text = await (await client.get("/metrics")).text()
    assert 'berth_webhook_bad_requests_total{code="413"} 1.0' in text


async def test_a_chunked_review_under_the_limit_is_answered(client: Client) -> None:
    body = json.dumps(fixture("job-pod.json")).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(body), 300):
            yield body[i:i + 300]

    resp = await client.post("/mutate-pods", data=chunks())
    assert resp.status == 200 and "patch" in (await resp.json())["response"]


@settings(max_examples=200, deadline=None)
@given(
    version=st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]),
    uid=st.text(max_size=40),
    patch=st.none() | st.binary(max_size=3000),
    warnings=st.none() | st.lists(st.text(max_size=30), max_size=3),
    denied=st.booleans(),
)
def test_the_spliced_answer_is_the_json_of_the_response(
    version: str, uid: str, patch: bytes | None, warnings: list[str] | None, denied: bool
) -> None:
    response: dict[str, Any] = {"uid": uid, "allowed": not denied}
    if denied:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": "Berth: \"x\"\n"}
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(patch).decode("ascii")
    if warnings is not None:
        response["warnings"] = warnings
    before = dict(response)
    answer = webhook_module.encode_answer(version, response)  # type: ignore[arg-type]
    assert json.loads(answer) == {"apiVersion": version, "kind": "AdmissionReview",
                                  "response": before}
    assert response == before  # given back as it was
