"""The webhook server against clients that misbehave at the socket: one that stalls before its
headers are complete, one that sends headers and stalls (or trickles) its body, one that goes
away mid-body; and the policy reload, which must not parse on the event loop."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import threading
from pathlib import Path

import pytest
from review_helpers import SAMPLE, fixture
from test_webhook import _add_team_c, _wait_for, serve

import admission.webhook.server as webhook_module


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    shutil.copy(SAMPLE, path)
    return path


HEAD = (b"POST /mutate-pods HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 4000\r\n\r\n")


async def _answer(reader: asyncio.StreamReader, within: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and how long that took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    data = await asyncio.wait_for(reader.read(), within)  # EOF: the server closed
    return data, loop.time() - start


async def test_a_stalled_body_is_answered_408_and_closed(policy_file: Path) -> None:
    async with serve(policy_file, body_timeout=0.3) as client:
        reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
        writer.write(HEAD + b'{"apiVersion":')  # headers, then a body that never ends
        await writer.drain()
        data, took = await _answer(reader, within=10)
        writer.close()
        assert data.startswith(b"HTTP/1.1 408 "), data
        assert b"did not arrive within 0.3s" in data
        assert took < 5  # closed right after the answer, not after a 10 s lingering read
        text = await (await client.get("/metrics")).text()
        assert 'berth_webhook_bad_requests_total{code="408"} 1.0' in text


async def test_a_trickling_body_is_bounded_in_total(policy_file: Path) -> None:
    async with serve(policy_file, body_timeout=0.5) as client:
        reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
        writer.write(HEAD)
        await writer.drain()
        loop = asyncio.get_running_loop()
        start = loop.time()
        answered = asyncio.ensure_future(reader.read())
        while not answered.done() and loop.time() - start < 10:
            writer.write(b" ")  # one byte every 50 ms: never idle, never finished
            await writer.drain()
            await asyncio.sleep(0.05)
        data = await asyncio.wait_for(answered, 1)
        writer.close()
        assert data.startswith(b"HTTP/1.1 408 ") and loop.time() - start < 5


@pytest.mark.parametrize("sent", [b"", b"POST /mutate-pods HTTP/1.1\r\nHost: x\r\n"])
async def test_a_connection_without_whole_headers_is_closed(policy_file: Path,
                                                            sent: bytes) -> None:
    async with serve(policy_file, idle_timeout=0.3) as client:
        reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
        writer.write(sent)
        await writer.drain()
        data, took = await _answer(reader, within=10)
        writer.close()
        assert data == b"" and took < 5  # aiohttp's default would wait an hour


async def test_a_client_that_aborts_its_body_is_one_log_line(
        policy_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with serve(policy_file) as client:
        _, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
        writer.write(HEAD + b'{"apiVersion":')
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.transport.abort()  # gone mid-body
        await _wait_for(lambda: any("closed the connection" in r.getMessage()
                                    for r in caplog.records))
        await asyncio.sleep(0.1)
        status = (await client.get("/healthz")).status  # still serving
    assert status == 200
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert errors[0].exc_info is None  # no traceback
    assert "before its body had arrived" in errors[0].getMessage()


async def test_a_complete_review_is_still_answered_under_the_limits(policy_file: Path) -> None:
    async with serve(policy_file, body_timeout=0.5, idle_timeout=0.5) as client:
        body = json.dumps(fixture("job-pod.json")).encode()
        resp = await client.post("/mutate-pods", data=body,
                                 headers={"Content-Type": "application/json"})
        assert resp.status == 200 and (await resp.json())["response"]["allowed"]


async def test_policy_reload_parses_off_the_event_loop(
        policy_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = webhook_module.check_text

    def recording(text: str):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return real(text)

    async with serve(policy_file, policy_interval=0.05) as client:
        monkeypatch.setattr(webhook_module, "check_text", recording)
        first = client.state.policies.policy.generation
        loop_thread = threading.current_thread().name
        policy_file.write_text(_add_team_c(policy_file.read_text()))
        await _wait_for(lambda: client.state.policies.policy.generation != first)
    assert threads and loop_thread not in threads
